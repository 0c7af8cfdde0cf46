// Prefill and decode of the dense_200m-shaped ><former and its uniform twin on the CPU backend,
// beside library GEMMs of exactly the same shapes (OpenBLAS and oneDNN where found, plain Eigen
// always; none of them vwt's code) and the streaming-read bandwidth of a buffer larger than the
// last-level cache, measured in one run; paired_* benchmarks alternate each figure with its
// baselines, and a summary prints the ratios the targets are stated in, every row the fastest of
// its repetitions. paired_moe_* run the moe_1b3b-shaped MoE ><former (bf16 weights) against the
// dense ><former of the same active parameters, and the MoE decode against the read bound of the
// bytes one token uses (its experts, not all of them).
//
// The vocabulary is reduced to 4096 (from 100263) to keep the two models at ~0.9 GB together;
// the layers are the paper's. Run: build/bench/bench_inference [--benchmark_min_time=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <type_traits>

#include <vwt/vwt.hpp>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "summary.hpp"

#if defined(VWT_BENCH_OPENBLAS)
#include <cblas.h>
#endif
#if defined(VWT_BENCH_ONEDNN)
#include <dnnl.h>
#include <omp.h>

#include <dnnl.hpp>
#include <unordered_map>
#endif

namespace {

using backend = vwt::cpu::backend<float>;
using bf16_backend = vwt::cpu::backend<float, vwt::bf16>;    // weights stored in bf16; bf16 products in prefill
using q8_backend = vwt::cpu::backend<float, vwt::q8_block>;  // 8-bit weights, a float scale per 32
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

template <class B = backend>
const vwt::model<B>& bench_model(bool uniform) {
    static std::map<bool, std::unique_ptr<vwt::model<B>>> models;
    auto& m = models[uniform];
    if (!m) {
        auto c = vwt::model_config::mup(bench_schedule(uniform));
        m = std::make_unique<vwt::model<B>>(c, vwt::convert_parameters<typename B::weight_type>(vwt::parameter_layout(c), bench_parameters(c)));
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

// Matmul FLOPs of T tokens (an MoE layer's: its router and each token's experts) plus causal
// attention (token t sees t + 1 keys).
double prefill_flops(const vwt::dynamic_schedule& s, int T) {
    double flops = 0;
    for (int i = 0; i < s.layers(); ++i) {
        const auto lp = vwt::layer_param_count(s, i);
        flops += 2.0 * (lp.attention + lp.mlp_active) * T + 4.0 * s.width(i) * (T * (T + 1) / 2.0);
    }
    return flops + 2.0 * s.dims.hidden * s.dims.vocab;  // logits of the last token only
}

// One prefill of prefill_tokens tokens into a fresh cache, through a workspace made once.
template <class Model>
struct prefill_runner {
    using B = typename Model::backend;
    const Model& m;
    const typename B::context ctx{threads};  // one context for every call: it keeps the GEMM primitives
    std::vector<int> tokens;
    vwt::kv_cache<B> cache;
    vwt::forward_workspace<B> ws;
    explicit prefill_runner(const Model& model)
        : m(model), tokens(prefill_tokens), cache(model.make_cache(prefill_tokens)), ws(model.make_workspace(ctx, prefill_tokens, prefill_tokens)) {
        for (int i = 0; i < prefill_tokens; ++i) tokens[static_cast<std::size_t>(i)] = (i * 31) % bench_vocab;
    }
    void operator()() {
        cache.clear();
        const vwt::sequence_input<B> in{&cache, tokens};
        benchmark::DoNotOptimize(m.forward(ctx, ws, std::span(&in, 1)));
    }
};

// One decode step at context decode_context, in a session (no allocation per step).
template <class Model>
struct decode_runner {
    const typename Model::backend::context ctx{threads};
    vwt::session<Model> s;
    int next = 7;
    explicit decode_runner(const Model& model, vwt::kv_dtype kv = vwt::kv_dtype::compute) : s(model, ctx, decode_context + 1, 0, kv) {
        std::vector<int> prompt(decode_context);
        for (int i = 0; i < decode_context; ++i) prompt[static_cast<std::size_t>(i)] = (i * 17) % bench_vocab;
        s.append(ctx, prompt);
    }
    void operator()() {
        s.truncate(decode_context);
        benchmark::DoNotOptimize(s.append(ctx, std::span(&next, 1)));
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

// The same matmuls as one prefill (4 per layer and the head's one row), y = x w^T with w [n x k]
// row-major (torch's Linear layout), through a library GEMM with no norms, RoPE, attention or copies.
struct gemm_shape {
    int m, n, k;
    bool bf16_output = false;  // (the bf16 baseline only)
};
// A prefill's products: per layer c_attn, the attention's c_proj, the MLP's c_fc and c_proj; then
// the head on the last row. `as_bf16_prefill`: c_fc as the bf16 prefill runs it, two products of
// 4w columns (the gate's, then the up one's, which stores bf16: CPU policy's swiglu_mlp), the same
// FLOPs.
std::vector<gemm_shape> sgemm_shapes(const vwt::dynamic_schedule& s, bool as_bf16_prefill = false) {
    const int T = prefill_tokens;
    std::vector<gemm_shape> shapes;
    for (int i = 0; i < s.layers(); ++i) {
        const int w = s.width(i);
        shapes.push_back({T, 3 * w, w});
        shapes.push_back({T, w, w});
        if (as_bf16_prefill) {
            shapes.push_back({T, 4 * w, w});
            shapes.push_back({T, 4 * w, w, true});
        } else {
            shapes.push_back({T, 8 * w, w});
        }
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

enum class gemm_library { eigen, openblas, onednn };
constexpr const char* library_name(gemm_library l) { return l == gemm_library::eigen ? "Eigen" : l == gemm_library::openblas ? "OpenBLAS" : "oneDNN"; }
constexpr bool library_present(gemm_library l) {
#if !defined(VWT_BENCH_OPENBLAS)
    if (l == gemm_library::openblas) return false;
#endif
#if !defined(VWT_BENCH_ONEDNN)
    if (l == gemm_library::onednn) return false;
#endif
    (void)l;
    return true;
}

// Arrays on 2 MiB pages where Linux gives them (transparent huge pages, asked for with madvise),
// as vwt's own buffers are: every baseline here (the library GEMMs' operands, the read bound's
// array) gets the memory the model gets. On the Xeon VM a 4 KiB-page array read at 19-22 GB/s and
// the same array on 2 MiB pages at 30-31 GB/s; the same-shape bf16 GEMMs ran ~25% faster on them.
// Written here, not taken from vwt, so that no baseline depends on vwt's code.
constexpr std::size_t huge_page = std::size_t{2} << 20;
struct huge_page_release {
    void operator()(void* p) const { ::operator delete(p, std::align_val_t{huge_page}); }
};
template <class T>
using huge_page_array = std::unique_ptr<T[], huge_page_release>;
template <class T>
huge_page_array<T> make_huge_page_array(std::size_t n, T value) {
    const std::size_t bytes = (n * sizeof(T) + huge_page - 1) / huge_page * huge_page;
    auto* p = static_cast<T*>(::operator new(bytes, std::align_val_t{huge_page}));
#if defined(__linux__)
    ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
    std::fill(p, p + n, value);
    return huge_page_array<T>(p);
}
// Values like a model's: uniform in [-scale, scale) from a fixed-seed xorshift, stored as float or as
// bf16 bits (rounded to the nearest, ties to even; written here, not taken from vwt). Constant
// operands (0.5 and 0.25 until 2026-12-06) let AMX run the same products 6-8% faster than on random
// data on the Xeon VM (the model's product sequence back to back: 36.7-37.8 ms constant, 39.9 ms
// random), which flattered the baseline against the model's own products.
template <class T>
void fill_uniform(T* p, std::size_t n, float scale, std::uint64_t seed) {
    std::uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
    for (std::size_t i = 0; i < n; ++i) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        const float v = scale * (static_cast<float>(state >> 40) * 0x1p-23f - 1.0f);
        if constexpr (std::is_same_v<T, float>) {
            p[i] = v;
        } else {
            static_assert(std::is_same_v<T, std::uint16_t>, "float or bf16 bits");
            std::uint32_t u = 0;
            std::memcpy(&u, &v, sizeof u);
            p[i] = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
    }
}

// Operands of a sequence of products: each product's own weights b [n x k] (a model's layers each
// have theirs), and one activation a [m x k] and one output c [m x n] that every product reuses,
// as a model reuses its scratch, so that they stay in cache as a model's activations do. (Until
// 2026-12-06 every product had its own a and c too: writing ~130 MB of fresh outputs per prefill
// went to memory, which slowed the baseline by ~30% and flattered vwt's share of its rate.) All of
// them on huge pages, every weight matrix on a cache line; a and b hold random values of a model's
// scale (activations ~1, weights ~0.05).
template <class In, class Out>
struct gemm_operands {
    huge_page_array<In> a_all, b_all;
    huge_page_array<Out> c_all;
    std::vector<In*> a, b;
    std::vector<Out*> c;
    explicit gemm_operands(const std::vector<gemm_shape>& shapes) {
        std::vector<std::size_t> at_b;
        std::size_t na = 0, nb = 0, nc = 0;
        for (const auto& sh : shapes) {
            at_b.push_back(nb), nb += (std::size_t(sh.n) * sh.k + 15) / 16 * 16;
            na = std::max(na, std::size_t(sh.m) * sh.k), nc = std::max(nc, std::size_t(sh.m) * sh.n);
        }
        a_all = make_huge_page_array(na, In{}), b_all = make_huge_page_array(nb, In{}), c_all = make_huge_page_array(nc, Out{});
        fill_uniform(a_all.get(), na, 1.0f, 1);
        fill_uniform(b_all.get(), nb, 0.05f, 2);
        for (std::size_t i = 0; i < shapes.size(); ++i) a.push_back(a_all.get()), b.push_back(b_all.get() + at_b[i]), c.push_back(c_all.get());
    }
};

struct sgemm_runner {
    gemm_library library;
    std::vector<gemm_shape> shapes;
    gemm_operands<float, float> x;
    sgemm_runner(const vwt::dynamic_schedule& s, gemm_library l) : library(l), shapes(sgemm_shapes(s)), x(shapes) {}
    void operator()() {
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            const auto& sh = shapes[i];
            switch (library) {
                case gemm_library::eigen: eigen_gemm(sh, x.a[i], x.b[i], x.c[i]); break;
#if defined(VWT_BENCH_OPENBLAS)
                case gemm_library::openblas:
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sh.m, sh.n, sh.k, 1.0f, x.a[i], sh.k, x.b[i], sh.k, 0.0f, x.c[i], sh.n);
                    break;
#endif
#if defined(VWT_BENCH_ONEDNN)
                case gemm_library::onednn:
                    dnnl_sgemm('N', 'T', sh.m, sh.n, sh.k, 1.0f, x.a[i], sh.k, x.b[i], sh.k, 0.0f, x.c[i], sh.n);
                    break;
#endif
                default: break;
            }
        }
        benchmark::ClobberMemory();
    }
    // Plain Eigen, its output columns split over the threads (Eigen's own threading is off in vwt
    // builds, which define EIGEN_DONT_PARALLELIZE).
    static void eigen_gemm(const gemm_shape& sh, const float* a, const float* b, float* c) {
        using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
        const Eigen::Map<const matrix> x(a, sh.m, sh.k), w(b, sh.n, sh.k);
        Eigen::Map<matrix> y(c, sh.m, sh.n);
        const int chunk = (sh.n + threads - 1) / threads;
        VWT_OMP(parallel for num_threads(threads))
        for (int t = 0; t < threads; ++t) {
            const int begin = t * chunk, end = std::min(sh.n, begin + chunk);
            if (begin < end) y.middleCols(begin, end - begin).noalias() = x * w.middleRows(begin, end - begin).transpose();
        }
    }
};

void sgemm_same_shapes(benchmark::State& state, bool uniform, gemm_library library) {
    if (!library_present(library)) {
        state.SkipWithError("library not found at build time");
        return;
    }
    const auto s = bench_schedule(uniform);
    const double flops = sgemm_flops(s);
    sgemm_runner run(s, library);
    for (auto _ : state) run();
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// oneDNN's bf16 matmul (bf16 operands, float sums and output) on the products the bf16 prefill
// runs (sgemm_shapes(s, true): c_fc as two products, one storing bf16, as the prefill does, but
// without its SwiGLU), the weights [n x k] row-major read in place, each primitive made once before
// the timing: the bf16 peak a library reaches on this CPU. Zero GFLOP/s where oneDNN is absent or
// has no bf16 matmul here.
struct bf16_gemm_runner {
#if defined(VWT_BENCH_ONEDNN)
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    std::vector<dnnl::matmul> primitives;
    std::vector<std::unordered_map<int, dnnl::memory>> args;
    std::vector<gemm_shape> shapes;
    gemm_operands<std::uint16_t, float> x;  // bf16 bits
    explicit bf16_gemm_runner(const vwt::dynamic_schedule& s) : shapes(sgemm_shapes(s, true)), x(shapes) {
        using dt = dnnl::memory::data_type;
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            const auto& sh = shapes[i];
            const dnnl::memory::desc ad({sh.m, sh.k}, dt::bf16, dnnl::memory::dims{sh.k, 1});
            const dnnl::memory::desc bd({sh.k, sh.n}, dt::bf16, dnnl::memory::dims{1, sh.k});
            const dnnl::memory::desc cd({sh.m, sh.n}, sh.bf16_output ? dt::bf16 : dt::f32, dnnl::memory::dims{sh.n, 1});
            try {
                primitives.emplace_back(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), engine));
            } catch (const dnnl::error&) {
                primitives.clear();
                return;
            }
            args.push_back({{DNNL_ARG_SRC, dnnl::memory(ad, engine, x.a[i])},
                            {DNNL_ARG_WEIGHTS, dnnl::memory(bd, engine, x.b[i])},
                            {DNNL_ARG_DST, dnnl::memory(cd, engine, x.c[i])}});
        }
    }
    bool present() const { return !primitives.empty(); }
    void operator()() {
        omp_set_num_threads(threads);  // this benchmark process's own setting
        for (std::size_t i = 0; i < primitives.size(); ++i) primitives[i].execute(stream, args[i]);
        stream.wait();
        benchmark::ClobberMemory();
    }
#else
    explicit bf16_gemm_runner(const vwt::dynamic_schedule&) {}
    bool present() const { return false; }
    void operator()() {}
#endif
};

// Streaming read bandwidth: the sum of a 1 GiB float array (twice the 480 MiB last-level cache the
// AMX Xeon VM reports, 32x the EPYC's), split over the threads; bytes read per second. The array
// lies on huge pages (huge_page_array): the bound should be the fastest read the machine offers.
struct read_runner {
    static constexpr std::size_t n = 256u << 20;  // floats
    huge_page_array<float> data = make_huge_page_array(n, 1.0f);
    float total = 0;
    void operator()() {
        float partial[threads] = {};
        VWT_OMP(parallel for num_threads(threads))
        for (int t = 0; t < threads; ++t)
            partial[t] = Eigen::Map<const Eigen::VectorXf>(data.get() + n / threads * t, static_cast<Eigen::Index>(n / threads)).sum();
        total = 0;
        for (float p : partial) total += p;
        benchmark::DoNotOptimize(total);
    }
};

void memory_read(benchmark::State& state) {
    read_runner run;
    for (auto _ : state) run();
    state.counters["GB/s"] = benchmark::Counter(4.0 * read_runner::n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The ratios the targets are stated in, with each measurement and its baseline run alternately in
// the same iteration (this machine drifts by +-20% between runs); the fastest of each is kept.
double seconds_of(auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs the runners one after another in each iteration and returns the fastest time of each
// (the iteration's time is their sum).
template <class... Runners>
std::array<double, sizeof...(Runners)> fastest_of(benchmark::State& state, Runners&... runners) {
    std::array<double, sizeof...(Runners)> best;
    best.fill(1e9);
    for (auto _ : state) {
        const std::array<double, sizeof...(Runners)> now{seconds_of(runners)...};
        for (std::size_t i = 0; i < best.size(); ++i) best[i] = std::min(best[i], now[i]);
        state.SetIterationTime(std::accumulate(now.begin(), now.end(), 0.0));
    }
    return best;
}

void paired_prefill(benchmark::State& state) {
    prefill_runner<vwt::model<backend>> px(bench_model(false)), pu(bench_model(true));
    constexpr gemm_library libraries[] = {gemm_library::eigen, gemm_library::openblas, gemm_library::onednn};
    std::vector<sgemm_runner> gx, gu;
    for (const auto l : libraries)
        if (library_present(l)) gx.emplace_back(bench_schedule(false), l), gu.emplace_back(bench_schedule(true), l);
    double tpx = 1e9, tpu = 1e9;
    std::vector<double> tgx(gx.size(), 1e9), tgu(gu.size(), 1e9);
    for (auto _ : state) {
        double spent = 0;
        const double a = seconds_of(px), b = seconds_of(pu);
        tpx = std::min(tpx, a), tpu = std::min(tpu, b);
        spent += a + b;
        for (std::size_t i = 0; i < gx.size(); ++i) {
            const double c = seconds_of(gx[i]), d = seconds_of(gu[i]);
            tgx[i] = std::min(tgx[i], c), tgu[i] = std::min(tgu[i], d);
            spent += c + d;
        }
        state.SetIterationTime(spent);
    }
    const auto sx = bench_schedule(false), su = bench_schedule(true);
    state.counters["x_GFLOPs"] = prefill_flops(sx, prefill_tokens) / tpx / 1e9;
    state.counters["u_GFLOPs"] = prefill_flops(su, prefill_tokens) / tpu / 1e9;
    for (std::size_t i = 0; i < gx.size(); ++i) {
        const std::string name = library_name(gx[i].library);
        state.counters["x_" + name + "_GFLOPs"] = sgemm_flops(sx) / tgx[i] / 1e9;
        state.counters["u_" + name + "_GFLOPs"] = sgemm_flops(su) / tgu[i] / 1e9;
    }
    state.counters["x_tokens_per_s"] = prefill_tokens / tpx;
    state.counters["u_tokens_per_s"] = prefill_tokens / tpu;
    state.counters["time_ratio"] = tpx / tpu;
    state.counters["flop_ratio"] = prefill_flops(sx, prefill_tokens) / prefill_flops(su, prefill_tokens);
}
BENCHMARK(paired_prefill)->Iterations(16)->UseManualTime()->Unit(benchmark::kMillisecond);

// The bytes a decode step must read: every weight one token uses (an MoE layer's router and its
// token's experts; one embedding row) and the KV cache of decode_context tokens.
double decode_bytes(const vwt::dynamic_schedule& s, double weight_bytes, int kv_bytes) {
    const auto a = vwt::account(s, {decode_context, kv_bytes, 2});
    return weight_bytes * static_cast<double>(a.params.active - a.params.embedding + s.dims.hidden) +
           static_cast<double>(a.kv_bytes_per_token) * decode_context;
}

// Decode with weights stored as B::weight_type (f32, bf16, q8) and a KV cache of KV, against the
// read bound of its bytes.
template <class B, vwt::kv_dtype KV = vwt::kv_dtype::compute>
void paired_decode(benchmark::State& state) {
    decode_runner<vwt::model<B>> dx(bench_model<B>(false), KV), du(bench_model<B>(true), KV);
    read_runner read;
    // Each model decodes right after the 1 GiB read, which evicts the other model's weights from
    // the last-level cache (on the Xeon VM, 480 MiB: with one read per iteration, the model that
    // ran second found part of its weights still cached and read "faster" than the bound).
    const auto [tr1, tdx, tr2, tdu] = fastest_of(state, read, dx, read, du);
    const double bw = 4.0 * read_runner::n / std::min(tr1, tr2);
    const auto bytes = [](bool u) {
        return decode_bytes(bench_schedule(u), static_cast<double>(sizeof(typename B::weight_type)) / vwt::elements_per_item<typename B::weight_type>,
                            KV == vwt::kv_dtype::bf16 ? 2 : 4);
    };
    state.counters["read_GBs"] = bw / 1e9;
    state.counters["x_tokens_per_s"] = 1 / tdx;
    state.counters["u_tokens_per_s"] = 1 / tdu;
    state.counters["x_bound_tokens_per_s"] = bw / bytes(false);
    state.counters["u_bound_tokens_per_s"] = bw / bytes(true);
}
BENCHMARK(paired_decode<backend>)->Name("paired_decode/f32")->Iterations(60)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(paired_decode<bf16_backend>)->Name("paired_decode/bf16")->Iterations(60)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(paired_decode<q8_backend>)->Name("paired_decode/q8")->Iterations(60)->UseManualTime()->Unit(benchmark::kMillisecond);
// The q8 decode kernel alone, on one thread, with its weights in the L2 cache (512 x 2048: 1.2 MB),
// so that memory does not hide the work per byte: float activations against q8 blocks widened to
// float (product_precision::f32), against activations quantized to q8 blocks and multiplied as
// 8-bit integers (the default). GB/s of weights streamed by each.
void paired_q8_gemv_in_cache(benchmark::State& state) {
    constexpr vwt::index_t n = 512, k = 2048, blocks = k / 32;
    std::vector<float> x(k), y(n), w(n * k);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (auto& v : w) v = normal(rng);
    for (auto& v : x) v = normal(rng);
    const auto q = vwt::convert_elements<vwt::q8_block>(w);
    const vwt::host_matrix<const vwt::q8_block> wq{q.data(), n, blocks, blocks};
    const auto gemv = [&](vwt::cpu::product_precision p) {
        return [&, p] {
            for (int i = 0; i < 100; ++i) q8_backend::matmul_nt({1, p}, vwt::host_matrix<const float>{x.data(), 1, k, k}, wq, {y.data(), 1, n, n});
            benchmark::DoNotOptimize(y.data());
        };
    };
    auto widened = gemv(vwt::cpu::product_precision::f32), integer = gemv(vwt::cpu::product_precision::automatic);
    const auto [tf, ti] = fastest_of(state, widened, integer);
    const double bytes = 100.0 * static_cast<double>(q.size() * sizeof(vwt::q8_block));
    state.counters["widened_GBs"] = bytes / tf / 1e9;
    state.counters["int8_GBs"] = bytes / ti / 1e9;
    state.counters["speedup"] = tf / ti;
}
BENCHMARK(paired_q8_gemv_in_cache)->Iterations(40)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(paired_decode<bf16_backend, vwt::kv_dtype::bf16>)
    ->Name("paired_decode/bf16_kv")
    ->Iterations(60)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// B, but each product (the calls that run GEMMs: matmul_*, the fused SwiGLU MLP and its first
// layer) adds its wall time to its context's `product_seconds`: what a prefill spends outside them
// (attention, norms, RoPE, embedding, copies) measured directly, not inferred from a same-shape GEMM.
template <class B>
struct products_timed : B {
    struct context : B::context {
        context(int threads = 1) : B::context{threads} {}  // implicit, as the model's `const context& = {}` needs
        mutable double product_seconds = 0;
    };
    template <class F>
    static void timed(const context& c, F&& f) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        c.product_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
#define VWT_BENCH_TIMED(op) \
    template <class... A>   \
    static void op(const context& c, A&&... a) { timed(c, [&] { B::op(c, std::forward<A>(a)...); }); }
    VWT_BENCH_TIMED(matmul_nt)
    VWT_BENCH_TIMED(matmul_nn)
    VWT_BENCH_TIMED(matmul_tn)
    VWT_BENCH_TIMED(swiglu_matmul_nt)
    VWT_BENCH_TIMED(swiglu_mlp)
#undef VWT_BENCH_TIMED
};

// bench_model<B>(uniform) run through products_timed<B>: the same parameters, borrowed rather than
// drawn and converted again (both models are the process's, the borrowed one made first).
template <class B>
const vwt::model<products_timed<B>>& timed_bench_model(bool uniform) {
    using W = typename B::weight_type;
    const auto& base = bench_model<B>(uniform);  // before the static below, so that it is destroyed after it
    static std::map<bool, std::unique_ptr<vwt::model<products_timed<B>>>> models;
    auto& m = models[uniform];
    if (!m) {
        const auto p = base.parameters();  // only read through the timed model
        const vwt::borrowed_parameters<W> borrowed{std::span<W>(const_cast<W*>(p.data()), static_cast<std::size_t>(p.size())),
                                                   std::shared_ptr<void>(std::shared_ptr<void>(), const_cast<void*>(static_cast<const void*>(&base)))};
        m = std::make_unique<vwt::model<products_timed<B>>>(base.config(), borrowed);
    }
    return *m;
}

// Prefill with weights stored as B::weight_type, alternated with f32 weights: what widening costs.
template <class B>
void paired_prefill_format(benchmark::State& state) {
    prefill_runner<vwt::model<B>> hx(bench_model<B>(false)), hu(bench_model<B>(true));
    prefill_runner<vwt::model<products_timed<B>>> px(timed_bench_model<B>(false)), pu(timed_bench_model<B>(true));
    prefill_runner<vwt::model<backend>> fx(bench_model(false));
    bf16_gemm_runner gx(bench_schedule(false)), gu(bench_schedule(true));
    const bool gemm = std::is_same_v<typename B::weight_type, vwt::bf16> && gx.present();
    double thx = 1e9, thu = 1e9, tfx = 1e9, tgx = 1e9, tgu = 1e9;
    // the share of the fastest timed prefill spent outside its products
    std::array<double, 2> timed_best{1e9, 1e9}, outside{0, 0};
    const auto timed_run = [&](auto& run, int i) {
        run.ctx.product_seconds = 0;
        const double t = seconds_of(run);
        if (t < timed_best[i]) timed_best[i] = t, outside[i] = 1 - run.ctx.product_seconds / t;
        return t;
    };
    for (auto _ : state) {
        const double a = seconds_of(hx), b = seconds_of(hu), c = seconds_of(fx);
        thx = std::min(thx, a), thu = std::min(thu, b), tfx = std::min(tfx, c);
        double spent = a + b + c + timed_run(px, 0) + timed_run(pu, 1);
        if (gemm) {
            const double d = seconds_of(gx), e = seconds_of(gu);
            tgx = std::min(tgx, d), tgu = std::min(tgu, e);
            spent += d + e;
        }
        state.SetIterationTime(spent);
    }
    if (gemm) {
        state.counters["x_bf16_gemm_GFLOPs"] = sgemm_flops(bench_schedule(false)) / tgx / 1e9;
        state.counters["u_bf16_gemm_GFLOPs"] = sgemm_flops(bench_schedule(true)) / tgu / 1e9;
    }
    state.counters["x_tokens_per_s"] = prefill_tokens / thx;
    state.counters["u_tokens_per_s"] = prefill_tokens / thu;
    state.counters["x_GFLOPs"] = prefill_flops(bench_schedule(false), prefill_tokens) / thx / 1e9;
    state.counters["u_GFLOPs"] = prefill_flops(bench_schedule(true), prefill_tokens) / thu / 1e9;
    state.counters["x_f32_tokens_per_s"] = prefill_tokens / tfx;
    state.counters["x_outside_products"] = outside[0];
    state.counters["u_outside_products"] = outside[1];
}
BENCHMARK(paired_prefill_format<bf16_backend>)->Name("paired_prefill_format/bf16")->Iterations(12)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(paired_prefill_format<q8_backend>)->Name("paired_prefill_format/q8")->Iterations(12)->UseManualTime()->Unit(benchmark::kMillisecond);

// Prefill attention of a bf16-weight model, 16 heads over prefill_tokens tokens at head dim
// state.range(0) (40: the uniform twin's; 72: the ><former's widest layers), in bf16 products (the
// default, on AMX tiles or vdpbf16ps where the CPU has them; counter engine: 2 tiles, 1 vdpbf16ps,
// 0 neither) against the float kernels (f32 products), alternated in each iteration. vwt's kernels
// side by side, not a baseline: what the bf16 products buy.
void paired_prefill_attention(benchmark::State& state) {
    using B = bf16_backend;
    const vwt::index_t d = state.range(0), heads = 16, T = prefill_tokens, cols = heads * d;
    const vwt::attention_shape<> shape{static_cast<int>(heads), static_cast<int>(heads), vwt::extent<vwt::dynamic_extent>(d)};
    B::context bf16_ctx{threads}, float_ctx{threads};
    float_ctx.products = vwt::cpu::product_precision::f32;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> host(static_cast<std::size_t>(T * cols));
    B::buffer<float> q(T * cols), k(T * cols), v(T * cols), out(T * cols);
    for (auto* b : {&q, &k, &v}) {
        for (auto& x : host) x = normal(rng);
        B::upload(bf16_ctx, std::span<const float>(host), b->view());
    }
    B::buffer<float> scratch(std::max(B::attention_scratch(bf16_ctx, T, T, shape), B::attention_scratch(float_ctx, T, T, shape)));
    const auto run = [&](const B::context& ctx) {
        return [&] {
            B::attention(ctx, q.view().as_matrix(T, cols).as_const(), k.view().as_matrix(T, cols).as_const(),
                         v.view().as_matrix(T, cols).as_const(), out.view().as_matrix(T, cols), shape, 1.0f / std::sqrt(float(d)),
                         scratch.view());
        };
    };
    double best_bf16 = 1e9, best_float = 1e9;
    for (auto _ : state) {
        double a = 1e9, b = 1e9;
        for (int i = 0; i < 10; ++i) a = std::min(a, seconds_of(run(bf16_ctx))), b = std::min(b, seconds_of(run(float_ctx)));
        best_bf16 = std::min(best_bf16, a), best_float = std::min(best_float, b);
        state.SetIterationTime(a + b);
    }
    namespace kb = vwt::cpu::kernels::bf16_attention;
    const auto engine = kb::fastest_engine();
    state.counters["engine"] = !engine ? 0 : *engine == kb::engine::tiles ? 2 : 1;
    state.counters["bf16_ms"] = best_bf16 * 1e3;
    state.counters["float_ms"] = best_float * 1e3;
    state.counters["speedup"] = best_float / best_bf16;
}
BENCHMARK(paired_prefill_attention)->Arg(40)->Arg(72)->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);

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

// The MoE ><former of moe_1b3b (40 layers, h 1600, every MLP 22 experts of which each token uses
// 3) with the vocabulary reduced to 4096 and bf16 weights (~5.3 GB), against the dense ><former of
// the paper's recipe (40 layers, 16 heads, x-shape, bottleneck 0.3, turning layer 30, widths in
// 32s) whose hidden size makes its parameters closest to the MoE model's active ones.
vwt::dynamic_schedule moe_bench_schedule() {
    const auto x = vwt::make_schedule(vwt::presets::moe_1b3b);
    auto d = x.dims;
    d.vocab = bench_vocab;
    return vwt::dynamic_schedule(d, x.widths);
}
vwt::dynamic_schedule dense_same_active_schedule() {
    const auto active = vwt::account(moe_bench_schedule()).params.active;
    vwt::dynamic_schedule best;
    vwt::count_t gap = -1;
    for (int h = 512; h <= 1600; h += 32) {
        auto spec = vwt::presets::moe_1b3b;
        spec.dims.hidden = h;
        spec.dims.moe = {};
        const auto x = vwt::make_schedule(spec);
        auto d = x.dims;
        d.vocab = bench_vocab;
        const vwt::dynamic_schedule s(d, x.widths);
        const auto diff = std::abs(vwt::account(s).params.total() - active);
        if (gap < 0 || diff < gap) gap = diff, best = s;
    }
    return best;
}
const vwt::model<bf16_backend>& moe_bench_model(bool dense) {
    static std::map<bool, std::unique_ptr<vwt::model<bf16_backend>>> models;
    auto& m = models[dense];
    if (!m) {
        const auto c = vwt::model_config::mup(dense ? dense_same_active_schedule() : moe_bench_schedule());
        std::vector<vwt::bf16> p;  // drawn as bf16 directly: the MoE model's float copy would be 10.5 GB
        vwt::initialize_parameters(c, vwt::parameter_layout(c), 1, p);
        m = std::make_unique<vwt::model<bf16_backend>>(c, p);
    }
    return *m;
}
void paired_moe_prefill(benchmark::State& state) {
    prefill_runner<vwt::model<bf16_backend>> pm(moe_bench_model(false)), pd(moe_bench_model(true));
    const auto [tm, td] = fastest_of(state, pm, pd);
    const auto sm = moe_bench_schedule(), sd = dense_same_active_schedule();
    state.counters["moe_tokens_per_s"] = prefill_tokens / tm;
    state.counters["dense_tokens_per_s"] = prefill_tokens / td;
    state.counters["moe_GFLOPs"] = prefill_flops(sm, prefill_tokens) / tm / 1e9;
    state.counters["dense_GFLOPs"] = prefill_flops(sd, prefill_tokens) / td / 1e9;
}
BENCHMARK(paired_moe_prefill)->Iterations(4)->UseManualTime()->Unit(benchmark::kMillisecond);

void paired_moe_decode(benchmark::State& state) {
    decode_runner<vwt::model<bf16_backend>> dm(moe_bench_model(false)), dd(moe_bench_model(true));
    read_runner read;
    const auto [tm, td, tr] = fastest_of(state, dm, dd, read);
    const double bw = 4.0 * read_runner::n / tr;
    state.counters["read_GBs"] = bw / 1e9;
    state.counters["moe_tokens_per_s"] = 1 / tm;
    state.counters["dense_tokens_per_s"] = 1 / td;
    state.counters["moe_bytes_per_token"] = decode_bytes(moe_bench_schedule(), 2, 4);
    state.counters["dense_bytes_per_token"] = decode_bytes(dense_same_active_schedule(), 2, 4);
    state.counters["moe_bound_tokens_per_s"] = bw / decode_bytes(moe_bench_schedule(), 2, 4);
    state.counters["dense_bound_tokens_per_s"] = bw / decode_bytes(dense_same_active_schedule(), 2, 4);
}
BENCHMARK(paired_moe_decode)->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);

// Five repetitions each; the summary uses the fastest (this machine's timings vary by +-20% run to
// run, and the best of five is the most repeatable figure).
void configure(benchmark::internal::Benchmark* b) {
    b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5)->Repetitions(5)->ReportAggregatesOnly(true)
        ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

BENCHMARK_CAPTURE(prefill, xformer, false)->Apply(configure);
BENCHMARK_CAPTURE(prefill, uniform, true)->Apply(configure);
BENCHMARK_CAPTURE(sgemm_same_shapes, xformer_eigen, false, gemm_library::eigen)->Apply(configure);
BENCHMARK_CAPTURE(sgemm_same_shapes, xformer_openblas, false, gemm_library::openblas)->Apply(configure);
BENCHMARK_CAPTURE(sgemm_same_shapes, xformer_onednn, false, gemm_library::onednn)->Apply(configure);
BENCHMARK_CAPTURE(decode, xformer, false)->Apply(configure);
BENCHMARK_CAPTURE(decode, uniform, true)->Apply(configure);
BENCHMARK(memory_read)->Apply(configure);


}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    vwt_bench::capturing_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    const auto counter = [&](const std::string& bench, const char* name) { return reporter.counter(bench, name); };
    const bool dense = counter("paired_prefill", "time_ratio") > 0 && counter("paired_decode/f32", "read_GBs") > 0;
    const bool moe = counter("paired_moe_prefill", "moe_tokens_per_s") > 0 && counter("paired_moe_decode", "read_GBs") > 0;
    if (!dense && !moe) return 0;
    std::printf("\nsummary, paired in one run, each figure the fastest of its repetitions (threads %d, prefill %d tokens, "
                "decode at context %d, vocab %d)\n",
                threads, prefill_tokens, decode_context, bench_vocab);
    // The time the same-shape GEMMs take at `gemm_gflops`, as a share of a prefill at `tokens_per_s`.
    const auto gemm_share = [](const std::string& w, double gemm_gflops, double tokens_per_s) {
        return 100 * (sgemm_flops(bench_schedule(w == "u")) / gemm_gflops / 1e9) / (prefill_tokens / tokens_per_s);
    };
    if (dense) {
        std::printf("bf16 products (bf16 and q8 weights' prefill) run here as %s\n",
                    vwt::cpu::kernels::bf16_products_pay() ? "bf16 products (oneDNN's bf16 matmul)"
                                                           : "float products of operands rounded to bf16 (oneDNN's sgemm: faster on this CPU)");
        for (const char* which : {"x", "u"}) {
            const std::string w = which;
            const double p = counter("paired_prefill", (w + "_GFLOPs").c_str());
            std::printf("%-8s prefill %.0f tok/s, %.1f GFLOP/s =", w == "x" ? "><former" : "uniform",
                        counter("paired_prefill", (w + "_tokens_per_s").c_str()), p);
            for (const auto l : {gemm_library::eigen, gemm_library::openblas, gemm_library::onednn})
                if (const double g = counter("paired_prefill", (w + "_" + library_name(l) + "_GFLOPs").c_str()); g > 0)
                    std::printf(" %.0f%% of %s (%.1f)", 100 * p / g, library_name(l), g);
            std::printf(" same-shape GFLOP/s\n");
            if (const double g = counter("paired_prefill", (w + "_oneDNN_GFLOPs").c_str()); g > 0)
                std::printf("%-8s the same GEMMs in oneDNN take %.0f%% of f32 prefill's time (the rest: attention, norms, RoPE, SwiGLU, copies)\n", "",
                            gemm_share(w, g, counter("paired_prefill", (w + "_tokens_per_s").c_str())));
            for (const char* format : {"f32", "bf16", "q8", "bf16_kv"}) {
                const std::string bench = std::string("paired_decode/") + format;
                const double d = counter(bench, (w + "_tokens_per_s").c_str());
                const double bound = counter(bench, (w + "_bound_tokens_per_s").c_str());
                const bool kv16 = std::string(format) == "bf16_kv";
                if (d > 0)
                    std::printf("%-8s decode %-4s weights, %s KV %.1f tok/s = %.0f%% of the read-bandwidth bound %.1f tok/s (read %.1f GB/s)\n",
                                "", kv16 ? "bf16" : format, kv16 ? "bf16" : "f32 ", d, 100 * d / bound, bound, counter(bench, "read_GBs"));
            }
            for (const char* format : {"bf16", "q8"}) {
                const std::string bench = std::string("paired_prefill_format/") + format;
                const double h = counter(bench, (w + "_tokens_per_s").c_str());
                if (h == 0) continue;
                const double flops = counter(bench, (w + "_GFLOPs").c_str());
                std::printf("%-8s prefill %-4s weights %.0f tok/s, %.1f GFLOP/s", "", format, h, flops);
                // against oneDNN's bf16 matmul and its sgemm (which runs the bf16 products where it is
                // the faster: vwt::cpu::kernels::bf16_products_pay)
                const double g = counter(bench, (w + "_bf16_gemm_GFLOPs").c_str()), f = counter("paired_prefill", (w + "_oneDNN_GFLOPs").c_str());
                if (g > 0) std::printf(" = %.0f%% of oneDNN's bf16 GEMM (%.1f)", 100 * flops / g, g);
                if (f > 0) std::printf("%s %.0f%% of its sgemm (%.1f)", g > 0 ? " and" : " =", 100 * flops / f, f);
                if (g > 0 || f > 0)
                    std::printf(" on the same shapes; the faster one's share of prefill %.0f%%", gemm_share(w, std::max(g, f), h));
                std::printf("\n%-8s   time outside the products (attention, norms, RoPE, embedding, copies), timed: %.1f%%\n", "",
                            100 * counter(bench, (w + "_outside_products").c_str()));
            }
        }
        if (const double sp = counter("paired_static_dynamic", "static_prefill_tokens_per_s"); sp > 0)
            std::printf("><former static extents / dynamic: prefill %.0f / %.0f tok/s (%+.1f%%), decode %.1f / %.1f tok/s (%+.1f%%)\n", sp,
                        counter("paired_static_dynamic", "dynamic_prefill_tokens_per_s"),
                        100 * (sp / counter("paired_static_dynamic", "dynamic_prefill_tokens_per_s") - 1),
                        counter("paired_static_dynamic", "static_decode_tokens_per_s"), counter("paired_static_dynamic", "dynamic_decode_tokens_per_s"),
                        100 * (counter("paired_static_dynamic", "static_decode_tokens_per_s") /
                                   counter("paired_static_dynamic", "dynamic_decode_tokens_per_s") - 1));
        if (const double g = counter("paired_q8_gemv_in_cache", "int8_GBs"); g > 0)
            std::printf("q8 decode kernel, weights in L2, 1 thread: %.1f GB/s with 8-bit activations vs %.1f GB/s widening to float (%.2fx)\n", g,
                        counter("paired_q8_gemv_in_cache", "widened_GBs"), counter("paired_q8_gemv_in_cache", "speedup"));
        const double tr = counter("paired_prefill", "time_ratio"), fr = counter("paired_prefill", "flop_ratio");
        std::printf("prefill time ratio ><former/uniform %.3f vs FLOP ratio %.3f (%+.1f%%)\n", tr, fr, 100 * (tr / fr - 1));
    }
    if (moe) {
        const double mp = counter("paired_moe_prefill", "moe_tokens_per_s");
        const auto sm = moe_bench_schedule(), sd = dense_same_active_schedule();
        const auto am = vwt::account(sm), ad = vwt::account(sd);
        std::printf("MoE ><former (moe_1b3b, vocab %d: %.0fM parameters, %.0fM active) against the dense ><former of h %d (%.0fM), bf16 weights:\n",
                    bench_vocab, am.params.total() / 1e6, am.params.active / 1e6, sd.dims.hidden, ad.params.total() / 1e6);
        std::printf("  prefill %.0f vs %.0f tok/s (%.2fx), %.1f vs %.1f GFLOP/s of active products\n", mp,
                    counter("paired_moe_prefill", "dense_tokens_per_s"), mp / counter("paired_moe_prefill", "dense_tokens_per_s"),
                    counter("paired_moe_prefill", "moe_GFLOPs"), counter("paired_moe_prefill", "dense_GFLOPs"));
        const double dm = counter("paired_moe_decode", "moe_tokens_per_s"), dd = counter("paired_moe_decode", "dense_tokens_per_s");
        std::printf("  decode at context %d: %.1f vs %.1f tok/s (%.2fx); %.0f vs %.0f MB read per token = %.0f%% vs %.0f%% of the read bound (%.1f GB/s)\n",
                    decode_context, dm, dd, dm / dd, counter("paired_moe_decode", "moe_bytes_per_token") / 1e6,
                    counter("paired_moe_decode", "dense_bytes_per_token") / 1e6, 100 * dm / counter("paired_moe_decode", "moe_bound_tokens_per_s"),
                    100 * dd / counter("paired_moe_decode", "dense_bound_tokens_per_s"), counter("paired_moe_decode", "read_GBs"));
    }
    return 0;
}
