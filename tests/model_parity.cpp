// The C++ model against the PyTorch reference (tests/reference/vwt_reference.py, float64, an
// explicit truncate/copy realisation of the resize): logits on several schedules and lengths,
// incremental decode vs full forward, batching, the static model, KV bytes, checkpoint round trip.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>
#include <vwt/vwt.hpp>

#include "support.hpp"

namespace {

using backend = vwt::cpu::backend<float>;
const std::filesystem::path reference_dir = VWT_REFERENCE_DIR;

template <class B = backend>
vwt::model<B> load(const std::string& name) {
    auto m = vwt::io::load_model_dir(reference_dir / name);
    const std::vector<typename B::weight_type> params(m.params.begin(), m.params.end());
    return vwt::model<B>(std::move(m.config), params);
}

using vwt_test::read_floats;
using vwt_test::relative_error;

template <class Model>
auto full_logits(const Model& m, const std::vector<int>& tokens, int threads = 2) {
    using B = typename Model::backend;
    auto cache = m.make_cache(static_cast<int>(tokens.size()));
    const vwt::sequence_input<B> in{&cache, tokens};
    typename B::context ctx{};
    if constexpr (requires { ctx.threads; }) ctx.threads = threads;
    return m.forward(ctx, std::span(&in, 1), vwt::logits_mode::all);
}

nlohmann::json manifest() {
    std::ifstream f(reference_dir / "manifest.json");
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
}

}  // namespace

TEMPLATE_TEST_CASE("logits match the PyTorch reference to 1e-4 relative", "", vwt::cpu::backend<float>,
                   vwt::reference::backend<double>) {
    for (const auto& e : manifest()) {
        const auto name = e["model"].get<std::string>();
        const auto tokens = e["tokens"].get<std::vector<int>>();
        CAPTURE(name, tokens.size());
        const auto m = load<TestType>(name);
        const auto expected = read_floats(reference_dir / name / e["logits"].get<std::string>());
        const auto got = full_logits(m, tokens);
        // float32 logits against a float64 reference; the reference policy computes in double.
        CHECK(relative_error(got, expected) < (std::is_same_v<typename TestType::compute_type, float> ? 1e-4 : 1e-6));
    }
}

// A checkpoint as the authors' code writes it (tests/reference/vwt_reference.py, authors_layout):
// their whole config.json (generator parameters, lm_engine's fields, dropout, bookkeeping), bf16
// tensors under save_pretrained's names in name order, 14 shards and an index. It loads with no
// warning through io::load_model for every weight format and gives the reference's logits.
TEST_CASE("a checkpoint in the authors' layout (sharded, bf16, their whole config) gives the reference's logits") {
    const auto dir = reference_dir / "authors_layout";
    std::vector<std::string> warnings;
    const vwt::io::log_function log = [&](const std::string& w) { warnings.push_back(w); };
    const auto f32 = vwt::io::load_model<backend>(dir, {2}, log);
    const auto bf16 = vwt::io::load_model<vwt::cpu::backend<float, vwt::bf16>>(dir, {2}, log);
    const auto ref = vwt::io::load_model<vwt::reference::backend<double>>(dir, {}, log);
    CHECK(warnings.empty());
    CHECK(f32.schedule().dims.kv_heads == 2);
    CHECK_FALSE(bf16.borrows_parameters());  // 14 files in name order: converted, not used in place
    const vwt::cpu::context exact{2, vwt::cpu::product_precision::f32};
    for (const auto& e : manifest()) {
        if (e["model"] != "authors_layout") continue;
        const auto tokens = e["tokens"].get<std::vector<int>>();
        CAPTURE(tokens.size());
        const auto expected = read_floats(dir / e["logits"].get<std::string>());
        const auto all = [&](const auto& m, const auto& ctx) {
            using B = typename std::remove_cvref_t<decltype(m)>::backend;
            auto cache = m.make_cache(static_cast<int>(tokens.size()));
            const vwt::sequence_input<B> in{&cache, tokens};
            return m.forward(ctx, std::span(&in, 1), vwt::logits_mode::all);
        };
        CHECK(relative_error(all(f32, backend::context{2}), expected) < 1e-4);
        CHECK(relative_error(all(bf16, exact), expected) < 1e-4);  // the same bf16 weights, widened exactly
        CHECK(relative_error(all(ref, vwt::reference::backend<double>::context{}), expected) < 1e-6);
    }
}

TEST_CASE("incremental decode equals the full forward") {
    for (const char* name : {"x_tiny_l8", "x_gqa", "x_narrow_ends", "x_zero_resize", "moe_x_top3", "moe_x_gqa_top2", "constant_residual",
                             "wide_unembedding_zero_narrow_in", "interpolate_narrow_in_wide_out", "linear", "gaussian",
                             "gaussian_narrow_in_wide_out"}) {
        CAPTURE(name);
        const auto m = load(name);
        std::vector<int> tokens;
        for (int i = 0; i < 20; ++i) tokens.push_back((i * 37 + 11) % 258);
        const auto full = full_logits(m, tokens);
        auto cache = m.make_cache(32);
        // prefill 5, then one token at a time
        std::vector<float> stepped;
        const std::vector<int> prefix(tokens.begin(), tokens.begin() + 5);
        vwt::sequence_input<backend> in{&cache, prefix};
        stepped = m.forward({1}, std::span(&in, 1), vwt::logits_mode::all);
        for (std::size_t t = 5; t < tokens.size(); ++t) {
            in.tokens = std::span(&tokens[t], 1);
            const auto row = m.forward({1}, std::span(&in, 1), vwt::logits_mode::last);
            stepped.insert(stepped.end(), row.begin(), row.end());
        }
        CHECK(cache.length() == 20);
        CHECK(relative_error(stepped, full) < 1e-5);
    }
}

// Decode routes its one token and runs only the experts it chose: with every other expert's
// weights set to NaN, the logits stay bit-identical (a layer that ran all experts and masked the
// unchosen ones would turn them into NaN).
TEST_CASE("an MoE decode step uses only its token's experts' weights") {
    auto loaded = vwt::io::load_model_dir(reference_dir / "moe_x_top3");
    const auto& s = loaded.config.schedule;
    const vwt::model<backend> clean(loaded.config, loaded.params);
    const std::vector<int> prompt{5, 77, 200, 13, 9}, next{42};
    const backend::context ctx{1};
    auto ws = clean.make_workspace(ctx, 8, 16);
    auto c1 = clean.make_cache(16), c2 = clean.make_cache(16);
    for (auto* c : {&c1, &c2}) {
        const vwt::sequence_input<backend> in{c, prompt};
        clean.forward(ctx, ws, std::span(&in, 1));
    }
    const vwt::sequence_input<backend> step1{&c1, next};
    const auto logits = clean.forward(ctx, ws, std::span(&step1, 1));
    const std::vector<float> expected(logits.data(), logits.data() + logits.cols());
    // the experts the decode step chose, from the workspace's offsets of that pass
    const auto offsets = ws.expert_offsets();
    const int E = s.dims.moe.experts;
    auto poisoned = loaded.params;
    const vwt::parameter_layout layout(loaded.config);
    int unused = 0;
    for (int i = 0; i < s.layers(); ++i) {
        const int* o = offsets.data() + i * (E + 1);
        CHECK(o[E] == s.dims.moe.experts_per_token);
        for (int e = 0; e < E; ++e) {
            if (o[e + 1] > o[e]) continue;
            ++unused;
            for (const char* name : {"mlp_block.c_fc.weight", "mlp_block.c_proj.weight"}) {
                const auto& t = layout.at(vwt::layer_prefix(i) + name);
                const auto per_expert = t.numel() / E;
                std::fill_n(poisoned.begin() + t.offset + e * per_expert, per_expert, std::numeric_limits<float>::quiet_NaN());
            }
        }
    }
    CHECK(unused == s.layers() * (E - s.dims.moe.experts_per_token));
    const vwt::model<backend> sparse(loaded.config, poisoned);
    const vwt::sequence_input<backend> step2{&c2, next};
    const auto got = sparse.forward(ctx, ws, std::span(&step2, 1));
    CHECK(std::vector<float>(got.data(), got.data() + got.cols()) == expected);
}

TEST_CASE("a batch of prompts of different lengths equals each prompt alone") {
    for (const char* name : {"x_tiny_l6", "moe_x_top3"}) {  // an MoE model routes the batch's rows together
        CAPTURE(name);
        const auto m = load(name);
        const std::vector<int> a{1, 2, 3, 4, 5, 6, 7, 8, 9}, b{200, 100}, c{42, 43, 44, 45};
        auto ca = m.make_cache(16), cb = m.make_cache(16), cc = m.make_cache(16);
        const vwt::sequence_input<backend> batch[] = {{&ca, a}, {&cb, b}, {&cc, c}};
        const auto together = m.forward({2}, batch, vwt::logits_mode::last);
        const int V = m.vocab();
        for (int i = 0; i < 3; ++i) {
            const auto alone = full_logits(m, i == 0 ? a : i == 1 ? b : c, 1);
            const std::vector<float> last(alone.end() - V, alone.end());
            const std::vector<float> row(together.begin() + i * V, together.begin() + (i + 1) * V);
            CHECK(relative_error(row, last) < 1e-5);
        }
    }
}

TEST_CASE("the static (compile-time tuple) model equals the dynamic one") {
    constexpr auto S = vwt::make_schedule<6>(vwt::presets::tiny_l6);
    auto loaded = vwt::io::load_model_dir(reference_dir / "x_tiny_l6");
    loaded.config.schedule.dims.vocab = 258;
    // The reference stores context 256, the preset too; both schedules must be equal.
    REQUIRE(loaded.config.schedule == vwt::dynamic_schedule(S));
    const vwt::static_model<backend, S> fixed(loaded.config, loaded.params);
    const vwt::model<backend> dyn(loaded.config, loaded.params);
    const std::vector<int> tokens{5, 6, 7, 8, 9, 10};
    auto c1 = fixed.make_cache(8), c2 = dyn.make_cache(8);
    const vwt::sequence_input<backend> i1{&c1, tokens}, i2{&c2, tokens};
    // Static extents let Eigen reduce a row in another order (fixed-size arrays), so the two agree
    // to rounding, not bit for bit; both are checked against PyTorch above.
    CHECK(relative_error(fixed.forward({1}, std::span(&i1, 1), vwt::logits_mode::all),
                         dyn.forward({1}, std::span(&i2, 1), vwt::logits_mode::all)) < 1e-6);
    auto other = loaded.config;
    other.schedule = vwt::make_schedule(vwt::presets::tiny_l8);
    CHECK_THROWS_WITH((vwt::static_model<backend, S>(other, loaded.params)),
                      Catch::Matchers::Contains("do not match the compiled schedule"));
}

TEST_CASE("the KV cache stores exactly the accounting's bytes per token, in f32 and in bf16") {
    for (const char* name : {"x_tiny_l8", "x_gqa", "uniform_mup"}) {
        CAPTURE(name);
        const auto m = load(name);
        const auto cache = m.make_cache(100);
        const auto costs = vwt::account(m.schedule(), {0, 4, 4});
        CHECK(cache.bytes_per_token() == costs.kv_bytes_per_token);
        CHECK(cache.allocated_bytes() == 100 * costs.kv_bytes_per_token);
        const auto narrow = m.make_cache(100, vwt::kv_dtype::bf16);
        const auto costs_bf16 = vwt::account(m.schedule(), {0, 2, 4});
        CHECK(narrow.bytes_per_token() == costs_bf16.kv_bytes_per_token);
        CHECK(narrow.allocated_bytes() == 100 * costs_bf16.kv_bytes_per_token);
        // A session holds the cache it was asked for.
        const vwt::session<vwt::model<backend>> s(m, {1}, 100, 16, vwt::kv_dtype::bf16);
        CHECK(s.cache().bytes_per_token() == costs_bf16.kv_bytes_per_token);
    }
}

// Logits of a bf16 KV cache: prompt, then decode step by step, against (a) the same tokens in one
// forward over a bf16 cache (a chunk's keys are rounded before its own queries read them, so the
// result does not depend on how the tokens were chunked) and (b) the f32 cache, which they follow
// to the rounding of keys and values (2^-9 relative per value): 2-3e-5 measured on these models,
// stated tolerance 1e-3 relative.
TEST_CASE("a bf16 KV cache: chunking does not change the logits, which follow the f32 cache within 1e-3") {
    for (const char* name : {"x_tiny_l8", "x_gqa", "x_narrow_ends"}) {
        CAPTURE(name);
        const auto m = load(name);
        std::vector<int> tokens;
        for (int i = 0; i < 90; ++i) tokens.push_back((i * 53 + 7) % 258);
        const auto run = [&](vwt::kv_dtype kv, std::size_t prompt) {
            auto cache = m.make_cache(128, kv);
            backend::context ctx{2};
            vwt::sequence_input<backend> in{&cache, std::span(tokens).first(prompt)};
            auto logits = m.forward(ctx, std::span(&in, 1), vwt::logits_mode::all);
            for (std::size_t t = prompt; t < tokens.size(); ++t) {
                in.tokens = std::span(&tokens[t], 1);
                const auto row = m.forward(ctx, std::span(&in, 1), vwt::logits_mode::last);
                logits.insert(logits.end(), row.begin(), row.end());
            }
            return logits;
        };
        const auto stepped = run(vwt::kv_dtype::bf16, 70), whole = run(vwt::kv_dtype::bf16, tokens.size());
        const auto f32 = run(vwt::kv_dtype::compute, 70);
        CHECK(relative_error(stepped, whole) < 1e-5);
        const double drift = relative_error(stepped, f32);
        CHECK(drift < 1e-3);
        CHECK(drift > 0);  // the keys and values really were rounded
    }
}

TEST_CASE("a bf16 KV cache on the reference policy computes what the CPU policy computes") {
    const auto cpu = load("x_gqa");
    const auto ref = load<vwt::reference::backend<double>>("x_gqa");
    std::vector<int> tokens;
    for (int i = 0; i < 30; ++i) tokens.push_back((i * 31 + 3) % 258);
    auto c1 = cpu.make_cache(64, vwt::kv_dtype::bf16);
    auto c2 = ref.make_cache(64, vwt::kv_dtype::bf16);
    const vwt::sequence_input<backend> a{&c1, tokens};
    const vwt::sequence_input<vwt::reference::backend<double>> b{&c2, tokens};
    const auto got = cpu.forward({2}, std::span(&a, 1), vwt::logits_mode::all);
    const auto want = ref.forward({}, std::span(&b, 1), vwt::logits_mode::all);
    CHECK(relative_error(got, std::vector<float>(want.begin(), want.end())) < 1e-4);
}

TEST_CASE("a bf16 KV cache needs a workspace made for it") {
    const auto m = load("x_tiny_l8");
    auto cache = m.make_cache(32, vwt::kv_dtype::bf16);
    auto ws = m.make_workspace({1}, 8, 32);
    const std::vector<int> tokens{1, 2, 3};
    const vwt::sequence_input<backend> in{&cache, tokens};
    CHECK_THROWS_WITH(m.forward({1}, ws, std::span(&in, 1)), Catch::Matchers::Contains("bf16 KV cache"));
    auto bf16_ws = m.make_workspace({1}, 8, 32, vwt::kv_dtype::bf16);
    CHECK_NOTHROW(m.forward({1}, bf16_ws, std::span(&in, 1)));
}

TEST_CASE("save and load round-trip bit-exactly in F32, F16 and BF16") {
    const auto dir = std::filesystem::temp_directory_path() / "vwt_roundtrip_test";
    std::filesystem::remove_all(dir);
    for (const char* name : {"x_tiny_l6", "x_bf16", "x_f16", "constant_residual", "wide_unembedding_zero_narrow_in", "interpolate",
                             "linear_llama_gqa", "gaussian"}) {
        CAPTURE(name);
        const auto loaded = vwt::io::load_model_dir(reference_dir / name);
        const auto type = std::string(name) == "x_bf16" ? vwt::io::dtype::bf16
                          : std::string(name) == "x_f16" ? vwt::io::dtype::f16 : vwt::io::dtype::f32;
        vwt::io::save_model_dir(dir / name, loaded.config, loaded.params, type);
        const auto back = vwt::io::load_model_dir(dir / name);
        CHECK(back.params == loaded.params);  // values already representable: exact
        CHECK(back.config.schedule == loaded.config.schedule);
        CHECK(back.config.m_emb == loaded.config.m_emb);
        CHECK(back.config.resize == loaded.config.resize);
        CHECK(back.config.resize_seed == loaded.config.resize_seed);
        CHECK(back.config.interpolate_align_corners == loaded.config.interpolate_align_corners);
        // Writing what was read gives the same bytes again.
        vwt::io::save_model_dir(dir / "again", back.config, back.params, type);
        CHECK(vwt::io::read_file_bytes(dir / "again" / "model.safetensors") ==
              vwt::io::read_file_bytes(dir / name / "model.safetensors"));
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("config widths that disagree with their generator parameters are reported") {
    auto spec = vwt::presets::tiny_l8;
    const auto s = vwt::make_schedule(spec);
    auto j = vwt::io::config_to_json(vwt::model_config::mup(s), &spec);
    std::vector<std::string> logged;
    const vwt::io::log_function log = [&](const std::string& m) { logged.push_back(m); };
    vwt::io::config_from_json(j, "c.json", log);
    CHECK(logged.empty());
    auto widths = j["widths"].get<std::vector<int>>();
    widths[3] += 8;
    j["widths"] = widths;
    j["mlp_blocks"][3]["intermediate_size"] = 4 * widths[3];
    const auto c = vwt::io::config_from_json(j, "c.json", log);
    REQUIRE(logged.size() == 1);
    CHECK_THAT(logged[0], Catch::Matchers::Contains("other widths than the 'widths' list"));
    CHECK(c.schedule.widths == widths);  // `widths` is trusted
}
