// The CPU policy's RoPE rotation of one head's pairs: to[j] = a c[j] - b s[j] and to[j + half] =
// b c[j] + a s[j], with a = from[j] and b = from[j + half], for j < n. Head dims are short (12 to
// 72 in dense_200m, so n is 6 to 36): on AVX-512 each 16 pairs take two masked loads, two fused
// multiply-adds and two masked stores, where the compiler's loop ran mostly its scalar tail.
#pragma once

#include "weight_kernels.hpp"

namespace vwt::cpu::kernels {

// from and to may be the same row (RoPE in place): each pass reads its pairs before it writes them.
inline void rotate_half(const float* from, float* to, index_t n, index_t half, const float* c, const float* s) {
    index_t j = 0;
#if defined(__AVX512F__)
    for (; j < n; j += 16) {
        const __mmask16 m = detail::first_lanes(n - j);
        const __m512 a = _mm512_maskz_loadu_ps(m, from + j), b = _mm512_maskz_loadu_ps(m, from + j + half);
        const __m512 cj = _mm512_maskz_loadu_ps(m, c + j), sj = _mm512_maskz_loadu_ps(m, s + j);
        _mm512_mask_storeu_ps(to + j, m, _mm512_fmsub_ps(a, cj, _mm512_mul_ps(b, sj)));
        _mm512_mask_storeu_ps(to + j + half, m, _mm512_fmadd_ps(b, cj, _mm512_mul_ps(a, sj)));
    }
#endif
    for (; j < n; ++j) {
        const float a = from[j], b = from[j + half];
        to[j] = a * c[j] - b * s[j];
        to[j + half] = b * c[j] + a * s[j];
    }
}

}  // namespace vwt::cpu::kernels
