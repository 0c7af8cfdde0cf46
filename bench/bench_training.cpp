// Training speed of vwt beside PyTorch eager, in one run: one optimizer step (forward, backward,
// gradient clipping, AdamW) of the reproduction's model (tiny_l8: the x-shaped ><former and its
// uniform twin) at the reproduction's batch shape, in this process and in the PyTorch reference
// (bench/torch_train_step.py, float32, torch.optim.AdamW) started from here, on the same number of
// threads. Peak memory: each side trains in a fresh process and reports its maximum resident set.
//
// Run: build/bench/bench_training   (the summary at the end prints the ratios)
#include <benchmark/benchmark.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include <vwt/report/text.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

#include "summary.hpp"

namespace {

using backend = vwt::cpu::backend<float>;
constexpr int threads = 2;
constexpr int batch = 8;
constexpr int seq = 128;

vwt::model_config bench_config(bool uniform) {
    const auto x = vwt::make_schedule(vwt::presets::tiny_l8);
    return vwt::model_config::mup(uniform ? vwt::uniform_twin(x) : x);
}

// Everything one training step touches, as the trainer holds it.
struct training_state {
    const backend::context ctx;
    vwt::model_config config;
    vwt::model<backend> model;
    backend::buffer<float> grad;
    backend::buffer<double> norm;
    vwt::model_tensors<float, backend::memory> grads;
    vwt::train::adamw<backend> optimizer;
    vwt::train::step_workspace<backend> workspace;
    std::vector<int> tokens, targets;

    static std::vector<float> initial(const vwt::model_config& c) {
        std::vector<float> p;
        vwt::initialize_parameters(c, vwt::parameter_layout(c), 1, p);
        return p;
    }
    training_state(bool uniform, vwt::cpu::product_precision products)
        : ctx{threads, products},
          config(bench_config(uniform)),
          model(config, initial(config), ctx),
          grad(model.layout().size()),
          norm(1),
          grads(model.bind(grad.view())),
          optimizer(ctx, config, model.layout()),
          workspace(ctx, model, batch, seq) {
        std::mt19937 rng(7);
        std::uniform_int_distribution<int> id(0, config.schedule.dims.vocab - 1);
        for (int i = 0; i < batch * seq; ++i) {
            tokens.push_back(id(rng));
            targets.push_back(id(rng));
        }
    }
    double step() {
        backend::fill(ctx, grad.view().as_matrix(1, grad.size()), 0.0f);
        const double loss = vwt::train::loss_and_gradient(ctx, model, vwt::train::token_batch{tokens, targets, batch}, workspace, grads);
        vwt::train::clip_by_global_norm<backend>(ctx, grad.view(), 1.0, norm.view());
        optimizer.step(ctx, model.parameters(), vwt::host_vector<const float>(grad.view()), 1e-3);
        return loss;
    }
};

// mixed: bf16 products (operands rounded to bf16, float sums, float master weights)
void vwt_train_step(benchmark::State& state, bool uniform, bool mixed) {
    training_state t(uniform, mixed ? vwt::cpu::product_precision::bf16 : vwt::cpu::product_precision::f32);
    t.step();  // sizes the workspace
    for (auto _ : state) benchmark::DoNotOptimize(t.step());
    state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(batch * seq), benchmark::Counter::kIsIterationInvariantRate);
}

// Runs a command and returns the JSON object on the last line it prints (null on failure).
nlohmann::json run_json(const std::string& command) {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    if (!pipe) return nullptr;
    std::string out;
    std::array<char, 4096> buf{};
    while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe.get())) out = buf.data();
    try {
        return nlohmann::json::parse(out);
    } catch (const nlohmann::json::exception&) {
        return nullptr;
    }
}

// PyTorch eager, or (compiled) with torch.compile on the forward pass: a Python without torch 2.x
// (Debian's is 1.13) skips that row. bench/peers/setup.sh makes a venv with PyTorch 2.x from PyPI;
// VWT_TORCH_PYTHON=build-peers/venv/bin/python in the environment (or -DVWT_PYTHON_WITH_TORCH=...
// when configuring) runs that Python.
void torch_train_step(benchmark::State& state, bool uniform, bool compiled, bool mixed) {
    const auto c = bench_config(uniform);
    const auto& d = c.schedule.dims;
    const char* python = std::getenv("VWT_TORCH_PYTHON");  // the run's choice over the build's
    const std::string command = std::string(python && *python ? python : VWT_TORCH_PYTHON) + " " + VWT_SOURCE_DIR + "/bench/torch_train_step.py" +
                                " --widths " + vwt::report::joined(c.schedule.widths, ',') + " --hidden " + std::to_string(d.hidden) +
                                " --heads " + std::to_string(d.heads) + " --kv-heads " + std::to_string(d.kv_heads) +
                                " --vocab " + std::to_string(d.vocab) + " --batch " + std::to_string(batch) +
                                " --seq " + std::to_string(seq) + " --steps 4 --threads " + std::to_string(threads) +
                                (compiled ? " --compile --warmup 3" : " --warmup 1") + (mixed ? " --bf16" : "") + " 2>/dev/null";
    for (auto _ : state) {
        const auto r = run_json(command);
        if (r.is_null()) {
            state.SkipWithError(compiled ? "torch.compile did not run (PyTorch 2.x: bench/peers/setup.sh)"
                                         : "the PyTorch baseline did not run (is python3-torch installed?)");
            return;
        }
        state.SetIterationTime(r.at("seconds_per_step").get<double>());
        state.counters["tokens_per_s"] = r.at("tokens_per_second").get<double>();
        state.counters["peak_rss_MB"] = r.at("peak_rss_bytes").get<double>() / 1e6;
        state.counters["rss_before_training_MB"] = r.at("rss_before_training_bytes").get<double>() / 1e6;
    }
}

double resident_bytes() {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return static_cast<double>(resident) * 4096.0;
}

// In a fresh process (this binary, --peak-memory-probe x|u): train a few steps, print the peak.
int peak_memory_probe(bool uniform) {
    training_state t(uniform, vwt::cpu::product_precision::f32);
    const double before = resident_bytes();
    for (int i = 0; i < 3; ++i) t.step();
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    std::printf("{\"peak_rss_bytes\": %.0f, \"rss_before_training_bytes\": %.0f}\n", static_cast<double>(u.ru_maxrss) * 1024, before);
    return 0;
}

std::string self_path;

void vwt_peak_memory(benchmark::State& state, bool uniform) {
    for (auto _ : state) {
        const auto r = run_json(self_path + " --peak-memory-probe " + (uniform ? "u" : "x"));
        if (r.is_null()) {
            state.SkipWithError("the memory probe did not run");
            return;
        }
        state.counters["peak_rss_MB"] = r.at("peak_rss_bytes").get<double>() / 1e6;
        state.counters["rss_before_training_MB"] = r.at("rss_before_training_bytes").get<double>() / 1e6;
    }
}

// vwt: the best of three repetitions (timings on this machine vary run to run); PyTorch: the best
// of four timed steps after a warm-up step (it takes seconds per step). Both rows: the fastest.
#define VWT_TRAIN_ROWS(name, uniform, mixed)                                                                        \
    BENCHMARK_CAPTURE(vwt_train_step, name, uniform, mixed)                                                         \
        ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0)->Repetitions(3)->ReportAggregatesOnly(true)  \
        ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }); \
    BENCHMARK_CAPTURE(torch_train_step, name, uniform, false, mixed)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(1); \
    BENCHMARK_CAPTURE(torch_train_step, name##_compiled, uniform, true, mixed)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(1);
VWT_TRAIN_ROWS(xformer, false, false)
VWT_TRAIN_ROWS(uniform, true, false)
VWT_TRAIN_ROWS(xformer_bf16, false, true)
VWT_TRAIN_ROWS(uniform_bf16, true, true)
#undef VWT_TRAIN_ROWS
BENCHMARK_CAPTURE(vwt_peak_memory, xformer, false)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(vwt_peak_memory, uniform, true)->Unit(benchmark::kMillisecond)->Iterations(1);


}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "--peak-memory-probe") == 0) return peak_memory_probe(argv[2][0] == 'u');
    self_path = argv[0];
    benchmark::Initialize(&argc, argv);
    vwt_bench::capturing_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    // the vwt_train rows: their "min" aggregate (the fastest repetition)
    const auto counter = [&](const std::string& bench, const char* name) {
        return reporter.counter(bench, name, [&](const std::string& key) {
            return bench.rfind("vwt_train", 0) != 0 || key.find("_min") != std::string::npos;
        });
    };
    std::printf("\nsummary (tiny_l8, batch %d x %d tokens, %d threads; bf16: mixed precision, float32 master weights)\n", batch, seq,
                threads);
    for (const char* which : {"xformer", "uniform", "xformer_bf16", "uniform_bf16"}) {
        const std::string w = which;
        const double ours = counter("vwt_train_step/" + w + "/", "tokens_per_s");
        const double torch = counter("torch_train_step/" + w + "/", "tokens_per_s");
        const double compiled = counter("torch_train_step/" + w + "_compiled", "tokens_per_s");
        std::printf("%-13s vwt %.0f tok/s, PyTorch eager %.0f tok/s: %.2fx", w.c_str(), ours, torch, torch > 0 ? ours / torch : 0.0);
        if (compiled > 0) std::printf("; torch.compile %.0f tok/s: %.2fx", compiled, ours / compiled);
        std::printf("\n");
    }
    for (const char* which : {"xformer", "uniform"}) {
        const std::string w = which;
        std::printf("%-13s peak RSS vwt %.0f MB (%.0f MB before training), PyTorch %.0f MB (%.0f MB before training)\n", which,
                    counter("vwt_peak_memory/" + w, "peak_rss_MB"), counter("vwt_peak_memory/" + w, "rss_before_training_MB"),
                    counter("torch_train_step/" + w + "/", "peak_rss_MB"), counter("torch_train_step/" + w + "/", "rss_before_training_MB"));
    }
    return 0;
}
