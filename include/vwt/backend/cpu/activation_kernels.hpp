// The CPU policy's SwiGLU kernels: out = u * silu(g) = u * g / (1 + e^-g) over a row, into float or
// straight into bf16 (a product's operand, rounded once), and its backward (the derivatives by u
// and by g). On AVX-512 they take 16 columns at a time: e^-g by a Cody-Waite reduction and a
// degree-7 polynomial (relative error ~1e-7, an ulp of float), the division by a reciprocal
// estimate and one Newton step (relative 2^-28); Eigen's exp and a division measured ~21 cycles
// per 16 columns on Sapphire Rapids, most of them the division, and the backward's scalar loop
// (std::exp per column) took ~10% of a float training step of tiny_l8. Other targets, and the
// columns after the last 16, use std::exp and a division.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "../../tensor/bf16.hpp"
#include "../../tensor/view.hpp"
#include "cpu_features.hpp"

namespace vwt::cpu::kernels {

namespace detail {
inline float swiglu_value(float u, float g) { return u * g / (1.0f + std::exp(-g)); }

#if defined(__AVX512F__)
// e^x for every float x: clamped to [-100, 87] (below, e^x < 4e-44 and 1 + e^x is 1; above, the
// caller's 1 / (1 + e^x) would leave the normal range), x = n ln2 + r with |r| <= ln2 / 2 (ln2 in
// two parts, so that n ln2 is exact to float precision), e^r by its Taylor polynomial of degree 7
// (error < 6e-9 relative), times 2^n.
inline __m512 exp_clamped(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-100.0f)), _mm512_set1_ps(87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2's high part: 9 significant bits, n * it is exact
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);      // ln2 - 0.693359375
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 5040), r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
// sigmoid(g) = 1 / (1 + e^-g), 16 lanes (e^-g clamped as exp_clamped says: 0 for g >= 100, and
// 1 / (1 + e^87) for g <= -87, where the exact value is below it and as good as 0).
inline __m512 sigmoid16(__m512 g) {
    const __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), exp_clamped(_mm512_sub_ps(_mm512_setzero_ps(), g)));
    const __m512 inverse = _mm512_rcp14_ps(den);
    return _mm512_mul_ps(inverse, _mm512_fnmadd_ps(den, inverse, _mm512_set1_ps(2.0f)));
}
// u * g / (1 + e^-g), 16 lanes.
inline __m512 swiglu16(__m512 u, __m512 g) { return _mm512_mul_ps(u, _mm512_mul_ps(g, sigmoid16(g))); }
// 16 floats stored as float, or rounded to bf16 as vwt::bf16 rounds (nearest, ties to even; a NaN
// stays a quiet NaN): by vcvtneps2bf16 where `native` (which also flushes denormal floats to zero),
// else by integer steps.
template <bool native>
inline void store16(float* out, __m512 v) {  // (native: only the bf16 store's)
    _mm512_storeu_ps(out, v);
}
template <bool native>
__attribute__((target("avx512bf16"))) inline void store16(bf16* out, __m512 v) {
    if constexpr (native) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
        return;
    }
    const __m512i x = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i bits = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    bits = _mm512_mask_or_epi32(bits, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(bits));
}
// The whole 16-column groups of swiglu() below; returns how many columns it did. Compiled for
// AVX512_BF16 (its target attribute), which only the `native` store uses.
template <bool native, class Out>
__attribute__((target("avx512bf16"))) index_t swiglu_vectors(const float* u, const float* g, index_t step, index_t n, Out* out) {
    index_t j = 0;
    if (step == 1) {
        for (; j + 16 <= n; j += 16) store16<native>(out + j, swiglu16(_mm512_loadu_ps(u + j), _mm512_loadu_ps(g + j)));
    } else if (step == 2 && g == u + 1) {
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        for (; j + 16 <= n; j += 16) {
            const __m512 a = _mm512_loadu_ps(u + 2 * j), b = _mm512_loadu_ps(u + 2 * j + 16);
            store16<native>(out + j, swiglu16(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b)));
        }
    }
    return j;
}
// SwiGLU's derivatives, 16 lanes: du = d g s, dg = d u s (1 + g (1 - s)), s = sigmoid(g).
inline void swiglu_backward16(__m512 u, __m512 g, __m512 d, __m512& du, __m512& dg) {
    const __m512 s = sigmoid16(g), ds = _mm512_mul_ps(d, s);
    du = _mm512_mul_ps(ds, g);
    dg = _mm512_mul_ps(_mm512_mul_ps(ds, u), _mm512_fmadd_ps(g, _mm512_sub_ps(_mm512_set1_ps(1.0f), s), _mm512_set1_ps(1.0f)));
}
// The whole 16-column groups of swiglu_backward() below; returns how many columns it did.
inline index_t swiglu_backward_vectors(const float* u, const float* g, index_t step, const float* d, index_t n, float* du, float* dg) {
    index_t j = 0;
    __m512 a, b;
    if (step == 1) {
        for (; j + 16 <= n; j += 16) {
            swiglu_backward16(_mm512_loadu_ps(u + j), _mm512_loadu_ps(g + j), _mm512_loadu_ps(d + j), a, b);
            _mm512_storeu_ps(du + j, a);
            _mm512_storeu_ps(dg + j, b);
        }
    } else if (step == 2 && g == u + 1 && dg == du + 1) {
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        // pairs (du j, dg j) back in place: lanes 0-7 of each, then lanes 8-15
        const __m512i low = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
        for (; j + 16 <= n; j += 16) {
            const __m512 x = _mm512_loadu_ps(u + 2 * j), y = _mm512_loadu_ps(u + 2 * j + 16);
            swiglu_backward16(_mm512_permutex2var_ps(x, even, y), _mm512_permutex2var_ps(x, odd, y), _mm512_loadu_ps(d + j), a, b);
            _mm512_storeu_ps(du + 2 * j, _mm512_permutex2var_ps(a, low, b));
            _mm512_storeu_ps(du + 2 * j + 16, _mm512_permutex2var_ps(a, high, b));
        }
    }
    return j;
}
#endif
}  // namespace detail

// out[j] = u[j] * g[j] / (1 + e^-g[j]) for j < n, with u[j] at u + step j and g[j] at g + step j:
// step 1 for u and g in two blocks of columns, 2 for interleaved pairs (g = u + 1). Out is float
// or bf16 (rounded to nearest, ties to even; on CPUs with AVX512_BF16 a denormal float becomes a
// signed zero).
template <class Out>
void swiglu(const float* u, const float* g, index_t step, index_t n, Out* out) {
    static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, bf16>, "SwiGLU writes float or bf16");
    index_t j = 0;
#if defined(__AVX512F__)
    if (std::is_same_v<Out, bf16> && has_avx512_bf16()) j = detail::swiglu_vectors<true>(u, g, step, n, out);
    else j = detail::swiglu_vectors<false>(u, g, step, n, out);
#endif
    for (; j < n; ++j) {
        const float v = detail::swiglu_value(u[j * step], g[j * step]);
        if constexpr (std::is_same_v<Out, float>) out[j] = v;
        else out[j] = bf16(v);
    }
}

// SwiGLU's backward over a row: for j < n, with u[j], g[j] at u + step j, g + step j and the output
// gradient d[j], du[j] = d g s and dg[j] = d u s (1 + g (1 - s)) with s = 1 / (1 + e^-g), written
// at du + step j and dg + step j: step 1 for two blocks of columns, 2 for interleaved pairs (g = u
// + 1 and dg = du + 1). T float (16 columns at a time on AVX-512) or double.
template <class T>
void swiglu_backward(const T* u, const T* g, index_t step, const T* d, index_t n, T* du, T* dg) {
    index_t j = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) j = detail::swiglu_backward_vectors(u, g, step, d, n, du, dg);
#endif
    for (; j < n; ++j) {
        const T uj = u[j * step], gj = g[j * step], s = T(1) / (T(1) + std::exp(-gj));
        du[j * step] = d[j] * gj * s;
        dg[j * step] = d[j] * uj * s * (T(1) + gj * (T(1) - s));
    }
}

}  // namespace vwt::cpu::kernels
