// The CPU policy's weight-format kernels: float activations against weights stored as float, bf16
// or q8 blocks, widened to float in registers. x86 builds use AVX-512 or AVX2 when the compiler targets
// them (-march=native for vwt's own binaries, the user's flags for an embedder); other targets
// use the portable loops, which give the same sums in a different order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "../../tensor/weight_format.hpp"
#include "../../tensor/view.hpp"
#include "cpu_features.hpp"

namespace vwt::cpu::kernels {

// n weights widened to float.
inline void widen(const float* w, index_t n, float* out) {
    if (n > 0) std::memcpy(out, w, static_cast<std::size_t>(n) * sizeof(float));  // an empty row may have no storage
}
inline void widen(const bf16* w, index_t n, float* out) {
    index_t c = 0;
#if defined(__AVX512F__)
    for (; c + 16 <= n; c += 16)
        _mm512_storeu_ps(out + c, _mm512_castsi512_ps(_mm512_slli_epi32(
                                      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c))), 16)));
#endif
    for (; c < n; ++c) out[c] = static_cast<float>(w[c]);
}
// n a multiple of 32 (a whole number of blocks).
inline void widen(const q8_block* w, index_t n, float* out) {
    for (index_t b = 0; b < n / q8_block::size; ++b)
        for (index_t i = 0; i < q8_block::size; ++i) out[b * q8_block::size + i] = w[b][i];
}

#if defined(__AVX512F__)
namespace detail {
// 16 floats to bf16 by vwt::bf16's rule: nearest, ties to even (the carry of adding 0x7fff plus the
// lowest kept bit), a NaN kept a (quiet) NaN.
inline __m256i round16_to_bf16(__m512 x) {
    const __m512i bits = _mm512_castps_si512(x), high = _mm512_srli_epi32(bits, 16);
    const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i nearest = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(nearest, nan, high, _mm512_set1_epi32(0x40)));
}
}  // namespace detail
#endif

// n floats rounded to bf16, nearest with ties to even (vwt::bf16's rounding); round_through_bf16
// keeps them as floats, for the products that emulate bf16 operands with float ones.
inline void round_to_bf16(const float* x, index_t n, bf16* out) {
    index_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), detail::round16_to_bf16(_mm512_loadu_ps(x + i)));
#endif
    for (; i < n; ++i) out[i] = bf16(x[i]);
}
// n weights of q8 blocks (n a multiple of 32), dequantized (scale * q in float, as q8_block's
// operator[]) and rounded to bf16 by the same rule: a bf16 product's operand. In one pass on
// AVX-512, where widening to a float row and rounding it took ~30% of a q8 prefill.
inline void round_to_bf16(const q8_block* w, index_t n, bf16* out) {
    for (index_t b = 0; b < n / q8_block::size; ++b) {
        bf16* o = out + b * q8_block::size;
#if defined(__AVX512F__)
        const __m512 scale = _mm512_set1_ps(w[b].scale);
        for (index_t half = 0; half < 2; ++half) {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].q + 16 * half));
            const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), scale);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16 * half), detail::round16_to_bf16(v));
        }
#else
        for (index_t i = 0; i < q8_block::size; ++i) o[i] = bf16(w[b][i]);
#endif
    }
}
inline void round_through_bf16(const float* x, index_t n, float* out) {
    index_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const __m512i rounded = _mm512_cvtepu16_epi32(detail::round16_to_bf16(_mm512_loadu_ps(x + i)));
        _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(rounded, 16)));
    }
#endif
    for (; i < n; ++i) out[i] = static_cast<float>(bf16(x[i]));
}

namespace detail {
#if defined(__AVX2__) && defined(__FMA__)
// The sum of a 256-bit vector's 8 floats (AVX2's vsum; q8's integer dot sums in 256 bits on AVX-512 too).
inline float vsum256(__m256 a) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}
#endif
#if defined(__AVX512F__)
constexpr index_t lanes = 16;
using vfloat = __m512;
inline vfloat vzero() { return _mm512_setzero_ps(); }
inline vfloat vload(const float* p) { return _mm512_loadu_ps(p); }
inline vfloat vload(const bf16* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return _mm512_fmadd_ps(a, b, c); }
inline vfloat vadd(vfloat a, vfloat b) { return _mm512_add_ps(a, b); }
inline vfloat vmul(vfloat a, vfloat b) { return _mm512_mul_ps(a, b); }
inline vfloat vbroadcast(float x) { return _mm512_set1_ps(x); }
inline void vstore(float* p, vfloat v) { _mm512_storeu_ps(p, v); }
inline float vsum(vfloat a) { return _mm512_reduce_add_ps(a); }
using vmask = __mmask16;
// a mask of the first n lanes (none for n <= 0, all for n >= lanes)
inline vmask first_lanes(index_t n) { return n >= 16 ? vmask(0xffff) : n <= 0 ? vmask(0) : static_cast<vmask>((1u << n) - 1u); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr index_t lanes = 8;
using vfloat = __m256;
inline vfloat vzero() { return _mm256_setzero_ps(); }
inline vfloat vload(const float* p) { return _mm256_loadu_ps(p); }
inline vfloat vload(const bf16* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return _mm256_fmadd_ps(a, b, c); }
inline vfloat vadd(vfloat a, vfloat b) { return _mm256_add_ps(a, b); }
inline vfloat vmul(vfloat a, vfloat b) { return _mm256_mul_ps(a, b); }
inline vfloat vbroadcast(float x) { return _mm256_set1_ps(x); }
inline void vstore(float* p, vfloat v) { _mm256_storeu_ps(p, v); }
inline float vsum(vfloat a) { return vsum256(a); }
using vmask = __m256;
inline vmask first_lanes(index_t n) {
    return _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps(static_cast<float>(n)), _CMP_LT_OQ);
}
#else
constexpr index_t lanes = 0;
#endif
// How many bytes ahead of use a decode product asks for its weights' cache lines (0: it does not
// ask; the hardware prefetcher alone), by the CPU it runs on. Measured with the dense_200m
// ><former's 65 decode products in sequence from memory, two threads, against a streaming read in
// the same run:
// - 2-core AMX Xeon: the hardware prefetcher alone kept bf16 and q8 at 55-70% of the read (their
//   weights take more work per byte than float ones); 2 KiB ahead lifted bf16 to 80-93% and q8 to
//   69-75% (1 KiB: 77-81% / 69%).
// - 2-core AMD Zen 4 (family 25): the same requests slowed the products down (bf16: 5.9 ms with
//   them against 4.5 ms without; a plain read of the same bytes 3.9 ms; memory at 58 GB/s).
// - 2-core AMD Zen 5 (family 26), medians of 20 rounds each taking turns: q8 73-80% without,
//   95-100% at 1 KiB, 102-107% at 2 KiB, 107-113% at 4 KiB, 106-109% at 8 KiB; bf16 93-97% without,
//   96-113% at 2 KiB, 108-118% at 4 KiB; float 102-108% without and within noise of it at every
//   distance (a plain read of the weights ran at 95-113% of that read).
inline std::size_t prefetch_distance() {
    static const std::size_t bytes = is_intel_cpu() ? 2048 : cpu_family() >= 26 ? 4096 : 0;
    return bytes;
}
// Asks for `bytes` of cache lines `distance` bytes beyond p (a decode product's next step).
inline void prefetch_ahead(const void* p, std::size_t bytes, std::size_t distance) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    // an address, not a pointer into the array: it may lie past the weights' end (a prefetch never faults)
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(p) + distance;
    for (std::size_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(at + b), _MM_HINT_T0);
#else
    (void)p, (void)bytes, (void)distance;
#endif
}
}  // namespace detail

// dot(w, x) over k elements, in four independent sums (one row streamed front to back: the
// access pattern the hardware prefetcher follows best; measured at the read bandwidth with two
// threads on a 2-core Zen 4, where four rows side by side ran ~40% slower).
template <class W, class X>
inline float dot(const W* w, const X* x, index_t k) {
    static_assert(std::is_same_v<X, float> || std::is_same_v<X, bf16>, "dot: float or bf16 activations");
    index_t c = 0;
    float sum = 0.0f;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    using namespace detail;
    const std::size_t ahead = prefetch_distance();
    vfloat a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
    for (; c + 4 * lanes <= k; c += 4 * lanes) {
        if (ahead) prefetch_ahead(w + c, 4 * lanes * sizeof(W), ahead);
        a0 = vfma(vload(w + c), vload(x + c), a0);
        a1 = vfma(vload(w + c + lanes), vload(x + c + lanes), a1);
        a2 = vfma(vload(w + c + 2 * lanes), vload(x + c + 2 * lanes), a2);
        a3 = vfma(vload(w + c + 3 * lanes), vload(x + c + 3 * lanes), a3);
    }
    for (; c + lanes <= k; c += lanes) a0 = vfma(vload(w + c), vload(x + c), a0);
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<W, float> && std::is_same_v<X, float>)  // the tail in one masked step (attention's head dims: 12, 22, 38, ...)
        if (c < k) {
            const auto m = static_cast<__mmask16>((1u << (k - c)) - 1);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + c), _mm512_maskz_loadu_ps(m, x + c), a1);
            c = k;
        }
#endif
    sum = vsum(vadd(vadd(a0, a1), vadd(a2, a3)));
#else
    float s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (; c + 4 <= k; c += 4) {
        sum += static_cast<float>(w[c]) * static_cast<float>(x[c]);
        s1 += static_cast<float>(w[c + 1]) * static_cast<float>(x[c + 1]);
        s2 += static_cast<float>(w[c + 2]) * static_cast<float>(x[c + 2]);
        s3 += static_cast<float>(w[c + 3]) * static_cast<float>(x[c + 3]);
    }
    sum += s1 + s2 + s3;
#endif
    for (; c < k; ++c) sum += static_cast<float>(w[c]) * static_cast<float>(x[c]);
    return sum;
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
namespace detail {
// a + the products of the 32 bf16 pairs at w and x (vdpbf16ps), for the first `n` of them
// (the others read as 0, which adds nothing)
__attribute__((target("avx512bf16"))) inline __m512 add_pair_products(__m512 a, const bf16* w, const bf16* x, index_t n) {
    const auto present = n >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((std::uint64_t(1) << n) - 1);
    return _mm512_dpbf16_ps(a, reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(present, w)),
                            reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(present, x)));
}
// dot(w, x) over k bf16 pairs by AVX512_BF16's vdpbf16ps: 32 products per instruction, each exact
// in float (two 8-bit significands), added pairwise into 16 float lanes; four independent sums (one
// instruction's result is ready only a few instructions' time later). The CPU treats denormal
// inputs as 0 and rounds a denormal sum to 0. The caller checks has_avx512_bf16().
__attribute__((target("avx512bf16"))) inline float dot_bf16_pairs(const bf16* w, const bf16* x, index_t k) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    index_t c = 0;
    const std::size_t ahead = prefetch_distance();
    for (; c + 128 <= k; c += 128) {
        if (ahead) prefetch_ahead(w + c, 256, ahead);
        a0 = add_pair_products(a0, w + c, x + c, 32);
        a1 = add_pair_products(a1, w + c + 32, x + c + 32, 32);
        a2 = add_pair_products(a2, w + c + 64, x + c + 64, 32);
        a3 = add_pair_products(a3, w + c + 96, x + c + 96, 32);
    }
    for (; c < k; c += 32) a0 = add_pair_products(a0, w + c, x + c, k - c);  // the rest, the last step masked
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
}  // namespace detail
#endif

// dot(w, x) over k elements, both bf16 (bf16 decode's activations, rounded once per row): each
// product exact in float, float sums, by vdpbf16ps where the CPU has AVX512_BF16 and by widening both
// to float elsewhere (the same products, summed in another order).
inline float dot(const bf16* w, const bf16* x, index_t k) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (has_avx512_bf16()) return detail::dot_bf16_pairs(w, x, k);
#endif
    return dot<bf16, bf16>(w, x, k);
}

// dot(w, x) over k weights in k / 32 q8 blocks: per block, the 32 products summed in float, then
// scaled and added to one of two running sums.
inline float dot(const q8_block* w, const float* x, index_t k) {
    const index_t blocks = k / q8_block::size;
    index_t b = 0;
    float sum = 0.0f;
#if defined(__AVX512F__)
    const auto block = [&](index_t i, __m512 acc) {
        const auto* q = reinterpret_cast<const __m128i*>(w[i].q);
        const float* xb = x + i * q8_block::size;
        __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), _mm512_loadu_ps(xb));
        t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), _mm512_loadu_ps(xb + 16), t);
        return _mm512_fmadd_ps(_mm512_set1_ps(w[i].scale), t, acc);
    };
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    const std::size_t ahead = detail::prefetch_distance();
    for (; b + 4 <= blocks; b += 4) {
        if (ahead) detail::prefetch_ahead(w + b, 4 * sizeof(q8_block), ahead);
        a0 = block(b, a0), a1 = block(b + 1, a1), a2 = block(b + 2, a2), a3 = block(b + 3, a3);
    }
    for (; b < blocks; ++b) a0 = block(b, a0);
    sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; b < blocks; ++b) {
        const float* xb = x + b * q8_block::size;
        __m256 t = _mm256_setzero_ps();
        for (int part = 0; part < 4; ++part) {
            const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].q + 8 * part));
            t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_loadu_ps(xb + 8 * part), t);
        }
        if (b % 2) a1 = _mm256_fmadd_ps(_mm256_set1_ps(w[b].scale), t, a1);
        else a0 = _mm256_fmadd_ps(_mm256_set1_ps(w[b].scale), t, a0);
    }
    sum = detail::vsum(_mm256_add_ps(a0, a1));
#endif
    for (; b < blocks; ++b) {
        float t = 0.0f;
        for (index_t i = 0; i < q8_block::size; ++i) t += static_cast<float>(w[b].q[i]) * x[b * q8_block::size + i];
        sum += w[b].scale * t;
    }
    return sum;
}

// x's k values (k a multiple of 32) quantized to k / 32 q8 blocks by q8_block::quantize_or_nan's
// rule: the activations of q8 decode, so that its products run on 8-bit integers (see dot below).
inline void quantize_row(const float* x, index_t k, q8_block* out) {
    for (index_t b = 0; b < k / q8_block::size; ++b) {
        const float* xb = x + b * q8_block::size;
#if defined(__AVX512F__)
        // the same numbers as quantize_or_nan: an exact maximum, the same division, and conversion
        // under the default rounding (to nearest, ties to even)
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const __m512 a = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
        const float amax = _mm512_reduce_max_ps(a);
        const bool nan = _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q) != 0;
        if (nan || !(amax > 0.0f) || !std::isfinite(amax)) {
            out[b] = q8_block::quantize_or_nan(xb);
            continue;
        }
        const float scale = amax / 127.0f;
        const __m512 s = _mm512_set1_ps(scale);
        out[b].scale = scale;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_div_ps(v0, s))));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_div_ps(v1, s))));
#else
        out[b] = q8_block::quantize_or_nan(xb);
#endif
    }
}

// dot(w, x) over k weights, both in q8 blocks: per block the 32 products of the 8-bit integers
// summed exactly in 32-bit integers, then scaled by both blocks' scales and added in float (the
// integer sums are the same on every target; the float additions differ in order). Integer products
// take a quarter of the instructions of widening each weight to float, which keeps q8 decode at the
// memory's pace: VNNI's dpbusd (unsigned x signed bytes), or AVX2's maddubs + madd, on |w| and x
// carrying w's sign. With AVX-512 (BW and VNNI) two blocks share each 512-bit step: on a 2-core
// Zen 5 one core ran these products from its L2 at 46-54 GB/s of weights against 40-42 GB/s for
// one block per 256-bit step (k 192-4608, taking turns in one run), where memory gives each core
// 15-38 GB/s; from memory, the ><former's decode products in sequence timed alike (0.85-1.07 of the
// old time over 12 rounds, median 0.97), within this VM's noise.
inline float dot(const q8_block* w, const q8_block* x, index_t k) {
    const index_t blocks = k / q8_block::size;
    index_t b = 0;
    float sum = 0.0f;
    [[maybe_unused]] const std::size_t ahead = detail::prefetch_distance();
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // blocks i and i + 1 in the low and high halves: 16 integer lanes, 8 per block, each block's
    // lanes scaled by its two scales; a last odd block alone in the low half (the high half 0)
    const auto pair = [&](index_t i, __m512 acc, bool both) {
        const auto half = [](const std::int8_t* q) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)); };
        const auto halves = [&](const q8_block* v) {
            const __m512i low = _mm512_zextsi256_si512(half(v[i].q));
            return both ? _mm512_inserti64x4(low, half(v[i + 1].q), 1) : low;
        };
        const __m512i wq = halves(w), xq = halves(x);
        const __m512i sx = _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(wq), _mm512_setzero_si512(), xq);  // x with w's sign
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wq), sx);
        const __m512 low = _mm512_set1_ps(w[i].scale * x[i].scale);
        const __m512 scale = both ? _mm512_mask_mov_ps(low, 0xff00, _mm512_set1_ps(w[i + 1].scale * x[i + 1].scale)) : _mm512_maskz_mov_ps(0x00ff, low);
        return _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(p), acc);
    };
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    for (; b + 4 <= blocks; b += 4) {
        if (ahead) detail::prefetch_ahead(w + b, 4 * sizeof(q8_block), ahead);
        p0 = pair(b, p0, true), p1 = pair(b + 2, p1, true);
    }
    if (b + 2 <= blocks) p0 = pair(b, p0, true), b += 2;
    if (b < blocks) p1 = pair(b, p1, false), b += 1;
    sum = _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
#elif defined(__AVX2__) && defined(__FMA__)
    const auto block = [&](index_t i, __m256 acc) {
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].q));
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].q));
        const __m256i aw = _mm256_sign_epi8(wq, wq), sx = _mm256_sign_epi8(xq, wq);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
#else
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));  // |pair sums| <= 2 * 127^2: no saturation
#endif
        return _mm256_fmadd_ps(_mm256_set1_ps(w[i].scale * x[i].scale), _mm256_cvtepi32_ps(p), acc);
    };
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (; b + 4 <= blocks; b += 4) {
        if (ahead) detail::prefetch_ahead(w + b, 4 * sizeof(q8_block), ahead);
        a0 = block(b, a0), a1 = block(b + 1, a1), a2 = block(b + 2, a2), a3 = block(b + 3, a3);
    }
    for (; b < blocks; ++b) a0 = block(b, a0);
    sum = detail::vsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
    for (; b < blocks; ++b) {
        std::int32_t t = 0;
        for (index_t i = 0; i < q8_block::size; ++i) t += static_cast<std::int32_t>(w[b].q[i]) * x[b].q[i];
        sum += w[b].scale * x[b].scale * static_cast<float>(t);
    }
    return sum;
}

#if defined(__AVX512F__)
namespace detail {
// The first n < = 16 values at p as floats, the other lanes 0.
inline __m512 load_first(const float* p, index_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1), p);
}
inline __m512 load_first(const bf16* p, index_t n) {
    if (n >= 16) return vload(p);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    const __m256i h = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#else
    alignas(32) bf16 part[16] = {};
    std::copy(p, p + n, part);
    return vload(part);
#endif
}
}  // namespace detail
#endif

// out[i] = dot(rows + i * stride, x) over d values (float or bf16 rows), for i < 16: decode
// attention's scores of 16 cached keys. The 16 sums stay in registers, one per row, and are reduced
// together by a transposing tree (about 3 instructions per row, against ~10 for reducing each row
// alone).
template <class E>
inline void dot16(const E* rows, index_t stride, const float* x, index_t d, float* out) {
#if defined(__AVX512F__)
    __m512 v[16];
    for (auto& a : v) a = _mm512_setzero_ps();
    for (index_t c = 0; c < d; c += 16) {
        const __m512 xv = detail::load_first(x + c, d - c);
        for (int i = 0; i < 16; ++i) v[i] = _mm512_fmadd_ps(detail::load_first(rows + i * stride + c, d - c), xv, v[i]);
    }
    // b[i]: the 256-bit halves of v[2i] and v[2i+1] added (8 partial sums each, in 128-bit chunks:
    // v[2i] in chunks 0-1, v[2i+1] in chunks 2-3)
    __m512 b[8];
    for (int i = 0; i < 8; ++i)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    // c[i]: chunk j holds 4 partial sums of row 4i + j
    __m512 c[4];
    for (int i = 0; i < 4; ++i)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88), _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    // in each chunk j: lane p holds row 4p + j, summed
    const __m512 d0 = _mm512_add_ps(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
    const __m512 d1 = _mm512_add_ps(_mm512_unpacklo_ps(c[2], c[3]), _mm512_unpackhi_ps(c[2], c[3]));
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(d0, d1, 0x44), _mm512_shuffle_ps(d0, d1, 0xEE));
    // lane 4j + p holds row 4p + j: transpose the 4 x 4 lanes
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, r));
#else
    for (index_t i = 0; i < 16; ++i) out[i] = dot(rows + i * stride, x, d);
#endif
}

// y += sum over i < rows of a[i] * x[i * stride + c], for c < n (float or bf16 x): a block of
// weighted rows summed in registers, each chunk of y loaded and stored once per block (attention's
// values).
template <class E>
inline void weighted_row_sum(const float* a, const E* x, index_t stride, index_t rows, float* y, index_t n) {
#if defined(__AVX512F__)
    for (index_t c = 0; c < n; c += 16) {
        const index_t left = n - c;
        const auto m = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
        __m512 acc0 = _mm512_maskz_loadu_ps(m, y + c), acc1 = _mm512_setzero_ps();
        index_t i = 0;
        for (; i + 2 <= rows; i += 2) {
            acc0 = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), detail::load_first(x + i * stride + c, left), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_set1_ps(a[i + 1]), detail::load_first(x + (i + 1) * stride + c, left), acc1);
        }
        if (i < rows) acc0 = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), detail::load_first(x + i * stride + c, left), acc0);
        _mm512_mask_storeu_ps(y + c, m, _mm512_add_ps(acc0, acc1));
    }
#else
    for (index_t i = 0; i < rows; ++i)
        for (index_t k = 0; k < n; ++k) y[k] += a[i] * static_cast<float>(x[i * stride + k]);
#endif
}

// y = alpha * x . w^T + beta * y for a few rows of x (decode): each block of weight rows is read
// from memory once and from cache for the other rows of x. beta 0 never reads y. x is float, or
// for q8 weights may be q8 blocks too (quantize_row), or bf16 for bf16 weights, holding k weights
// per row either way.
//
// The rows are read as two streams, row j of the first half beside row j of the second: one
// stream per core left memory idle while the core worked on each line (q8 weights on 2 MiB pages,
// two threads: 21-23 GB/s from one stream each, 26-28 GB/s from two, where a plain float sum reads
// 29-30), since a core's prefetcher runs a bounded distance ahead of each stream it follows. bf16
// weights against bf16 activations (vdpbf16ps: one instruction per 64 bytes of weights) read one
// stream: on a 2-core Zen 4 whose streaming read reaches 60 GB/s, the ><former's decode products
// in sequence ran at 61-63% of it from one stream against 57-60% from two (at 35 GB/s, 80-85% both).
template <class W, class X>
inline void gemv_nt(matrix_view<const X, host_memory> x, index_t k, matrix_view<const W, host_memory> w,
                    matrix_view<float, host_memory> y, float alpha, float beta) {
    constexpr index_t block = 32;  // weight rows per block and stream: 2 x 32 rows of <= 4096 bf16 stay in a 1 MiB L2
    constexpr bool two_streams = !(std::is_same_v<W, bf16> && std::is_same_v<X, bf16>);
    const index_t n = w.rows();
    const index_t half = two_streams ? ((n + 1) / 2 + 15) / 16 * 16 : n;  // the second stream's first row (2 half >= n)
    const auto product = [&](const X* xr, float* yr, index_t j) {
        const float d = alpha * dot(w.row(j), xr, k);
        yr[j] = beta == 0.0f ? d : d + beta * yr[j];
    };
    for (index_t j0 = 0; j0 < std::min(n, half); j0 += block) {
        const index_t j1 = std::min({n, half, j0 + block});
        for (index_t r = 0; r < x.rows(); ++r) {
            const X* xr = x.row(r);
            float* yr = y.row(r);
            for (index_t j = j0; j < j1; ++j) {
                product(xr, yr, j);
                if (half + j < n) product(xr, yr, half + j);
            }
        }
    }
}

}  // namespace vwt::cpu::kernels
