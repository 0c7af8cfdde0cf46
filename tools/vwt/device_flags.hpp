// --device, --threads, --gpu, --gemm and (inference) --weights: where a command computes, how it
// multiplies, and the policy that runs it.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include <CLI/CLI.hpp>
#include <vwt/vwt.hpp>
#if defined(VWT_CLI_WITH_CUDA)
#include <vwt/backend/cuda/backend.hpp>
#endif

namespace vwt::cli {

struct device_flags {
    std::string device = "cpu";
    int threads = 1;
    int gpu = 0;
    std::string gemm = "auto";
    std::string weights = "f32";
    std::string kv = "f32";

    // --weights, for the commands that only run a model (generate, logits, eval, bench).
    void add_weights_to(CLI::App& cmd) {
        cmd.add_option("--weights", weights,
                       "how the CPU keeps the weights: f32, bf16 (half the bytes) or q8 (8 bits + a scale per 32 weights)");
    }
    // --kv-dtype, for the commands that hold a KV cache across calls (generate, bench).
    void add_kv_to(CLI::App& cmd) {
        cmd.add_option("--kv-dtype", kv, "how the KV cache keeps keys and values: f32, or bf16 (half the bytes, --device cpu)");
    }
    // The KV cache dtype --kv-dtype names.
    vwt::kv_dtype kv_dtype() const {
        if (kv == "f32") return vwt::kv_dtype::compute;
        if (kv == "bf16") {
            if (device != "cpu") detail::fail("--kv-dtype bf16: only --device cpu keeps the KV cache in bf16 for now");
            return vwt::kv_dtype::bf16;
        }
        detail::fail("--kv-dtype: unknown dtype '", kv, "' (f32, bf16)");
    }

    void add_to(CLI::App& cmd) {
        cmd.add_option("--device", device, "where to compute: cpu, or cuda (a build with -DVWT_WITH_CUDA=ON)");
        cmd.add_option("--threads", threads, "CPU threads (--device cpu)");
        cmd.add_option("--gpu", gpu, "CUDA device ordinal (--device cuda)");
        cmd.add_option("--gemm", gemm,
                       "matrix products: auto (fp32; on the CPU bf16 in prefill against --weights bf16 or q8), fp32, bf16 (operands "
                       "rounded to bf16, fp32 sums: mixed precision with fp32 master weights in training), or tf32 (--device cuda)");
    }

    // Calls f.template operator()<B>(ctx) with the float-weight policy B that --device names (the
    // training commands).
    template <class F>
    void run(F&& f) const {
        dispatch<false>(std::forward<F>(f));
    }
    // The same, with --weights choosing the CPU policy's weight format (the inference commands).
    template <class F>
    void run_inference(F&& f) const {
        dispatch<true>(std::forward<F>(f));
    }

private:
    template <bool WeightFormats, class F>
    void dispatch(F&& f) const {
        if (threads < 1) detail::fail("--threads: must be at least 1, got ", threads);
        if (weights != "f32" && weights != "bf16" && weights != "q8")
            detail::fail("--weights: unknown format '", weights, "' (f32, bf16, q8)");
        if (weights != "f32" && device != "cpu")
            detail::fail("--weights ", weights, ": only --device cpu keeps weights in bf16 or q8 (on CUDA, --gemm bf16 runs bf16 tensor cores)");
        (void)kv_dtype();  // a bad --kv-dtype fails before any model is loaded
        if (gemm != "auto" && gemm != "fp32" && gemm != "tf32" && gemm != "bf16")
            detail::fail("--gemm: unknown arithmetic '", gemm, "' (auto, fp32, bf16, tf32)");
        if (device == "cpu") {
            if (gemm == "tf32") detail::fail("--gemm tf32: tensor-float products are a GPU's (--device cuda); the CPU has auto, fp32, bf16");
            const cpu::context ctx{threads, gemm == "fp32"   ? cpu::product_precision::f32
                                            : gemm == "bf16" ? cpu::product_precision::bf16
                                                             : cpu::product_precision::automatic};
            if constexpr (WeightFormats) {
                if (weights == "bf16") return f.template operator()<cpu::backend<float, bf16>>(ctx);
                if (weights == "q8") return f.template operator()<cpu::backend<float, q8_block>>(ctx);
            }
            return f.template operator()<cpu::backend<float>>(ctx);
        }
        if (device == "cuda") {
#if defined(VWT_CLI_WITH_CUDA)
            cuda::context_options options;
            options.device = gpu;
            if (gemm == "tf32") options.math = cuda::gemm_math::tf32;
            else if (gemm == "bf16") options.math = cuda::gemm_math::bf16;
            else options.math = cuda::gemm_math::fp32;
            if (!cuda::context::available()) detail::fail("--device cuda: no CUDA device is visible");
            return f.template operator()<cuda::backend<float>>(cuda::context(options));
#else
            detail::fail("--device cuda: this vwt was built without the CUDA backend (configure with -DVWT_WITH_CUDA=ON)");
#endif
        }
        detail::fail("--device: unknown device '", device, "' (cpu, cuda)");
    }
};

// The model of a loaded directory on policy B, its float weights converted to B's weight format.
template <class B>
model<B> make_model(io::loaded_model loaded, const typename B::context& ctx) {
    using W = typename B::weight_type;
    if constexpr (std::is_same_v<W, float>) {
        return model<B>(std::move(loaded.config), loaded.params, ctx);
    } else {
        const auto stored = convert_parameters<W>(parameter_layout(loaded.config), loaded.params);
        loaded.params = {};
        return model<B>(std::move(loaded.config), stored, ctx);
    }
}

}  // namespace vwt::cli
