// The whole model on the CUDA policy's kernels: logits against the PyTorch reference, incremental
// decode (split-context attention over the KV cache) against the full forward, a 50-step training
// run against the CPU policy's, and greedy generation from a checkpoint trained on the CPU.
// Built as device_policy, the kernels run through the CPU emulation; built with VWT_TEST_CUDA
// (cuda_device_policy), on a GPU, each case skipping with a message where there is none.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <vwt/backend/cuda/backend.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

#include "support.hpp"

namespace fs = std::filesystem;

namespace {

#if defined(VWT_TEST_CUDA)
using device = vwt::cuda::backend<float>;
const char* const device_name = "cuda";
#else
using device = vwt::cuda::emulated_backend<float>;
const char* const device_name = "emulated";
#endif
using cpu = vwt::cpu::backend<float>;

// The PyTorch reference models: where CMake's fixture wrote them, or $VWT_REFERENCE_DIR (a copy
// carried to a GPU machine, scripts/gpu_check.sh).
const fs::path reference_dir = std::getenv("VWT_REFERENCE_DIR") ? fs::path(std::getenv("VWT_REFERENCE_DIR")) : fs::path(VWT_REFERENCE_DIR);

#define SKIP_WITHOUT_DEVICE()                                         \
    if (!device::context::available()) {                              \
        WARN("no CUDA device on this machine: case skipped");         \
        return;                                                       \
    }

template <class B>
vwt::model<B> load(const fs::path& dir, const typename B::context& ctx) {
    auto m = vwt::io::load_model_dir(dir);
    return vwt::model<B>(std::move(m.config), m.params, ctx);
}

using vwt_test::losses_of;
using vwt_test::read_floats;
using vwt_test::relative_error;

template <class B>
std::vector<float> all_logits(const vwt::model<B>& m, const typename B::context& ctx, const std::vector<int>& tokens) {
    auto cache = m.make_cache(static_cast<int>(tokens.size()));
    const vwt::sequence_input<B> in{&cache, tokens};
    return m.forward(ctx, std::span(&in, 1), vwt::logits_mode::all);
}

vwt::model_config small_config() {
    return vwt::model_config::mup(vwt::dynamic_schedule({3, 32, 2, 2, 17, 64, {}}, {48, 16, 32}));
}

template <class B>
vwt::train::trainer<B> make_trainer(const typename B::context& ctx, const fs::path& out, std::int64_t steps) {
    auto c = small_config();
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 9, p);
    std::vector<int> t(3000);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int>((i * 7 + i / 5) % 17);
    vwt::train::train_options o;
    o.steps = steps;
    o.batch = 3;
    o.accumulate = 2;
    o.lr = {vwt::train::lr_decay::cosine, 5e-3, 5, steps, 5e-4};
    o.checkpoint_every = 0;
    o.out = out;
    return vwt::train::trainer<B>(ctx, c, p, vwt::train::window_loader(t, 16, 0.1, 4, "pattern"), o);
}

}  // namespace

TEST_CASE("logits match the PyTorch reference to 1e-4 relative") {
    SKIP_WITHOUT_DEVICE();
    const device::context ctx;
    std::ifstream f(reference_dir / "manifest.json");
    REQUIRE(f.good());
    for (const auto& e : nlohmann::json::parse(f)) {
        const auto name = e["model"].get<std::string>();
        const auto tokens = e["tokens"].get<std::vector<int>>();
        CAPTURE(name, tokens.size());
        if (vwt::io::read_model_config(reference_dir / name).schedule.dims.moe.enabled()) {
            // the CUDA policy has no MoE ops yet: building such a model says so
            CHECK_THROWS_WITH(load<device>(reference_dir / name, ctx), Catch::Contains("mixtures of experts, which this backend policy"));
            continue;
        }
        const auto m = load<device>(reference_dir / name, ctx);
        CHECK(relative_error(all_logits(m, ctx, tokens), read_floats(reference_dir / name / e["logits"].get<std::string>())) < 1e-4);
    }
}

TEST_CASE("incremental decode over the KV cache equals the full forward, contexts past one key split") {
    SKIP_WITHOUT_DEVICE();
    const device::context ctx;
    for (const char* name : {"x_tiny_l8", "x_gqa", "x_narrow_ends", "x_zero_resize"}) {
        CAPTURE(name);
        const auto m = load<device>(reference_dir / name, ctx);
        std::vector<int> tokens;
        for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 258);  // 40 keys: three splits of 16
        const auto full = all_logits(m, ctx, tokens);
        auto cache = m.make_cache(48);
        const std::vector<int> prefix(tokens.begin(), tokens.begin() + 5);
        vwt::sequence_input<device> in{&cache, prefix};
        auto stepped = m.forward(ctx, std::span(&in, 1), vwt::logits_mode::all);
        for (std::size_t t = 5; t < tokens.size(); ++t) {
            in.tokens = std::span(&tokens[t], 1);
            const auto row = m.forward(ctx, std::span(&in, 1), vwt::logits_mode::last);
            stepped.insert(stepped.end(), row.begin(), row.end());
        }
        CHECK(relative_error(stepped, full) < 1e-5);
    }
}

TEST_CASE("50 training steps follow the CPU policy's loss curve (fp32: 1e-4 relative)") {
    SKIP_WITHOUT_DEVICE();
    const fs::path base = fs::temp_directory_path() / (std::string("vwt_device_train_") + device_name);
    fs::remove_all(base);
    auto on_cpu = make_trainer<cpu>(cpu::context{1}, base / "cpu", 50);
    auto on_device = make_trainer<device>(device::context{}, base / "device", 50);
    const auto want = losses_of(on_cpu), got = losses_of(on_device);
    REQUIRE(got.size() == 50);
    CHECK(want.back() < want.front() - 0.5);  // it learns
    for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i, got[i], want[i]);
        CHECK(std::abs(got[i] - want[i]) <= 1e-4 * std::abs(want[i]));
    }
    const auto p_cpu = on_cpu.parameters();
    const auto p_device = on_device.parameters();
    CHECK(relative_error(p_device, p_cpu) < 1e-3);
    fs::remove_all(base);
}

TEST_CASE("greedy generation from a checkpoint trained on the CPU") {
    SKIP_WITHOUT_DEVICE();
    const fs::path dir = fs::temp_directory_path() / (std::string("vwt_device_generate_") + device_name);
    fs::remove_all(dir);
    auto t = make_trainer<cpu>(cpu::context{1}, dir / "train", 30);
    losses_of(t);
    vwt::io::save_model_dir(dir / "model", small_config(), t.parameters());
    auto greedy = [&]<class B>(const typename B::context& ctx) {
        const auto m = load<B>(dir / "model", ctx);
        vwt::session<vwt::model<B>> s(m, ctx, 64);
        vwt::generation_options o;
        o.max_new_tokens = 24;
        o.sampling.temperature = 0;
        const std::vector<int> prompt{3, 10, 0, 7};
        return vwt::generate(ctx, s, std::span<const int>(prompt), o);
    };
    const auto want = greedy.template operator()<cpu>(cpu::context{1});
    const auto got = greedy.template operator()<device>(device::context{});
    CHECK(got == want);
    fs::remove_all(dir);
}

TEST_CASE("a context beyond the cache and memory beyond the device are clean errors") {
    SKIP_WITHOUT_DEVICE();
    const device::context ctx;
    const auto m = load<device>(reference_dir / "x_tiny_l8", ctx);
    vwt::session<vwt::model<device>> s(m, ctx, 8);
    const std::vector<int> nine(9, 1);
    CHECK_THROWS_WITH(s.append(ctx, nine), Catch::Contains("exceed its capacity of 8"));
    s.append(ctx, std::span<const int>(nine).first(8));  // the session is still usable
    CHECK(s.length() == 8);
    CHECK_THROWS_WITH(device::buffer<float>(vwt::index_t(1) << 50), Catch::Contains("cannot allocate"));
}
