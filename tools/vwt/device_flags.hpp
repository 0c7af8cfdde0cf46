// --device, --threads, --gpu and --gemm: where a command computes, and the policy that runs it.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <vwt/backend/cpu/backend.hpp>
#include <vwt/error.hpp>
#if defined(VWT_CLI_WITH_CUDA)
#include <vwt/backend/cuda/backend.hpp>
#endif

namespace vwt::cli {

struct device_flags {
    std::string device = "cpu";
    int threads = 1;
    int gpu = 0;
    std::string gemm = "fp32";

    void add_to(CLI::App& cmd) {
        cmd.add_option("--device", device, "where to compute: cpu, or cuda (a build with -DVWT_WITH_CUDA=ON)");
        cmd.add_option("--threads", threads, "CPU threads (--device cpu)");
        cmd.add_option("--gpu", gpu, "CUDA device ordinal (--device cuda)");
        cmd.add_option("--gemm", gemm, "GPU matrix products: fp32, tf32 or bf16 tensor cores with fp32 accumulation (--device cuda)");
    }

    // Calls f.template operator()<B>(ctx) with the float policy B that --device names.
    template <class F>
    void run(F&& f) const {
        if (threads < 1) detail::fail("--threads: must be at least 1, got ", threads);
        if (device == "cpu") return f.template operator()<cpu::backend<float>>(cpu::context{threads});
        if (device == "cuda") {
#if defined(VWT_CLI_WITH_CUDA)
            cuda::context_options options;
            options.device = gpu;
            if (gemm == "fp32") options.math = cuda::gemm_math::fp32;
            else if (gemm == "tf32") options.math = cuda::gemm_math::tf32;
            else if (gemm == "bf16") options.math = cuda::gemm_math::bf16;
            else detail::fail("--gemm: unknown arithmetic '", gemm, "' (fp32, tf32, bf16)");
            if (!cuda::context::available()) detail::fail("--device cuda: no CUDA device is visible");
            return f.template operator()<cuda::backend<float>>(cuda::context(options));
#else
            detail::fail("--device cuda: this vwt was built without the CUDA backend (configure with -DVWT_WITH_CUDA=ON)");
#endif
        }
        detail::fail("--device: unknown device '", device, "' (cpu, cuda)");
    }
};

}  // namespace vwt::cli
