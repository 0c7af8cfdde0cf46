// Prefill and decode of the dense_200m-shaped ><former and its uniform twin on the CPU backend,
// beside a plain Eigen sgemm of the same shapes and a memory-copy bandwidth figure, measured in
// one run; paired_* benchmarks alternate each figure with its baseline, and a summary prints the
// ratios the targets are stated in.
//
// The vocabulary is reduced to 4096 (from 100263) to keep the two models at ~0.9 GB together;
// the layers are the paper's. Run: build/bench/bench_inference [--benchmark_min_time=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
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

// The same ><former as a compile-time schedule: its widths and head dims are static extents.
constexpr auto static_schedule = [] {
    const auto x = vwt::make_schedule<16>(vwt::presets::dense_200m);
    auto d = x.dims;
    d.vocab = bench_vocab;
    return vwt::schedule<16>(d, x.widths);
}();
using static_xformer = vwt::static_model<backend, static_schedule>;

std::vector<float> bench_parameters(const vwt::model_config& c) {
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 1, p);
    return p;
}

const vwt::model<backend>& bench_model(bool uniform) {
    static std::map<bool, std::unique_ptr<vwt::model<backend>>> models;
    auto& m = models[uniform];
    if (!m) {
        auto c = vwt::model_config::mup(bench_schedule(uniform));
        m = std::make_unique<vwt::model<backend>>(c, bench_parameters(c));
    }
    return *m;
}

const static_xformer& bench_static_model() {
    static std::unique_ptr<static_xformer> m;
    if (!m) {
        const auto c = vwt::model_config::mup(vwt::dynamic_schedule(static_schedule));
        m = std::make_unique<static_xformer>(c, bench_parameters(c));
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

// One prefill of prefill_tokens tokens into a fresh cache, through a workspace made once.
template <class Model>
struct prefill_runner {
    const Model& m;
    std::vector<int> tokens;
    vwt::kv_cache<backend> cache;
    vwt::forward_workspace<backend> ws;
    explicit prefill_runner(const Model& model)
        : m(model), tokens(prefill_tokens), cache(model.make_cache(prefill_tokens)), ws(model.make_workspace({threads}, prefill_tokens, prefill_tokens)) {
        for (int i = 0; i < prefill_tokens; ++i) tokens[static_cast<std::size_t>(i)] = (i * 31) % bench_vocab;
    }
    void operator()() {
        cache.clear();
        const vwt::sequence_input<backend> in{&cache, tokens};
        benchmark::DoNotOptimize(m.forward({threads}, ws, std::span(&in, 1)));
    }
};

// One decode step at context decode_context, in a session (no allocation per step).
template <class Model>
struct decode_runner {
    vwt::session<Model> s;
    int next = 7;
    explicit decode_runner(const Model& model) : s(model, {threads}, decode_context + 1) {
        std::vector<int> prompt(decode_context);
        for (int i = 0; i < decode_context; ++i) prompt[static_cast<std::size_t>(i)] = (i * 17) % bench_vocab;
        s.append({threads}, prompt);
    }
    void operator()() {
        s.truncate(decode_context);
        benchmark::DoNotOptimize(s.append({threads}, std::span(&next, 1)));
    }
};

void prefill(benchmark::State& state, bool uniform) {
    const auto& m = bench_model(uniform);
    prefill_runner<vwt::model<backend>> run(m);
    for (auto _ : state) run();
    const double flops = prefill_flops(m.schedule(), prefill_tokens);
    state.counters["tokens/s"] = benchmark::Counter(prefill_tokens, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void decode(benchmark::State& state, bool uniform) {
    const auto& m = bench_model(uniform);
    decode_runner<vwt::model<backend>> run(m);
    for (auto _ : state) run();
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

struct sgemm_runner {
    std::vector<gemm_shape> shapes;
    std::vector<std::vector<float>> a, b, c;
    explicit sgemm_runner(const vwt::dynamic_schedule& s) : shapes(sgemm_shapes(s)) {
        for (const auto& sh : shapes) {
            a.emplace_back(static_cast<std::size_t>(sh.m) * sh.k, 0.5f);
            b.emplace_back(static_cast<std::size_t>(sh.n) * sh.k, 0.25f);
            c.emplace_back(static_cast<std::size_t>(sh.m) * sh.n);
        }
    }
    void operator()() {
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            const auto& sh = shapes[i];
            backend::matmul_nt({threads}, vwt::host_matrix<const float>{a[i].data(), sh.m, sh.k, sh.k},
                               vwt::host_matrix<const float>{b[i].data(), sh.n, sh.k, sh.k},
                               vwt::host_matrix<float>{c[i].data(), sh.m, sh.n, sh.n});
        }
        benchmark::ClobberMemory();
    }
};

void sgemm_same_shapes(benchmark::State& state, bool uniform) {
    const auto s = bench_schedule(uniform);
    const double flops = sgemm_flops(s);
    sgemm_runner run(s);
    for (auto _ : state) run();
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Copy bandwidth (bytes read + bytes written per second) over 512 MB, two threads.
struct copy_runner {
    static constexpr std::size_t n = 256u << 20;
    std::vector<char> from = std::vector<char>(n, 1), to = std::vector<char>(n, 0);
    void operator()() {
        VWT_OMP(parallel for num_threads(threads))
        for (int t = 0; t < threads; ++t)
            std::memcpy(to.data() + n / threads * t, from.data() + n / threads * t, n / threads);
        benchmark::ClobberMemory();
    }
};

void memory_copy(benchmark::State& state) {
    const std::size_t n = copy_runner::n;
    copy_runner run;
    for (auto _ : state) run();
    state.counters["GB/s"] = benchmark::Counter(2.0 * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The ratios the targets are stated in, with each measurement and its baseline run alternately in
// the same iteration (this machine drifts by +-20% between runs); the fastest of each is kept.
double seconds_of(auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void paired_prefill(benchmark::State& state) {
    prefill_runner<vwt::model<backend>> px(bench_model(false)), pu(bench_model(true));
    sgemm_runner gx(bench_schedule(false)), gu(bench_schedule(true));
    double tpx = 1e9, tpu = 1e9, tgx = 1e9, tgu = 1e9, total = 0;
    for (auto _ : state) {
        const double a = seconds_of(px), b = seconds_of(pu), c = seconds_of(gx), d = seconds_of(gu);
        tpx = std::min(tpx, a), tpu = std::min(tpu, b), tgx = std::min(tgx, c), tgu = std::min(tgu, d);
        total += a + b + c + d;
        state.SetIterationTime(a + b + c + d);
    }
    const auto sx = bench_schedule(false), su = bench_schedule(true);
    state.counters["x_GFLOPs"] = prefill_flops(sx, prefill_tokens) / tpx / 1e9;
    state.counters["u_GFLOPs"] = prefill_flops(su, prefill_tokens) / tpu / 1e9;
    state.counters["x_sgemm_GFLOPs"] = sgemm_flops(sx) / tgx / 1e9;
    state.counters["u_sgemm_GFLOPs"] = sgemm_flops(su) / tgu / 1e9;
    state.counters["x_tokens_per_s"] = prefill_tokens / tpx;
    state.counters["u_tokens_per_s"] = prefill_tokens / tpu;
    state.counters["time_ratio"] = tpx / tpu;
    state.counters["flop_ratio"] = prefill_flops(sx, prefill_tokens) / prefill_flops(su, prefill_tokens);
    (void)total;
}
BENCHMARK(paired_prefill)->Iterations(16)->UseManualTime()->Unit(benchmark::kMillisecond);

void paired_decode(benchmark::State& state) {
    decode_runner<vwt::model<backend>> dx(bench_model(false)), du(bench_model(true));
    copy_runner copy;
    double tdx = 1e9, tdu = 1e9, tc = 1e9;
    for (auto _ : state) {
        const double a = seconds_of(dx), b = seconds_of(du), c = seconds_of(copy);
        tdx = std::min(tdx, a), tdu = std::min(tdu, b), tc = std::min(tc, c);
        state.SetIterationTime(a + b + c);
    }
    const double bw = 2.0 * copy_runner::n / tc;
    const auto bytes = [](bool u) { return static_cast<double>(bench_model(u).parameters().size() * 4); };
    state.counters["copy_GBs"] = bw / 1e9;
    state.counters["x_tokens_per_s"] = 1 / tdx;
    state.counters["u_tokens_per_s"] = 1 / tdu;
    state.counters["x_bound_tokens_per_s"] = bw / bytes(false);
    state.counters["u_bound_tokens_per_s"] = bw / bytes(true);
}
BENCHMARK(paired_decode)->Iterations(60)->UseManualTime()->Unit(benchmark::kMillisecond);

// The ><former with static extents (static_model) against the same model with dynamic ones,
// alternated in each iteration: what the compile-time widths buy.
void paired_static_dynamic(benchmark::State& state) {
    prefill_runner<static_xformer> ps(bench_static_model());
    prefill_runner<vwt::model<backend>> pd(bench_model(false));
    decode_runner<static_xformer> ds(bench_static_model());
    decode_runner<vwt::model<backend>> dd(bench_model(false));
    double tps = 1e9, tpd = 1e9, tds = 1e9, tdd = 1e9;
    for (auto _ : state) {
        const double a = seconds_of(ps), b = seconds_of(pd);
        double c = 1e9, d = 1e9;
        for (int i = 0; i < 8; ++i) c = std::min(c, seconds_of(ds)), d = std::min(d, seconds_of(dd));
        tps = std::min(tps, a), tpd = std::min(tpd, b), tds = std::min(tds, c), tdd = std::min(tdd, d);
        state.SetIterationTime(a + b + 8 * (c + d));
    }
    state.counters["static_prefill_tokens_per_s"] = prefill_tokens / tps;
    state.counters["dynamic_prefill_tokens_per_s"] = prefill_tokens / tpd;
    state.counters["static_decode_tokens_per_s"] = 1 / tds;
    state.counters["dynamic_decode_tokens_per_s"] = 1 / tdd;
}
BENCHMARK(paired_static_dynamic)->Iterations(12)->UseManualTime()->Unit(benchmark::kMillisecond);

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
    const auto counter = [&](const std::string& bench, const char* name) {
        for (const auto& [key, run] : reporter.runs)
            if (key.rfind(bench, 0) == 0 && run.counters.count(name)) return static_cast<double>(run.counters.at(name));
        return 0.0;
    };
    if (counter("paired_prefill", "time_ratio") == 0 || counter("paired_decode", "copy_GBs") == 0) return 0;
    std::printf("\nsummary, paired in one run (threads %d, prefill %d tokens, decode at context %d, vocab %d)\n",
                threads, prefill_tokens, decode_context, bench_vocab);
    for (const char* which : {"x", "u"}) {
        const std::string w = which;
        const double p = counter("paired_prefill", (w + "_GFLOPs").c_str());
        const double g = counter("paired_prefill", (w + "_sgemm_GFLOPs").c_str());
        const double d = counter("paired_decode", (w + "_tokens_per_s").c_str());
        const double bound = counter("paired_decode", (w + "_bound_tokens_per_s").c_str());
        std::printf("%-8s prefill %.0f tok/s, %.1f GFLOP/s = %.0f%% of sgemm of the same shapes (%.1f GFLOP/s); "
                    "decode %.1f tok/s = %.0f%% of the bandwidth bound %.1f tok/s (copy %.1f GB/s)\n",
                    w == "x" ? "><former" : "uniform", counter("paired_prefill", (w + "_tokens_per_s").c_str()), p,
                    100 * p / g, g, d, 100 * d / bound, bound, counter("paired_decode", "copy_GBs"));
    }
    if (const double sp = counter("paired_static_dynamic", "static_prefill_tokens_per_s"); sp > 0)
        std::printf("><former static extents / dynamic: prefill %.0f / %.0f tok/s (%+.1f%%), decode %.1f / %.1f tok/s (%+.1f%%)\n", sp,
                    counter("paired_static_dynamic", "dynamic_prefill_tokens_per_s"),
                    100 * (sp / counter("paired_static_dynamic", "dynamic_prefill_tokens_per_s") - 1),
                    counter("paired_static_dynamic", "static_decode_tokens_per_s"), counter("paired_static_dynamic", "dynamic_decode_tokens_per_s"),
                    100 * (counter("paired_static_dynamic", "static_decode_tokens_per_s") /
                               counter("paired_static_dynamic", "dynamic_decode_tokens_per_s") - 1));
    const double tr = counter("paired_prefill", "time_ratio"), fr = counter("paired_prefill", "flop_ratio");
    std::printf("prefill time ratio ><former/uniform %.3f vs FLOP ratio %.3f (%+.1f%%)\n", tr, fr, 100 * (tr / fr - 1));
    return 0;
}
