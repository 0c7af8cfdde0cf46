// The CUDA policy on the GPU, against what the hardware does in the same run: the dense_200m
// ><former and its uniform twin at their real vocabulary (100263).
//  - prefill (256 tokens) tokens/s, and cuBLAS's GEMMs of the same shapes (cublasGemmEx, bf16 and
//    fp32) as the baseline it is stated against;
//  - decode at context 256 and 4096, and the bound that reading the weights and the KV cache once
//    per token at the measured device-to-device copy bandwidth sets;
//  - a training step (forward + backward, 8 x 1024 tokens) as model-FLOPs utilisation against the
//    measured bf16 GEMM peak (cublasGemmEx 8192^3);
//  - the ><former/uniform time ratios against their FLOP (byte) ratios.
// The policy's GEMMs run as context_options::math says (bf16 tensor cores with fp32 accumulation,
// the GPU default; --gemm=fp32 or tf32 to change). Weights and activations are stored in fp32.
// Run: build/bench/bench_cuda [--gemm=bf16|tf32|fp32] [Google Benchmark flags]. Without a GPU it
// says so and exits 0.
#include <benchmark/benchmark.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <vwt/backend/cuda/backend.hpp>
#include <vwt/train/step.hpp>
#include <vwt/vwt.hpp>

namespace {

using backend = vwt::cuda::backend<float>;
constexpr int prefill_tokens = 256;
constexpr int train_sequences = 8, train_length = 1024;

vwt::cuda::gemm_math bench_math = vwt::cuda::gemm_math::bf16;  // set once in main() from --gemm

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

const backend::context& bench_context() {
    static const backend::context ctx(vwt::cuda::context_options{0, bench_math});
    return ctx;
}

vwt::dynamic_schedule bench_schedule(bool uniform) {
    const auto x = vwt::make_schedule(vwt::presets::dense_200m);
    return uniform ? vwt::dynamic_schedule(x.dims, std::vector<int>(static_cast<std::size_t>(x.layers()), x.dims.hidden))
                   : vwt::dynamic_schedule(x.dims, x.widths);
}

const vwt::model<backend>& bench_model(bool uniform) {
    static std::map<bool, std::unique_ptr<vwt::model<backend>>> models;
    auto& m = models[uniform];
    if (!m) {
        const auto c = vwt::model_config::mup(bench_schedule(uniform));
        std::vector<float> p;
        vwt::initialize_parameters(c, vwt::parameter_layout(c), 1, p);
        m = std::make_unique<vwt::model<backend>>(c, p, bench_context());
    }
    return *m;
}

// ---- the hardware's figures

struct gemm_shape {
    int m, n, k;
};
// The matmuls of one prefill: 4 per layer (qkv, output, c_fc, c_proj) and the last token's logits.
std::vector<gemm_shape> prefill_shapes(const vwt::dynamic_schedule& s) {
    std::vector<gemm_shape> shapes;
    for (int i = 0; i < s.layers(); ++i) {
        const auto lp = vwt::layer_param_count(s, i);
        const int w = s.width(i), qkv = static_cast<int>((lp.attention - static_cast<vwt::count_t>(w) * w) / w);
        const int inter = static_cast<int>(lp.mlp / (3 * static_cast<vwt::count_t>(w)));
        shapes.push_back({prefill_tokens, qkv, w});
        shapes.push_back({prefill_tokens, w, w});
        shapes.push_back({prefill_tokens, 2 * inter, w});
        shapes.push_back({prefill_tokens, w, inter});
    }
    shapes.push_back({1, s.dims.vocab, s.dims.hidden});
    return shapes;
}
double flops_of(const std::vector<gemm_shape>& shapes) {
    double f = 0;
    for (const auto& s : shapes) f += 2.0 * s.m * s.n * s.k;
    return f;
}

// cublasGemmEx of the given shapes, y [m x n] = x [m x k] w^T, in bf16 (fp32 out, fp32
// accumulation) or fp32: the library GEMM a user would call directly.
struct cublas_gemms {
    cublasHandle_t handle{};
    std::vector<gemm_shape> shapes;
    std::vector<void*> buffers;
    bool bf16;
    cublas_gemms(std::vector<gemm_shape> s, bool half) : shapes(std::move(s)), bf16(half) {
        check(cublasCreate(&handle), "cublasCreate");
        const std::size_t in_bytes = half ? 2 : 4;
        std::uint32_t seed = 12345;
        for (const auto& sh : shapes)
            for (const std::size_t bytes : {in_bytes * sh.m * sh.k, in_bytes * sh.n * sh.k, 4ul * sh.m * sh.n}) {
                void* p = nullptr;
                check(cudaMalloc(&p, bytes), "cudaMalloc");
                upload_random(p, bytes, half && buffers.size() % 3 != 2, seed);
                buffers.push_back(p);
            }
    }
    // Random values in [-1, 1) (bf16 or fp32): a GEMM runs faster on zeros than on real data.
    static void upload_random(void* p, std::size_t bytes, bool bf16, std::uint32_t& seed) {
        std::vector<std::uint32_t> host((bytes + 3) / 4);
        auto next = [&seed] {
            seed = seed * 1664525u + 1013904223u;
            return static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
        };
        for (auto& word : host) {
            const float a = next();
            std::uint32_t bits;
            std::memcpy(&bits, &a, 4);
            if (bf16) {
                const float b = next();
                std::uint32_t high;
                std::memcpy(&high, &b, 4);
                bits = (bits >> 16) | (high & 0xffff0000u);  // two bf16 values per word
            }
            word = bits;
        }
        check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    ~cublas_gemms() {
        for (void* p : buffers) cudaFree(p);
        cublasDestroy(handle);
    }
    void run() {
        const float alpha = 1, beta = 0;
        const auto type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
        for (std::size_t i = 0; i < shapes.size(); ++i) {
            const auto& s = shapes[i];
            check(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.m, s.k, &alpha, buffers[3 * i + 1], type, s.k, buffers[3 * i], type,
                               s.k, &beta, buffers[3 * i + 2], CUDA_R_32F, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
        }
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
};

void cublas_same_shapes(benchmark::State& state, bool uniform, bool bf16) {
    const auto shapes = prefill_shapes(bench_schedule(uniform));
    cublas_gemms g(shapes, bf16);
    for (auto _ : state) g.run();
    state.counters["TFLOP/s"] = benchmark::Counter(flops_of(shapes) / 1e12, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["tokens/s"] = benchmark::Counter(prefill_tokens, benchmark::Counter::kIsIterationInvariantRate);
}

void bf16_gemm_peak(benchmark::State& state) {
    const std::vector<gemm_shape> shape{{8192, 8192, 8192}};
    cublas_gemms g(shape, true);
    for (auto _ : state) g.run();
    state.counters["TFLOP/s"] = benchmark::Counter(flops_of(shape) / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

// Device-to-device copy of 2 GiB: bytes read + written per second.
void device_copy(benchmark::State& state) {
    constexpr std::size_t bytes = std::size_t(2) << 30;
    void *from = nullptr, *to = nullptr;
    check(cudaMalloc(&from, bytes), "cudaMalloc");
    check(cudaMalloc(&to, bytes), "cudaMalloc");
    for (auto _ : state) {
        check(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    state.counters["GB/s"] = benchmark::Counter(2.0 * bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    cudaFree(from);
    cudaFree(to);
}

// ---- the policy

void prefill(benchmark::State& state, bool uniform) {
    const auto& m = bench_model(uniform);
    const auto& ctx = bench_context();
    std::vector<int> tokens(prefill_tokens);
    for (int i = 0; i < prefill_tokens; ++i) tokens[static_cast<std::size_t>(i)] = (i * 31) % m.vocab();
    auto cache = m.make_cache(prefill_tokens);
    auto ws = m.make_workspace(ctx, prefill_tokens, prefill_tokens);
    for (auto _ : state) {
        cache.clear();
        const vwt::sequence_input<backend> in{&cache, tokens};
        benchmark::DoNotOptimize(m.forward(ctx, ws, std::span(&in, 1)));
        ctx.synchronize();
    }
    state.counters["tokens/s"] = benchmark::Counter(prefill_tokens, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["TFLOP/s"] = benchmark::Counter(flops_of(prefill_shapes(m.schedule())) / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

// A session holding `context - 1` tokens, ready to decode the token that makes `context`.
struct decode_session {
    vwt::session<vwt::model<backend>> s;
    int past;
    decode_session(const vwt::model<backend>& m, const backend::context& ctx, int context) : s(m, ctx, context, 512), past(context - 1) {
        std::vector<int> prompt(static_cast<std::size_t>(past));
        for (int i = 0; i < past; ++i) prompt[static_cast<std::size_t>(i)] = (i * 17) % m.vocab();
        s.append(ctx, prompt);
    }
    void step(const backend::context& ctx) {
        s.truncate(past);
        int next = 7;
        benchmark::DoNotOptimize(s.append(ctx, std::span(&next, 1)));
    }
};

// One decode step at a context (the new token attends to `context` positions, itself included),
// in a session: its logits come back to the host for sampling.
void decode(benchmark::State& state, bool uniform) {
    const int context = static_cast<int>(state.range(0));
    const auto& m = bench_model(uniform);
    const auto& ctx = bench_context();
    decode_session d(m, ctx, context);
    for (auto _ : state) d.step(ctx);
    const auto costs = vwt::account(m.schedule(), {context, 4, 4});
    state.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["bytes/token"] = static_cast<double>(costs.weight_bytes) + static_cast<double>(costs.kv_bytes_per_token) * context;
}

// A training batch of 8 x 1024 tokens with its workspace and gradient buffer: step() runs one
// forward + backward (no optimizer step) and waits for it.
struct train_problem {
    vwt::train::step_workspace<backend> ws;
    backend::buffer<float> grad;
    vwt::model_tensors<float, backend::memory> grads;
    std::vector<int> tokens, targets;
    train_problem(const vwt::model<backend>& m, const backend::context& ctx)
        : ws(ctx, m, train_sequences, train_length),
          grad(m.parameters().size()),
          grads(m.bind(grad.view())),
          tokens(train_sequences * train_length),
          targets(tokens.size()) {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            tokens[i] = static_cast<int>((i * 131) % static_cast<std::size_t>(m.vocab()));
            targets[i] = static_cast<int>((i * 71 + 3) % static_cast<std::size_t>(m.vocab()));
        }
    }
    void step(const vwt::model<backend>& m, const backend::context& ctx) {
        benchmark::DoNotOptimize(vwt::train::loss_and_gradient(ctx, m, vwt::train::token_batch{tokens, targets, train_sequences}, ws, grads));
        ctx.synchronize();  // the step's kernels are still queued when it returns
    }
};

// One forward + backward over 8 x 1024 tokens (no optimizer step).
void train_step(benchmark::State& state, bool uniform) {
    const auto& m = bench_model(uniform);
    const auto& ctx = bench_context();
    train_problem p(m, ctx);
    for (auto _ : state) p.step(m, ctx);
    const auto& tokens = p.tokens;
    const double flops = vwt::account(m.schedule(), {train_length}).train_flops_per_token * static_cast<double>(tokens.size());
    state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens.size()), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["TFLOP/s"] = benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

// --profile=prefill|decode|train: one warm-up, then one run of that workload on the ><former
// between cudaProfilerStart and cudaProfilerStop, for `ncu --profile-from-start off`.
void profile_once(const std::string& what) {
    const auto& m = bench_model(false);
    const auto& ctx = bench_context();
    auto run = [&](auto&& f) {
        f();
        ctx.synchronize();
        check(cudaProfilerStart(), "cudaProfilerStart");
        f();
        ctx.synchronize();
        check(cudaProfilerStop(), "cudaProfilerStop");
    };
    if (what == "prefill") {
        std::vector<int> tokens(prefill_tokens);
        for (int i = 0; i < prefill_tokens; ++i) tokens[static_cast<std::size_t>(i)] = (i * 31) % m.vocab();
        auto cache = m.make_cache(prefill_tokens);
        auto ws = m.make_workspace(ctx, prefill_tokens, prefill_tokens);
        run([&] {
            cache.clear();
            const vwt::sequence_input<backend> in{&cache, tokens};
            m.forward(ctx, ws, std::span(&in, 1));
        });
    } else if (what == "decode") {
        decode_session d(m, ctx, 256);
        run([&] { d.step(ctx); });
    } else if (what == "train") {
        train_problem p(m, ctx);
        run([&] { p.step(m, ctx); });
    } else {
        throw std::runtime_error("--profile: expected prefill, decode or train, not '" + what + "'");
    }
}

// Runs a benchmark body, turning an exception (out of memory, a CUDA error) into a skipped
// benchmark with its message, so that the others and the summary still run.
template <class F, class... A>
void guarded(benchmark::State& state, F f, A... a) {
    try {
        f(state, a...);
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

// Collects each benchmark's counters for the summary.
class summary_reporter : public benchmark::ConsoleReporter {
public:
    std::map<std::string, std::map<std::string, double>> results;
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const auto& r : runs)
            if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median")
                for (const auto& [name, counter] : r.counters) results[r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args)][name] = counter.value;
        ConsoleReporter::ReportRuns(runs);
    }
};

}  // namespace

int main(int argc, char** argv) {
    std::string profile;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind("--gemm=", 0) == 0) {
            const auto v = a.substr(7);
            bench_math = v == "fp32" ? vwt::cuda::gemm_math::fp32 : v == "tf32" ? vwt::cuda::gemm_math::tf32 : vwt::cuda::gemm_math::bf16;
            for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
            --argc;
            --i;
        } else if (a.rfind("--profile=", 0) == 0) {
            profile = a.substr(10);
        }
    }
    if (!backend::context::available()) {
        std::printf("bench_cuda: no CUDA device on this machine; nothing to measure\n");
        return 0;
    }
    if (!profile.empty()) {
        profile_once(profile);
        return 0;
    }
    for (const bool uniform : {false, true}) {
        const std::string name = uniform ? "uniform" : "xformer";
        benchmark::RegisterBenchmark(("prefill/" + name).c_str(), guarded<decltype(&prefill), bool>, &prefill, uniform)->UseRealTime()->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("cublas_bf16_same_shapes/" + name).c_str(), guarded<decltype(&cublas_same_shapes), bool, bool>, &cublas_same_shapes, uniform, true)->UseRealTime()->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("cublas_fp32_same_shapes/" + name).c_str(), guarded<decltype(&cublas_same_shapes), bool, bool>, &cublas_same_shapes, uniform, false)->UseRealTime()->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("decode/" + name).c_str(), guarded<decltype(&decode), bool>, &decode, uniform)->Arg(256)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("train_step/" + name).c_str(), guarded<decltype(&train_step), bool>, &train_step, uniform)->UseRealTime()->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark("device_copy", guarded<decltype(&device_copy)>, &device_copy)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("bf16_gemm_peak", guarded<decltype(&bf16_gemm_peak)>, &bf16_gemm_peak)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::Initialize(&argc, argv);
    summary_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    auto& r = reporter.results;
    auto get = [&](const std::string& b, const std::string& c) { return r.count(b) && r[b].count(c) ? r[b][c] : 0.0; };
    const double bandwidth = get("device_copy", "GB/s") * 1e9 / 2;  // bytes read per second (copy moves each byte twice)
    const double peak = get("bf16_gemm_peak", "TFLOP/s");
    std::printf("\nsummary (targets: prefill >= 60%% of same-shape GEMM, decode >= 70%% of the bandwidth bound, training MFU >= 35%%)\n");
    std::printf("device copy %.0f GB/s (read bound %.0f GB/s), bf16 GEMM peak %.0f TFLOP/s\n", get("device_copy", "GB/s"), bandwidth / 1e9, peak);
    for (const std::string m : {"xformer", "uniform"}) {
        const double pre = get("prefill/" + m, "tokens/s");
        std::printf("%s: prefill %.0f tok/s = %.0f%% of cuBLAS bf16 same shapes, %.0f%% of fp32; ", m.c_str(), pre,
                    100 * pre / get("cublas_bf16_same_shapes/" + m, "tokens/s"), 100 * pre / get("cublas_fp32_same_shapes/" + m, "tokens/s"));
        for (const int c : {256, 4096}) {
            const std::string b = "decode/" + m + "/" + std::to_string(c);
            const double bound = bandwidth / get(b, "bytes/token");
            std::printf("decode@%d %.0f tok/s = %.0f%% of %.0f; ", c, get(b, "tokens/s"), 100 * get(b, "tokens/s") / bound, bound);
        }
        std::printf("training %.0f tok/s, MFU %.0f%%\n", get("train_step/" + m, "tokens/s"), 100 * get("train_step/" + m, "TFLOP/s") / peak);
    }
    const auto x = vwt::account(bench_schedule(false), {train_length}), u = vwt::account(bench_schedule(true), {train_length});
    std::printf("><former/uniform time ratio: prefill %.3f, training %.3f; FLOP ratio %.3f\n",
                get("prefill/uniform", "tokens/s") / get("prefill/xformer", "tokens/s"),
                get("train_step/uniform", "tokens/s") / get("train_step/xformer", "tokens/s"), x.flops_per_token / u.flops_per_token);
    benchmark::Shutdown();
    return 0;
}
