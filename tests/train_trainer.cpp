// The training loop: resuming from a checkpoint continues the loss curve exactly, a process
// killed while writing checkpoints leaves a complete one, and bad states are clear errors.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

#include "support.hpp"

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A small ><former, dense or MoE (every MLP top-2 of 4 experts).
vwt::model_config config(bool moe = false) {
    return vwt::model_config::mup(vwt::dynamic_schedule({3, 32, 2, 2, 17, 64, moe ? vwt::moe_dims{4, 2, 32} : vwt::moe_dims{}}, {48, 16, 32}));
}

vwt::train::window_loader data() {
    std::vector<int> t(3000);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int>((i * 7 + i / 5) % 17);
    return vwt::train::window_loader(t, 16, 0.1, 4, "pattern");
}

using backend = vwt::cpu::backend<float>;

template <class B = backend>
vwt::train::trainer<B> make(const fs::path& out, std::int64_t steps, std::int64_t every, int threads = 2, bool moe = false) {
    auto c = config(moe);
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 9, p);
    vwt::train::train_options o;
    o.steps = steps;
    o.batch = 3;
    o.accumulate = 2;
    o.lr = {vwt::train::lr_decay::cosine, 5e-3, 3, 12, 5e-4};
    o.checkpoint_every = every;
    o.out = out;
    typename B::context ctx{};
    if constexpr (requires { ctx.threads; }) ctx.threads = threads;
    return vwt::train::trainer<B>(ctx, c, p, data(), o);
}

// A directory of its own per policy: ctest runs the instances of a template test in parallel.
template <class B>
fs::path scratch_dir(const std::string& name) {
    return fs::temp_directory_path() / (name + (std::is_same_v<typename B::memory, vwt::host_memory> ? "_cpu" : "_reference"));
}

using vwt_test::losses_of;

}  // namespace

TEMPLATE_TEST_CASE("resuming gives the loss curve of an uninterrupted run", "", vwt::cpu::backend<float>,
                   vwt::reference::backend<float>) {
    for (const bool moe : {false, true}) {
        CAPTURE(moe);
        const auto base = scratch_dir<TestType>(moe ? "vwt_resume_test_moe" : "vwt_resume_test");
        fs::remove_all(base);
        auto whole = make<TestType>(base / "whole", 12, 0, 2, moe);
        const auto full = losses_of(whole);
        REQUIRE(full.size() == 12);
        CHECK(full.back() < full.front());

        auto first = make<TestType>(base / "split", 7, 7, 2, moe);
        const auto head = losses_of(first);
        auto second = make<TestType>(base / "split", 12, 0, 2, moe);
        second.resume();
        CHECK(second.step() == 7);
        const auto tail = losses_of(second);
        REQUIRE(tail.size() == 5);
        for (std::size_t i = 0; i < 7; ++i) CHECK(head[i] == full[i]);
        for (std::size_t i = 0; i < 5; ++i) CHECK(tail[i] == full[7 + i]);  // bit-identical
        CHECK(second.parameters() == whole.parameters());
        // A training checkpoint's model part is an ordinary model directory.
        const auto m = vwt::io::load_model_dir(base / "split" / "step-00000012");
        CHECK(m.config.schedule == config(moe).schedule);
        fs::remove_all(base);
    }
}

TEST_CASE("an MoE run reports its auxiliary loss and every expert's tokens per layer") {
    const auto base = fs::temp_directory_path() / "vwt_moe_report_test";
    fs::remove_all(base);
    auto t = make(base, 3, 0, 2, true);
    std::vector<vwt::train::step_report> reports;
    t.run([&](const vwt::train::step_report& r) { reports.push_back(r); });
    REQUIRE(reports.size() == 3);
    for (const auto& r : reports) {
        // its value is checked against a brute-force sum in layers_moe; here: one positive sum per step
        CHECK(std::isfinite(r.aux_loss));
        CHECK(r.aux_loss > 0);
        REQUIRE(r.expert_tokens.size() == 3 * 4);
        for (int layer = 0; layer < 3; ++layer) {
            std::int64_t pairs = 0;
            for (int e = 0; e < 4; ++e) pairs += r.expert_tokens[std::size_t(layer * 4 + e)];
            CHECK(pairs == 3 * 2 * 16 * 2);  // batch x accumulate x length x experts per token
        }
    }
    // a dense run has neither
    auto dense = make(base / "dense", 1, 0);
    dense.run([&](const vwt::train::step_report& r) {
        CHECK(r.aux_loss < 0);
        CHECK(r.expert_tokens.empty());
    });
    fs::remove_all(base);
}

TEMPLATE_TEST_CASE("a process killed while writing checkpoints leaves the previous one intact", "", vwt::cpu::backend<float>,
                   vwt::reference::backend<float>) {
    const auto out = scratch_dir<TestType>("vwt_kill_test");
    fs::remove_all(out);
    int resumed = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
        const pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {  // checkpoint after every step until killed
            try {
                // One thread: libgomp's thread pool, started by the earlier tests, does not
                // survive fork().
                auto t = make<TestType>(out, 100000, 1, 1);
                t.run();
            } catch (...) {
            }
            _exit(0);
        }
        // Kill once checkpoints are being written (the first one is there), a little later each time.
        for (int waited = 0; waited < 2000 && !fs::exists(out / "LATEST"); ++waited) usleep(5000);
        usleep(static_cast<useconds_t>(20000 + 37000 * attempt));
        kill(child, SIGKILL);
        int status = 0;
        waitpid(child, &status, 0);
        CHECK(WIFSIGNALED(status));
        if (!fs::exists(out / "LATEST")) continue;  // killed before the first checkpoint
        auto t = make<TestType>(out, 100000, 0);
        REQUIRE_NOTHROW(t.resume());  // LATEST names a complete, loadable checkpoint
        CHECK(t.step() >= 1);
        ++resumed;
    }
    CHECK(resumed >= 2);  // the kills landed while checkpoints were being written
    fs::remove_all(out);
}

TEST_CASE("mixed precision (bf16 products, fp32 master weights) follows the fp32 loss curve") {
    const auto c = config();
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 9, p);
    vwt::train::train_options o;
    o.steps = 30;
    o.batch = 3;
    o.lr = {vwt::train::lr_decay::cosine, 5e-3, 3, 30, 5e-4};
    const auto run = [&](vwt::cpu::product_precision products) {
        vwt::train::trainer<backend> t({2, products}, c, p, data(), o);
        auto losses = losses_of(t);
        const auto params = t.model().parameters();
        return std::pair(losses, std::vector<float>(params.data(), params.data() + params.size()));
    };
    const auto [f32, f32_params] = run(vwt::cpu::product_precision::f32);
    const auto [mixed, mixed_params] = run(vwt::cpu::product_precision::bf16);
    REQUIRE(f32.size() == 30);
    REQUIRE(mixed.size() == 30);
    double moved = 0;
    for (std::size_t i = 0; i < f32.size(); ++i) {
        INFO("step " << i + 1 << ": fp32 " << f32[i] << ", bf16 products " << mixed[i]);
        CHECK(std::abs(mixed[i] - f32[i]) <= 0.01 * f32[i]);  // operands rounded by <= 2^-9 each
        moved = std::max(moved, std::abs(mixed[i] - f32[i]));
    }
    CHECK(moved > 0);                 // the products did round
    CHECK(mixed.back() < 0.9 * mixed.front());  // and it learns (2.85 to 2.48 here)
    // the master weights stay float: updates smaller than a bf16 step are kept
    std::size_t off_grid = 0;
    for (float v : mixed_params) off_grid += static_cast<float>(vwt::bf16(v)) != v;
    CHECK(off_grid > mixed_params.size() / 2);
    CHECK(vwt_test::relative_error(mixed_params, f32_params) < 0.05);
}

TEST_CASE("non-finite loss, corrupt and mismatched checkpoints are clear errors") {
    const auto out = fs::temp_directory_path() / "vwt_bad_train_test";
    fs::remove_all(out);
    {
        auto t = make(out, 2, 2);
        t.run();
    }
    const auto latest = vwt::io::read_file_bytes(out / "LATEST");
    {
        auto c = config();
        std::vector<float> p;
        vwt::initialize_parameters(c, vwt::parameter_layout(c), 9, p);
        p[0] = std::numeric_limits<float>::quiet_NaN();
        std::fill(p.begin(), p.end(), std::numeric_limits<float>::quiet_NaN());
        vwt::train::train_options o;
        o.steps = 3;
        o.out = out;
        o.checkpoint_every = 1;
        vwt::train::trainer<backend> bad(backend::context{1}, c, p, data(), o);
        CHECK_THROWS_WITH(bad.run(), Contains("loss became nan at step 1") && Contains("last checkpoint is kept"));
        CHECK(vwt::io::read_file_bytes(out / "LATEST") == latest);
    }
    {
        auto other = config();
        other.schedule = vwt::dynamic_schedule({3, 32, 2, 2, 17, 64, {}}, {32, 32, 32});
        std::vector<float> p;
        vwt::initialize_parameters(other, vwt::parameter_layout(other), 1, p);
        vwt::train::train_options o;
        o.out = out;
        vwt::train::trainer<backend> t(backend::context{1}, other, p, data(), o);
        CHECK_THROWS_WITH(t.resume(), Contains("has another schedule than this run"));
    }
    {
        // A corrupt training state is an error naming the field, never a hang or a wrap-around.
        const auto state = out / "step-00000002" / "trainer_state.json";
        const auto rejects_state = [&](const std::string& text, const std::string& message) {
            std::ofstream(state) << text;
            auto t = make(out, 4, 0);
            CAPTURE(text);
            CHECK_THROWS_WITH(t.resume(), Contains("trainer_state.json") && Contains(message));
        };
        rejects_state(R"({"step": 2, "optimizer_steps": 2, "data_position": 1e19})", "field 'data_position' is 1e+19, not an integer");
        rejects_state(R"({"step": 2, "optimizer_steps": 2, "data_position": 18446744073709551615})",
                      "field 'data_position' is 18446744073709551615, above the limit of 4611686018427387904");
        rejects_state(R"({"step": -1, "optimizer_steps": 0, "data_position": 0})", "field 'step' is -1, below the minimum of 0");
        rejects_state(R"({"step": 2, "optimizer_steps": 3, "data_position": 0})", "field 'optimizer_steps' is 3, above the limit of 2");
        rejects_state(R"({"step": 2, "optimizer_steps": 2, "data_position": 1e400})", "not valid JSON");
        rejects_state(R"({"step": 2, "optimizer_steps": 2})", "missing field 'data_position'");
        rejects_state("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
                      "nested deeper than 64 levels");
        // A far data position is a seek, not a replay of every window before it.
        std::ofstream(state) << R"({"step": 2, "optimizer_steps": 2, "data_position": 4611686018427387904})";
        auto t = make(out, 4, 0);
        CHECK_NOTHROW(t.resume());
    }
    {
        const auto file = out / "step-00000002" / "optimizer.safetensors";
        auto bytes = vwt::io::read_file_bytes(file);
        bytes.resize(bytes.size() / 2);
        std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        auto t = make(out, 4, 0);
        CHECK_THROWS_WITH(t.resume(), Contains("optimizer.safetensors"));
    }
    {
        auto t = make(out / "nothing", 4, 0);
        CHECK_THROWS_WITH(t.resume(), Contains("no checkpoint in"));
    }

    fs::remove_all(out);
}

TEST_CASE("replace_directory puts a complete directory in the place of an existing one") {
    const auto root = fs::temp_directory_path() / "vwt_replace_directory";
    fs::remove_all(root);
    fs::create_directories(root / "old");
    fs::create_directories(root / "new");
    vwt::io::write_file_atomic(root / "old" / "a", "old");
    vwt::io::write_file_atomic(root / "old" / "only_old", "x");
    vwt::io::write_file_atomic(root / "new" / "a", "new");
    vwt::io::replace_directory(root / "new", root / "old");
    CHECK(!fs::exists(root / "new"));
    CHECK(!fs::exists(root / "old" / "only_old"));
    const auto bytes = vwt::io::read_file_bytes(root / "old" / "a");
    CHECK(std::string(bytes.begin(), bytes.end()) == "new");
    vwt::io::replace_directory(root / "old", root / "fresh");  // to a name that does not exist yet
    CHECK(fs::exists(root / "fresh" / "a"));
    CHECK_THROWS_WITH(vwt::io::replace_directory(root / "missing", root / "fresh"), Contains("cannot move"));
    fs::remove_all(root);
}
