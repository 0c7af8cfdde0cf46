// safetensors and checkpoint validation: every malformed file named in ecosystem.md is rejected
// with a message naming the file and the fault; good files (including another writer's layout)
// are read exactly. Run under ASan/UBSan in CI.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <vwt/vwt.hpp>

using Catch::Matchers::Contains;

namespace {

std::vector<std::uint8_t> file_with(const std::string& header, std::size_t data_bytes, std::int64_t declared = -1) {
    const std::uint64_t n = declared >= 0 ? static_cast<std::uint64_t>(declared) : header.size();
    std::string text;
    for (int i = 0; i < 8; ++i) text.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    text += header;
    for (std::size_t i = 0; i < data_bytes; ++i) text.push_back(static_cast<char>(i));
    return {text.begin(), text.end()};
}

void rejects(const std::vector<std::uint8_t>& bytes, const std::string& message) {
    CAPTURE(message);
    CHECK_THROWS_WITH(vwt::io::safetensors_view(bytes, "bad.safetensors"),
                      Contains("safetensors 'bad.safetensors'") && Contains(message));
}

}  // namespace

TEST_CASE("safetensors: structural faults are rejected with a reason") {
    rejects({1, 2, 3}, "shorter than the 8-byte header length");
    rejects(file_with("{}", 0, 200'000'000), "exceeds the limit of 100000000 bytes");
    rejects(file_with("{}", 0, 50), "header length 50 is larger than the 2 bytes after the length");
    rejects(file_with("{\"a\": ", 0), "header: not valid JSON");
    rejects(file_with("{\"a\": \"\xff\xfe\"}", 0), "header: not valid JSON");
    rejects(file_with("{\"a\": 1e400}", 0), "header: not valid JSON");
    rejects(file_with("{\"a\": " + std::string(200, '[') + std::string(200, ']') + "}", 0), "nested deeper than 4 levels");
    rejects(file_with("[1, 2]", 0), "header is not a JSON object");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
            "the key 't' appears twice");
    rejects(file_with(R"({"t":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype 'F33'");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative integers");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4), "shape is not a list");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4), "begin 4 > end 0");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "needs 8");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", 4),
            "shape size overflows");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "beyond the 4-byte data buffer");
    rejects(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 8),
            "overlaps the previous tensor");
    rejects(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "gap of 4 bytes before tensor 'a'");
    rejects(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6), "(trailing bytes)");
    rejects(file_with(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "has no 'data_offsets'");
    rejects(file_with(R"({"__metadata__":{"format":1}})", 0), "__metadata__ value of 'format' is not a string");
    rejects(file_with(R"({"__metadata__":[]})", 0), "__metadata__ is not an object");
}

TEST_CASE("safetensors: a valid file is read exactly, in every float dtype") {
    const auto dir = std::filesystem::temp_directory_path() / "vwt_st_test";
    std::filesystem::create_directories(dir);
    const std::vector<float> a{1.0f, -2.5f, 3.25f, 0.0f, 65504.0f, -0.0009765625f};
    const std::vector<float> b{0.1f, 0.2f};
    for (auto type : {vwt::io::dtype::f32, vwt::io::dtype::f16, vwt::io::dtype::bf16}) {
        const vwt::io::tensor_to_write t[] = {{"a", {2, 3}, a}, {"b", {2}, b}};
        vwt::io::write_safetensors(dir / "t.safetensors", t, type);
        const auto bytes = vwt::io::read_file_bytes(dir / "t.safetensors");
        std::uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = n << 8 | bytes[static_cast<std::size_t>(i)];
        CHECK(n % 8 == 0);
        CHECK(bytes[8] == '{');
        const vwt::io::safetensors_view st(bytes, "t.safetensors");
        CHECK(st.metadata().at("format") == "pt");
        REQUIRE(st.find("a"));
        CHECK(st.find("a")->shape == std::vector<std::int64_t>{2, 3});
        std::vector<float> back(6);
        st.read_as(*st.find("a"), back.data());
        CHECK(back[0] == 1.0f);
        CHECK(back[1] == -2.5f);
        CHECK(back[2] == 3.25f);
        if (type == vwt::io::dtype::bf16) CHECK(back[4] == 65536.0f);
        else CHECK(back[4] == 65504.0f);
        CHECK(back[5] == -0.0009765625f);
        std::vector<float> bb(2);
        st.read_as(*st.find("b"), bb.data());
        CHECK(bb[0] == Approx(0.1f).epsilon(type == vwt::io::dtype::f32 ? 0 : 4e-3));
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("safetensors: a zero dimension does not hide an overflowing shape") {
    rejects(file_with(R"({"t":{"dtype":"U8","shape":[4611686018427387904,2,0],"data_offsets":[0,0]}})", 0), "shape size overflows");
    rejects(file_with(R"({"t":{"dtype":"F32","shape":[9223372036854775807,0],"data_offsets":[0,0]}})", 0), "shape size overflows");
    const auto ok = file_with(R"({"t":{"dtype":"F32","shape":[1000,0],"data_offsets":[0,0]}})", 0);
    const vwt::io::safetensors_view st(ok, "ok.safetensors");
    CHECK(st.find("t")->numel() == 0);
}

TEST_CASE("config: the authors' use_interleaved_weights selects the c_fc layout, both ways") {
    auto c = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));
    c.mlp = vwt::swiglu_layout::interleaved;
    const auto j = vwt::io::config_to_json(c);
    CHECK(j["mlp_blocks"][3]["use_interleaved_weights"] == true);
    CHECK(vwt::io::config_from_json(j, "c.json").mlp == vwt::swiglu_layout::interleaved);
    auto split = j;
    for (auto& b : split["mlp_blocks"]) b["use_interleaved_weights"] = false;
    CHECK(vwt::io::config_from_json(split, "c.json").mlp == vwt::swiglu_layout::split);
    // lm_engine's default when the field is absent: not interleaved.
    for (auto& b : split["mlp_blocks"]) b.erase("use_interleaved_weights");
    CHECK(vwt::io::config_from_json(split, "c.json").mlp == vwt::swiglu_layout::split);
}

TEST_CASE("config: attention_multiplier is the authors' score scale; null means 1/sqrt(head dim)") {
    const auto c = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));
    auto j = vwt::io::config_to_json(c);
    CHECK(vwt::io::config_from_json(j, "c.json").attention_scale(2) == Approx(1.0 / c.schedule.head_dim(2)).epsilon(1e-15));
    j["sequence_mixer_blocks"][2]["attention_multiplier"] = nullptr;
    CHECK(vwt::io::config_from_json(j, "c.json").attention_scale(2) == Approx(1.0 / std::sqrt(c.schedule.head_dim(2))));
    j["sequence_mixer_blocks"][2]["attention_multiplier"] = 0.5;
    CHECK(vwt::io::config_from_json(j, "c.json").attention_scale(2) == 0.5);
}

TEST_CASE("half conversions round to nearest even and handle the edges") {
    using namespace vwt::io;
    CHECK(f16_to_f32(0x3c00) == 1.0f);
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
    CHECK(f16_to_f32(0x7bff) == 65504.0f);
    CHECK(std::isinf(f16_to_f32(0x7c00)));
    CHECK(f32_to_f16(1.0f) == 0x3c00);
    CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);   // 1.5 ulp rounds to even (2)
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie to even
    CHECK(f32_to_f16(1e6f) == 0x7c00);
    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    // Every half converts to float and back unchanged.
    for (std::uint32_t h = 0; h < 0x7c00; ++h) REQUIRE(f32_to_f16(f16_to_f32(static_cast<std::uint16_t>(h))) == h);
}

namespace {
// A tiny_l6 model directory of its own (test cases run in parallel processes: one name each).
struct model_dir {
    std::filesystem::path dir;
    vwt::model_config config = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));
    std::vector<float> params;
    explicit model_dir(const std::string& name) : dir(std::filesystem::temp_directory_path() / name) {
        std::filesystem::remove_all(dir);
        vwt::parameter_layout layout(config);
        vwt::initialize_parameters(config, layout, 7, params);
        vwt::io::save_model_dir(dir, config, params);
    }
    ~model_dir() { std::filesystem::remove_all(dir); }
    void write(const std::string& file, const std::string& text) const { std::ofstream(dir / file) << text; }
};
}  // namespace

TEST_CASE("model directories: bad configs and mismatched tensors are named") {
    model_dir m("vwt_bad_model");
    CHECK_NOTHROW(vwt::io::load_model_dir(m.dir));
    CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir / "nope"), Contains("does not exist"));

    SECTION("truncated weights") {
        auto bytes = vwt::io::read_file_bytes(m.dir / "model.safetensors");
        bytes.resize(bytes.size() - 100);
        std::ofstream(m.dir / "model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                                            static_cast<std::streamsize>(bytes.size()));
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("model.safetensors") && Contains("is beyond the"));
    }
    SECTION("config widths that do not fit the weights") {
        auto j = vwt::io::config_to_json(m.config);
        j["widths"] = {144, 88, 48, 32, 64, 136};
        j["mlp_blocks"][5]["intermediate_size"] = 4 * 136;
        m.write("config.json", j.dump());
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir),
                          Contains("tensor 'transformer.h.5.ln_1.weight' has shape [144], the schedule needs [136]"));
    }
    SECTION("a width the heads do not divide") {
        auto j = vwt::io::config_to_json(m.config);
        j["widths"] = {144, 88, 48, 30, 64, 144};
        j["mlp_blocks"][3]["intermediate_size"] = 4 * 30;
        m.write("config.json", j.dump());
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("config.json") && Contains("width 30 of layer 4"));
    }
    SECTION("missing and unexpected tensors") {
        const auto layout = vwt::parameter_layout(m.config);
        std::vector<vwt::io::tensor_to_write> t;
        for (const auto& info : layout.tensors())
            if (info.name != "lm_head.weight")
                t.push_back({info.name, info.shape, std::span<const float>(m.params).subspan(
                                                        static_cast<std::size_t>(info.offset), static_cast<std::size_t>(info.numel()))});
        vwt::io::write_safetensors(m.dir / "model.safetensors", t, vwt::io::dtype::f32);
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("missing tensor 'lm_head.weight'"));
        const float extra[] = {1.0f};
        t.push_back({"lm_head.weight", layout.at("lm_head.weight").shape,
                     std::span<const float>(m.params).subspan(static_cast<std::size_t>(layout.at("lm_head.weight").offset),
                                                              static_cast<std::size_t>(layout.at("lm_head.weight").numel()))});
        t.push_back({"transformer.extra", {1}, extra});
        vwt::io::write_safetensors(m.dir / "model.safetensors", t, vwt::io::dtype::f32);
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("unexpected tensor 'transformer.extra'"));
    }
    SECTION("config faults") {
        m.write("config.json", "{not json");
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("config.json") && Contains("not valid JSON"));
        // One field changed from a good config, and the message that must name it.
        const auto rejects_config = [&](const auto& change, const std::string& message) {
            auto j = vwt::io::config_to_json(m.config);
            change(j);
            m.write("config.json", j.dump());
            CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains(message));
        };
        rejects_config([](auto& j) { j.erase("widths"); }, "missing field 'widths'");
        rejects_config([](auto& j) { j["model_type"] = "llama"; }, "model_type 'llama'");
        rejects_config([](auto& j) { j["hidden_size"] = "ninety-six"; }, "field 'hidden_size' is not an integer");
        rejects_config([](auto& j) { j["expand_method"] = "conv_diff"; },
                       "field 'expand_method' is 'conv_diff'; vwt implements move_up, zero, interpolate, linear, gaussian");
        rejects_config([](auto& j) { j["tie_word_embeddings"] = true; }, "tied embeddings are not supported");
        rejects_config([](auto& j) { j.erase("tie_word_embeddings"); }, "absent (tied, lm_engine's default)");
        // Numbers: integers must be integers, in range; nothing wraps or truncates.
        rejects_config([](auto& j) { j["widths"][0] = 48.5; }, "field 'widths[0]' is 48.5, not an integer");
        rejects_config([](auto& j) { j["hidden_size"] = 4294967328LL; }, "field 'hidden_size' is 4294967328, above the limit of 65536");
        rejects_config([](auto& j) { j["vocab_size"] = 1e20; }, "field 'vocab_size' is 1e+20, not an integer");
        rejects_config([](auto& j) { j["vocab_size"] = -5; }, "field 'vocab_size' is -5, below the minimum of 1");
        rejects_config([](auto& j) { j["num_layers"] = 20000; }, "field 'num_layers' is 20000, above the limit of 4096");
        rejects_config([](auto& j) { j["widths"][2] = 1 << 30; }, "field 'widths[2]' is 1073741824, above the limit of 65536");
        rejects_config([](auto& j) { j["widths"] = {144, 88}; }, "field 'widths' holds 2 values, expected 6");
        rejects_config([](auto& j) { j["m_width"] = 0; }, "field 'm_width' is 0, outside");
        rejects_config([](auto& j) { j["bos_token_id"] = 300; }, "field 'bos_token_id' is 300, above the limit of 257");
        // What vwt does not implement is refused, not ignored (lm_engine's defaults count).
        rejects_config([](auto& j) { j["mlp_blocks"][2]["mlp_type"] = "MoE"; },
                       "'mlp_blocks[2].mlp_type' differs from layer 0's; vwt needs every MLP dense or every MLP MoE");
        rejects_config([](auto& j) { j["mlp_blocks"][2]["mlp_type"] = "Energy"; }, "field 'mlp_blocks[2].mlp_type' is 'Energy'; vwt implements MLP, MoE");
        rejects_config([](auto& j) { j["mlp_blocks"][0]["activation_function"] = "gelu"; },
                       "field 'mlp_blocks[0].activation_function' is 'gelu'; vwt implements swiglu");
        rejects_config([](auto& j) { j["mlp_blocks"][0].erase("activation_function"); },
                       "is 'gelu_pytorch_tanh' (the default of the authors' format); vwt implements swiglu");
        rejects_config([](auto& j) { j["mlp_blocks"][1]["add_bias"] = true; }, "'mlp_blocks[1].add_bias' is true: MLP biases are not implemented");
        rejects_config([](auto& j) { j["mlp_blocks"][1]["use_interleaved_weights"] = true; }, "differs from layer 0's");
        rejects_config([](auto& j) { j["sequence_mixer_blocks"][4]["add_bias"] = true; }, "attention biases are not implemented");
        rejects_config([](auto& j) { j["sequence_mixer_blocks"][4]["sequence_mixer_type"] = "mamba2"; },
                       "'sequence_mixer_blocks[4].sequence_mixer_type' is 'mamba2'; vwt implements softmax_attention");
        rejects_config([](auto& j) { j["sequence_mixer_blocks"][4]["sliding_window"] = 128; }, "sliding-window attention is not implemented");
        rejects_config([](auto& j) { j["normalization_function"] = "layernorm"; }, "'normalization_function' is 'layernorm'; vwt implements rmsnorm");
        rejects_config([](auto& j) { j.erase("normalization_function"); }, "(the default of the authors' format)");
        rejects_config([](auto& j) { j["position_embedding_type"] = "learned_absolute"; }, "vwt implements rope");
        rejects_config([](auto& j) { j["rope_scaling"] = {{"type", "linear"}}; }, "RoPE scaling is not implemented");
        rejects_config([](auto& j) { j["wide_unembedding"] = true; }, "wide_unembedding needs original_output_width false");
        rejects_config([](auto& j) { j["fixed_residual_width"] = true, j["original_input_width"] = false; },
                       "fixed_residual_width needs original_input_width");
        rejects_config([](auto& j) { j["embedding_width"] = 8; }, "field 'embedding_width' is 8");
        rejects_config([](auto& j) { j["original_output_width"] = false; }, "field 'unembedding_width' is");
        rejects_config([](auto& j) { j["vwt_mlp_layout"] = "interleaved"; }, "disagree");
    }
    SECTION("malformed JSON numbers and nesting are errors, not crashes") {
        const auto text = vwt::io::config_to_json(m.config).dump();
        std::string huge = text;
        huge.replace(huge.find("\"m_emb\":") + 8, 4, "1e400");
        m.write("config.json", huge);
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("config.json") && Contains("not valid JSON"));
        std::string deep = text;
        deep.replace(deep.find("\"sequence_mixer_blocks\":[") + 25, 0, std::string(100000, '[') + std::string(100000, ']') + ",");
        m.write("config.json", deep);
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("config.json") && Contains("nested deeper than 64 levels"));
    }
    SECTION("the config is checked against the weights before anything is allocated") {
        // 4000 layers of width 65536 would be ~800 TB of parameters: the missing tensor is reported
        // (a std::bad_alloc here would mean the buffer was allocated first).
        auto j = vwt::io::config_to_json(m.config);
        j["num_layers"] = 4000;
        j["hidden_size"] = 65536;
        j["widths"] = std::vector<int>(4000, 65536);
        j["embedding_width"] = j["unembedding_width"] = 65536;
        j["sequence_mixer_blocks"] = std::vector<nlohmann::ordered_json>(4000, j["sequence_mixer_blocks"][0]);
        auto mlp = j["mlp_blocks"][0];
        mlp["intermediate_size"] = 4 * 65536;
        j["mlp_blocks"] = std::vector<nlohmann::ordered_json>(4000, mlp);
        m.write("config.json", j.dump());
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("tensor 'transformer.wte.weight' has shape [258, 96], the schedule needs [258, 65536]"));
        std::filesystem::remove(m.dir / "config.json");
        std::filesystem::create_directory(m.dir / "config.json");
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("config.json") && Contains("not a regular file"));
    }
    SECTION("a generator with quantize_to 0 or absurd factors is reported, not converted") {
        auto spec = vwt::presets::tiny_l6;
        auto j = vwt::io::config_to_json(m.config, &spec);
        std::vector<std::string> logged;
        const vwt::io::log_function log = [&](const std::string& w) { logged.push_back(w); };
        for (const auto& [key, value] : std::vector<std::pair<std::string, double>>{{"quantize_to", 0}, {"expansion_factor", 1e300}}) {
            auto bad = j;
            bad[key] = value;
            if (key == "quantize_to") bad[key] = 0;
            m.write("config.json", bad.dump());
            logged.clear();
            CHECK_NOTHROW(vwt::io::load_model_dir(m.dir, log));
            REQUIRE(logged.size() == 1);
            CHECK_THAT(logged[0], Contains("do not form a schedule; using 'widths'"));
        }
    }
    SECTION("a weights file that is a directory") {
        std::filesystem::remove(m.dir / "model.safetensors");
        std::filesystem::create_directory(m.dir / "model.safetensors");
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("model.safetensors") && Contains("not a regular file"));
    }
    SECTION("unsupported tensor dtype") {
        auto bytes = vwt::io::read_file_bytes(m.dir / "model.safetensors");
        const std::string text(bytes.begin(), bytes.end());
        const auto at = text.find("\"F32\"");
        REQUIRE(at != std::string::npos);
        std::memcpy(bytes.data() + at, "\"I32\"", 5);
        std::ofstream(m.dir / "model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                                            static_cast<std::streamsize>(bytes.size()));
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("has dtype I32; F32, F16, BF16 or F64 expected"));
    }
}

namespace {
// Logits of a model over a few tokens (to compare models loaded different ways).
template <class B>
std::vector<float> logits_of(const vwt::model<B>& m) {
    const std::vector<int> tokens{5, 77, 200, 3, 41, 9, 120};
    auto cache = m.make_cache(16);
    const vwt::sequence_input<B> in{&cache, tokens};
    return m.forward(typename B::context{}, std::span(&in, 1), vwt::logits_mode::all);
}
std::vector<std::string> files_in(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}
}  // namespace

TEST_CASE("sharded checkpoints: save_pretrained's names and index, read back exactly, faults named") {
    model_dir m("vwt_sharded_model");
    const vwt::parameter_layout layout(m.config);
    // tiny_l6 in F32 is ~1.1 MB: shards of at most 200 kB
    vwt::io::save_model_dir(m.dir, m.config, m.params, vwt::io::dtype::f32, nullptr, 200'000);
    const auto names = files_in(m.dir);
    CHECK(std::find(names.begin(), names.end(), "model.safetensors") == names.end());  // the single file it replaced is gone
    REQUIRE(std::find(names.begin(), names.end(), "model.safetensors.index.json") != names.end());
    std::size_t shards = 0;
    for (const auto& n : names) shards += n.starts_with("model-") ? 1 : 0;
    REQUIRE(shards >= 5);
    char last[64];
    std::snprintf(last, sizeof last, "model-%05zu-of-%05zu.safetensors", shards, shards);
    CHECK(std::find(names.begin(), names.end(), std::string(last)) != names.end());
    const auto index = nlohmann::json::parse(std::ifstream(m.dir / "model.safetensors.index.json"));
    std::map<std::string, int> tensors_in;
    for (const auto& [tensor, shard] : index["weight_map"].items()) ++tensors_in[shard.get<std::string>()];
    for (const auto& n : names)  // at most the limit (+ its header), or one tensor larger than it
        if (n.starts_with("model-")) CHECK((std::filesystem::file_size(m.dir / n) <= 200'000 + 4096 || tensors_in[n] == 1));
    CHECK(index["metadata"]["total_size"].get<std::int64_t>() == layout.size() * 4);
    CHECK(index["weight_map"].size() == layout.tensors().size());
    CHECK(index["weight_map"]["lm_head.weight"].get<std::string>() == last);

    CHECK(vwt::io::load_model_dir(m.dir).params == m.params);
    const auto sharded = vwt::io::load_model<vwt::cpu::backend<float>>(m.dir);
    CHECK_FALSE(sharded.borrows_parameters());
    CHECK(logits_of(sharded) == logits_of(vwt::model<vwt::cpu::backend<float>>(m.config, m.params)));

    const auto rewrite_index = [&](const auto& change) {
        auto j = index;
        change(j);
        m.write("model.safetensors.index.json", j.dump());
    };
    SECTION("a shard that is missing") {
        std::filesystem::remove(m.dir / last);
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains(last) && Contains("no such file"));
    }
    SECTION("a shard name that leaves the directory") {
        rewrite_index([](auto& j) { j["weight_map"]["lm_head.weight"] = "../model-00001-of-00001.safetensors"; });
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("is not a file name in the directory"));
    }
    SECTION("a tensor the index puts in another shard") {
        rewrite_index([](auto& j) { j["weight_map"]["lm_head.weight"] = "model-00001-of-" + std::string(j["weight_map"]["lm_head.weight"]).substr(15); });
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("tensor 'lm_head.weight' is not mapped to this shard"));
    }
    SECTION("a tensor the index does not name, a total size that does not add up") {
        rewrite_index([](auto& j) { j["weight_map"]["transformer.extra"] = j["weight_map"]["lm_head.weight"]; });
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("unexpected tensor 'transformer.extra'"));
        rewrite_index([](auto& j) { j["metadata"]["total_size"] = 12; });
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("metadata.total_size 12 but the shards hold"));
        rewrite_index([](auto& j) { j.erase("weight_map"); });
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("no \"weight_map\" object"));
    }
    SECTION("both forms at once are refused; saving one form removes the other") {
        vwt::io::write_safetensors(m.dir / "model.safetensors", std::vector<vwt::io::tensor_to_write>{}, vwt::io::dtype::f32);
        CHECK_THROWS_WITH(vwt::io::load_model_dir(m.dir), Contains("holds both model.safetensors and model.safetensors.index.json"));
        vwt::io::save_model_dir(m.dir, m.config, m.params);
        CHECK(files_in(m.dir) == std::vector<std::string>{"config.json", "model.safetensors"});
        CHECK(vwt::io::load_model_dir(m.dir).params == m.params);
    }
}

TEST_CASE("load_model uses a vwt-written file in place when it is the parameter buffer, else converts tensor by tensor") {
    model_dir m("vwt_in_place_model");
    using f32_backend = vwt::cpu::backend<float>;
    using bf16_backend = vwt::cpu::backend<float, vwt::bf16>;
    using q8_backend = vwt::cpu::backend<float, vwt::q8_block>;
    const vwt::parameter_layout layout(m.config);
    const auto want_f32 = logits_of(vwt::model<f32_backend>(m.config, m.params));

    // F32 file, f32 weights: in place, the same logits bit for bit (the data starts 64-byte aligned)
    {
        const auto a = vwt::io::load_model<f32_backend>(m.dir);
        CHECK(a.borrows_parameters());
        CHECK(reinterpret_cast<std::uintptr_t>(a.parameters().data()) % 64 == 0);
        CHECK(logits_of(a) == want_f32);
    }
    // F32 file, bf16 and q8 weights: converted as convert_parameters converts them
    {
        const auto b = vwt::io::load_model<bf16_backend>(m.dir);
        CHECK_FALSE(b.borrows_parameters());
        CHECK(logits_of(b) == logits_of(vwt::model<bf16_backend>(m.config, vwt::convert_parameters<vwt::bf16>(layout, m.params))));
    }
    // BF16 file: in place for bf16 weights; widened for f32 weights
    vwt::io::save_model_dir(m.dir, m.config, m.params, vwt::io::dtype::bf16);
    const auto rounded = vwt::io::load_model_dir(m.dir).params;
    {
        const auto b = vwt::io::load_model<bf16_backend>(m.dir);
        CHECK(b.borrows_parameters());
        CHECK(logits_of(b) == logits_of(vwt::model<bf16_backend>(m.config, vwt::convert_parameters<vwt::bf16>(layout, rounded))));
        const auto f = vwt::io::load_model<f32_backend>(m.dir);
        CHECK_FALSE(f.borrows_parameters());
        CHECK(logits_of(f) == logits_of(vwt::model<f32_backend>(m.config, rounded)));
    }
    // The reference policy's memory is not the host's: converted, uploaded, the same model.
    CHECK(logits_of(vwt::io::load_model<vwt::reference::backend<float>>(m.dir)) ==
          logits_of(vwt::model<vwt::reference::backend<float>>(m.config, rounded)));
    // Tensors in another order (another writer): converted, the same model.
    {
        std::vector<vwt::io::tensor_to_write> reversed;
        for (auto it = layout.tensors().rbegin(); it != layout.tensors().rend(); ++it)
            reversed.push_back({it->name, it->shape, std::span<const float>(rounded).subspan(static_cast<std::size_t>(it->offset),
                                                                                            static_cast<std::size_t>(it->numel()))});
        vwt::io::write_safetensors(m.dir / "model.safetensors", reversed, vwt::io::dtype::bf16);
        const auto b = vwt::io::load_model<bf16_backend>(m.dir);
        CHECK_FALSE(b.borrows_parameters());
        CHECK(logits_of(b) == logits_of(vwt::model<bf16_backend>(m.config, vwt::convert_parameters<vwt::bf16>(layout, rounded))));
    }
    // q8 needs whole blocks: tiny_l6's widths are not, and the error names the tensor.
    CHECK_THROWS_WITH(vwt::io::load_model<q8_backend>(m.dir), Contains("transformer.h.0.ln_1.weight") && Contains("not whole blocks of 32"));
}

TEST_CASE("weights used in place can change without the file changing") {
    model_dir m("vwt_cow_model");
    const auto before = vwt::io::read_file_bytes(m.dir / "model.safetensors");
    {
        auto a = vwt::io::load_model<vwt::cpu::backend<float>>(m.dir);
        REQUIRE(a.borrows_parameters());
        const auto p = a.parameters();
        for (vwt::index_t i = 0; i < p.size(); i += 7) p[i] = 1000.0f;  // an optimizer step on every page
        CHECK(a.parameters()[7] == 1000.0f);
    }
    CHECK(vwt::io::read_file_bytes(m.dir / "model.safetensors") == before);
}

TEST_CASE("q8 weights load from a file tensor by tensor as convert_parameters quantizes them") {
    const auto dir = std::filesystem::temp_directory_path() / "vwt_q8_load";
    std::filesystem::remove_all(dir);
    const auto config = vwt::model_config::mup(vwt::dynamic_schedule({4, 128, 4, 2, 256, 96, {}}, {128, 64, 64, 128}));  // whole blocks
    const vwt::parameter_layout layout(config);
    std::vector<float> params;
    vwt::initialize_parameters(config, layout, 11, params);
    vwt::io::save_model_dir(dir, config, params, vwt::io::dtype::f16);
    const auto stored = vwt::io::load_model_dir(dir).params;
    using q8_backend = vwt::cpu::backend<float, vwt::q8_block>;
    const auto q = vwt::io::load_model<q8_backend>(dir);
    CHECK_FALSE(q.borrows_parameters());
    CHECK(logits_of(q) == logits_of(vwt::model<q8_backend>(config, vwt::convert_parameters<vwt::q8_block>(layout, stored))));
    std::filesystem::remove_all(dir);
}

TEST_CASE("MoE model directories: the authors' fields round-trip, the weights load, bad MoE fields are named") {
    using B = vwt::cpu::backend<double>;
    const auto dir = std::filesystem::temp_directory_path() / "vwt_moe_model";
    std::filesystem::remove_all(dir);
    auto dims = vwt::presets::tiny_l6.dims;
    dims.moe = {6, 2, 64};
    auto config = vwt::model_config::mup(vwt::dynamic_schedule(dims, {144, 88, 48, 32, 64, 144}));
    config.router_aux_loss_coef = 0.02;
    const vwt::parameter_layout layout(config);
    std::vector<float> params;
    vwt::initialize_parameters(config, layout, 3, params);
    vwt::io::save_model_dir(dir, config, params, vwt::io::dtype::f32);

    const auto j = vwt::io::config_to_json(config);
    CHECK(j["moe_intermediate_size"] == 64);
    CHECK(j["router_aux_loss_coef"] == 0.02);
    CHECK(j["mlp_blocks"][0]["mlp_type"] == "MoE");
    CHECK(j["mlp_blocks"][0]["num_experts"] == 6);
    CHECK(j["mlp_blocks"][0]["num_experts_per_tok"] == 2);
    CHECK(j["mlp_blocks"][1]["intermediate_size"] == 59);  // round(88 x 64 / 96) = round(58.67)
    CHECK(j["mlp_blocks"][3]["intermediate_size"] == 21);  // round(32 x 64 / 96) = round(21.33)
    const auto back = vwt::io::read_model_config(dir);
    CHECK(back.schedule == config.schedule);
    CHECK(back.router_aux_loss_coef == 0.02);

    // The loaded model's logits equal those of the model built from the saved parameters.
    const std::vector<double> p64(params.begin(), params.end());
    const vwt::model<B> built(config, p64);
    const auto loaded = vwt::io::load_model<B>(dir);
    const std::vector<int> tokens{3, 17, 250, 9};
    auto c1 = built.make_cache(8), c2 = loaded.make_cache(8);
    const vwt::sequence_input<B> in1{&c1, tokens}, in2{&c2, tokens};
    const auto a = built.forward({}, std::span(&in1, 1), vwt::logits_mode::all), b = loaded.forward({}, std::span(&in2, 1), vwt::logits_mode::all);
    CHECK(a == b);

    // The authors' yml form: intermediate_size -1 (derived), shared_intermediate_size -1.
    auto yml = j;
    for (auto& m : yml["mlp_blocks"]) m["intermediate_size"] = -1, m["shared_intermediate_size"] = -1;
    CHECK(vwt::io::config_from_json(yml, "c.json").schedule == config.schedule);

    const auto rejects = [&](const auto& change, const std::string& message) {
        auto bad = j;
        change(bad);
        CHECK_THROWS_WITH(vwt::io::config_from_json(bad, "moe.json"), Contains("moe.json") && Contains(message));
    };
    rejects([](auto& c) { c.erase("moe_intermediate_size"); }, "missing field 'moe_intermediate_size'");
    rejects([](auto& c) { c["mlp_blocks"][1]["intermediate_size"] = 60; },
            "'mlp_blocks[1].intermediate_size' is 60; the MoE experts' size at width 88 is round(88 x moe_intermediate_size 64 / hidden_size 96) = 59");
    rejects([](auto& c) { c["mlp_blocks"][2]["num_experts"] = 5; }, "experts differ between layers");
    rejects([](auto& c) { c["mlp_blocks"][0]["num_experts_per_tok"] = 7; }, "'mlp_blocks[0].num_experts_per_tok' is 7, above the limit of 6");
    rejects([](auto& c) { c["mlp_blocks"][4]["shared_intermediate_size"] = 128; }, "shared experts are not implemented");
    rejects([](auto& c) { c["moe_shared_intermediate_size"] = 128; }, "shared experts are not implemented");
    rejects([](auto& c) { c["mlp_blocks"][3]["mlp_type"] = "MLP"; }, "'mlp_blocks[3].mlp_type' differs from layer 0's");
    rejects(
        [](auto& c) {
            c["moe_intermediate_size"] = 1;
            for (auto& m : c["mlp_blocks"]) m["intermediate_size"] = -1;
        },
        "layer 2 of width 48 is too narrow for experts: round(48 x moe_intermediate_size 1 / hidden_size 96) is 0");
    std::filesystem::remove_all(dir);
}
