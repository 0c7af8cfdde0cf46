// The CPU policy's optional GEMM through oneDNN (define VWT_WITH_ONEDNN and link DNNL::dnnl, as
// the vwt::onednn CMake target does). oneDNN picks its kernel at run time for the CPU it runs on
// (AVX-512, AVX2, AMX), which a header-only library compiled with its user's flags cannot do; on the
// model's prefill shapes its sgemm measured 1.3-1.4x Eigen's on a 2-core Zen 4. Without it, the
// policy uses Eigen.
#pragma once

#if defined(VWT_WITH_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "../../error.hpp"
#include "../../tensor/view.hpp"

namespace vwt::cpu::onednn {

// y = alpha * op(a) . op(b) + beta * y, row-major, op = transpose where the flag is 'T', on
// `threads` threads: oneDNN threads with OpenMP, so the calling thread's OpenMP thread count is
// set for the call and restored after it (inside an enclosing parallel region oneDNN runs on the
// calling thread alone). beta 0 does not read y.
inline void sgemm(int threads, char trans_a, char trans_b, index_t m, index_t n, index_t k, float alpha, const float* a,
                  index_t lda, const float* b, index_t ldb, float beta, float* y, index_t ldy) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // nothing to multiply: y = beta * y (oneDNN wants leading dimensions >= 1)
        for (index_t r = 0; r < m; ++r)
            for (index_t c = 0; c < n; ++c) y[r * ldy + c] = beta == 0.0f ? 0.0f : beta * y[r * ldy + c];
        return;
    }
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const dnnl_status_t status = dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, y, ldy);
    omp_set_num_threads(saved);
    if (status != dnnl_success)
        vwt::detail::fail("oneDNN sgemm (", trans_a, trans_b, ") of [", m, " x ", k, "] by [", k, " x ", n, "] failed with status ",
                          static_cast<int>(status));
}

}  // namespace vwt::cpu::onednn
#endif
