// Prefill and decode of the dense_200m-shaped ><former and its uniform twin on the CPU backend,
// beside a plain Eigen sgemm of the same shapes and a memory-copy bandwidth figure, measured in
// one run; a summary prints the ratios the targets are stated in.
//
// The vocabulary is reduced to 4096 (from 100263) to keep the two models at ~0.9 GB together;
// the layers are the paper's. Run: build/bench/bench_inference [--benchmark_min_time=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include <vwt/vwt.hpp>

namespace {

using backend = vwt::cpu::backend<float>;
constexpr int threads = 2;
constexpr int prefill_tokens = 256;
constexpr int decode_context = 256;
constexpr int bench_vocab = 4096;

vwt::dynamic_schedule bench_schedule(bool uniform) {
    auto spec = vwt::presets::dense_200m;
    const auto x = vwt::make_schedule(spec);
    vwt::model_dims d = x.dims;
    d.vocab = bench_vocab;
    return uniform ? vwt::dynamic_schedule(d, std::vector<int>(16, d.hidden)) : vwt::dynamic_schedule(d, x.widths);
}

const vwt::model<backend>& bench_model(bool uniform) {
    static std::map<bool, std::unique_ptr<vwt::model<backend>>> models;
    auto& m = models[uniform];
    if (!m) {
        auto c = vwt::model_config::mup(bench_schedule(uniform));
        std::vector<float> p;
        vwt::initialize_parameters(c, vwt::parameter_layout(c), 1, p);
        m = std::make_unique<vwt::model<backend>>(std::move(c), std::move(p));
    }
    return *m;
}

// Matmul FLOPs of T tokens plus causal attention (token t sees t + 1 keys).
double prefill_flops(const vwt::dynamic_schedule& s, int T) {
    double flops = 0;
    for (int i = 0; i < s.layers(); ++i) {
        const auto lp = vwt::layer_param_count(s.dims, s.width(i));
        flops += 2.0 * (lp.attention + lp.mlp) * T + 4.0 * s.width(i) * (T * (T + 1) / 2.0);
    }
    return flops + 2.0 * s.dims.hidden * s.dims.vocab;  // logits of the last token only
}

void prefill(benchmark::State& state, bool uniform) {
    const auto& m = bench_model(uniform);
    std::vector<int> tokens(prefill_tokens);
    for (int i = 0; i < prefill_tokens; ++i) tokens[static_cast<std::size_t>(i)] = (i * 31) % bench_vocab;
    auto cache = m.make_cache(prefill_tokens);
    for (auto _ : state) {
        cache.clear();
        const vwt::sequence_input<float> in{&cache, tokens};
        benchmark::DoNotOptimize(m.forward({threads}, std::span(&in, 1)));
    }
    const double flops = prefill_flops(m.schedule(), prefill_tokens);
    state.counters["tokens/s"] = benchmark::Counter(prefill_tokens, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void decode(benchmark::State& state, bool uniform) {
    const auto& m = bench_model(uniform);
    std::vector<int> prompt(decode_context);
    for (int i = 0; i < decode_context; ++i) prompt[static_cast<std::size_t>(i)] = (i * 17) % bench_vocab;
    auto cache = m.make_cache(decode_context + 1);
    const vwt::sequence_input<float> pre{&cache, prompt};
    m.forward({threads}, std::span(&pre, 1));
    const int next = 7;
    for (auto _ : state) {
        cache.truncate(decode_context);
        const vwt::sequence_input<float> in{&cache, std::span(&next, 1)};
        benchmark::DoNotOptimize(m.forward({threads}, std::span(&in, 1)));
    }
    state.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["weight_MB"] = static_cast<double>(m.parameters().size() * 4) / 1e6;
}

// The same matmuls as one prefill (4 per layer and the head's one row), as bare Eigen products
// split across the same threads, with no norms, RoPE, attention or copies.
struct gemm_shape {
    int m, n, k;
};
std::vector<gemm_shape> sgemm_shapes(const vwt::dynamic_schedule& s) {
    const int T = prefill_tokens;
    std::vector<gemm_shape> shapes;
    for (int i = 0; i < s.layers(); ++i) {
        const int w = s.width(i);
        shapes.push_back({T, 3 * w, w});
        shapes.push_back({T, w, w});
        shapes.push_back({T, 8 * w, w});
        shapes.push_back({T, w, 4 * w});
    }
    shapes.push_back({1, s.dims.vocab, s.dims.hidden});
    return shapes;
}
double sgemm_flops(const vwt::dynamic_schedule& s) {
    double flops = 0;
    for (const auto& sh : sgemm_shapes(s)) flops += 2.0 * sh.m * sh.n * sh.k;
    return flops;
}

void sgemm_same_shapes(benchmark::State& state, bool uniform) {
    const auto s = bench_schedule(uniform);
    const auto shapes = sgemm_shapes(s);
    std::vector<std::vector<float>> a, b, c;
    const double flops = sgemm_flops(s);
    for (const auto& sh : shapes) {
        a.emplace_back(static_cast<std::size_t>(sh.m) * sh.k, 0.5f);
        b.emplace_back(static_cast<std::size_t>(sh.n) * sh.k, 0.25f);
        c.emplace_back(static_cast<std::size_t>(sh.m) * sh.n);
    }
    for (auto _ : state) {
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            const auto& sh = shapes[i];
            backend::matmul_nt({threads}, vwt::matrix_view<const float>{a[i].data(), sh.m, sh.k, sh.k},
                               vwt::matrix_view<const float>{b[i].data(), sh.n, sh.k, sh.k},
                               vwt::matrix_view<float>{c[i].data(), sh.m, sh.n, sh.n});
        }
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Copy bandwidth (bytes read + bytes written per second) over 512 MB, two threads.
void memory_copy(benchmark::State& state) {
    const std::size_t n = 256u << 20;
    std::vector<char> from(n, 1), to(n, 0);
    for (auto _ : state) {
        VWT_OMP(parallel for num_threads(threads))
        for (int t = 0; t < threads; ++t)
            std::memcpy(to.data() + n / threads * t, from.data() + n / threads * t, n / threads);
        benchmark::ClobberMemory();
    }
    state.counters["GB/s"] = benchmark::Counter(2.0 * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Five repetitions each; the summary uses the fastest (this machine's timings vary by +-20% run to
// run, and the best of five is the most repeatable figure).
void configure(benchmark::internal::Benchmark* b) {
    b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5)->Repetitions(5)->ReportAggregatesOnly(true)
        ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

BENCHMARK_CAPTURE(prefill, xformer, false)->Apply(configure);
BENCHMARK_CAPTURE(prefill, uniform, true)->Apply(configure);
BENCHMARK_CAPTURE(sgemm_same_shapes, xformer, false)->Apply(configure);
BENCHMARK_CAPTURE(sgemm_same_shapes, uniform, true)->Apply(configure);
BENCHMARK_CAPTURE(decode, xformer, false)->Apply(configure);
BENCHMARK_CAPTURE(decode, uniform, true)->Apply(configure);
BENCHMARK(memory_copy)->Apply(configure);

// Keeps every run's counters so that main() can print the ratios.
class capturing_reporter : public benchmark::ConsoleReporter {
public:
    std::map<std::string, Run> runs;
    void ReportRuns(const std::vector<Run>& report) override {
        for (const auto& r : report) runs[r.benchmark_name()] = r;
        ConsoleReporter::ReportRuns(report);
    }
};

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    capturing_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    // Aggregate names look like "prefill/xformer/min_time:0.500/repeats:5/real_time_min".
    const auto seconds = [&](const std::string& name) {
        for (const auto& [key, run] : reporter.runs)
            if (key.rfind(name + "/", 0) == 0 && key.size() > 4 && key.compare(key.size() - 4, 4, "_min") == 0)
                return run.GetAdjustedRealTime() / 1e3;  // reported in ms
        return 0.0;
    };
    if (seconds("memory_copy") == 0) return 0;  // a filtered run: no summary
    const double bw = 2.0 * (256u << 20) / seconds("memory_copy");
    std::printf("\nsummary, best of 5 (threads %d, prefill %d tokens, decode at context %d, vocab %d)\n", threads,
                prefill_tokens, decode_context, bench_vocab);
    for (const char* which : {"xformer", "uniform"}) {
        const std::string w = which;
        const auto s = bench_schedule(w == "uniform");
        const double p = prefill_flops(s, prefill_tokens) / seconds("prefill/" + w) / 1e9;
        const double g = sgemm_flops(s) / seconds("sgemm_same_shapes/" + w) / 1e9;
        const double d = 1.0 / seconds("decode/" + w);
        const double bytes = static_cast<double>(vwt::parameter_layout(vwt::model_config::mup(s)).size()) * 4;
        std::printf("%-8s prefill %.0f tok/s, %.1f GFLOP/s = %.0f%% of sgemm (%.1f GFLOP/s); decode %.1f tok/s = %.0f%% "
                    "of the bandwidth bound %.1f tok/s (%.1f GB/s copy over %.0f MB of weights)\n",
                    which, prefill_tokens / seconds("prefill/" + w), p, 100 * p / g, g, d, 100 * d / (bw / bytes),
                    bw / bytes, bw / 1e9, bytes / 1e6);
    }
    const double time_ratio = seconds("prefill/xformer") / seconds("prefill/uniform");
    const double flop_ratio =
        prefill_flops(bench_schedule(false), prefill_tokens) / prefill_flops(bench_schedule(true), prefill_tokens);
    std::printf("prefill time ratio ><former/uniform %.3f vs FLOP ratio %.3f (%+.1f%%)\n", time_ratio, flop_ratio,
                100 * (time_ratio / flop_ratio - 1));
    return 0;
}
