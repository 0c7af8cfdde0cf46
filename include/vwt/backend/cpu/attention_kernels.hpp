// The CPU policy's prefill attention kernels (float compute, SIMD builds). One head at a time: its
// keys are laid out transposed ([d x n_ctx], so that a vector holds one coordinate of `lanes`
// consecutive keys) and its values padded to whole vectors ([n_ctx x d rounded up]), so that both
// products vectorise over keys or over padded columns whatever the head dim. The ><former's head
// dims (12 to 72 in dense_200m) are far too short for a GEMM's inner loop: a row-major dot product
// of 12 values fills one vector three quarters and then needs a horizontal sum.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "weight_kernels.hpp"

namespace vwt::cpu::kernels {

// Whether the kernels below run in SIMD (else they are plain loops the backend does not use).
inline constexpr bool simd_attention = detail::lanes > 0;

// Query rows processed together: each loaded key or value vector serves this many rows. With
// AVX-512's 32 vector registers, 8 rows x 2 vectors of keys keep 16 sums in flight (4 x 2 left the
// score product at about half the FMA rate, waiting on FMA latency); AVX2 has 16 registers.
inline constexpr index_t attention_block_rows = detail::lanes == 16 ? 8 : 4;

// n rounded up to whole vectors (1 without SIMD, where nothing here is used).
inline constexpr index_t round_up_to_lanes(index_t n) {
    constexpr index_t l = detail::lanes > 0 ? detail::lanes : 1;
    return (n + l - 1) / l * l;
}

// The layout of one head's prepared keys and values, and the scratch it needs.
struct attention_head_layout {
    index_t n_ctx = 0, d = 0;
    index_t key_stride() const { return round_up_to_lanes(n_ctx); }  // kt[c * key_stride() + j] = key j, coordinate c
    index_t value_stride() const { return round_up_to_lanes(d); }   // vp[j * value_stride() + c] = value j, coordinate c
    index_t key_elements() const { return d * key_stride(); }
    index_t value_elements() const { return n_ctx * value_stride(); }
    index_t score_elements() const { return attention_block_rows * key_stride(); }
    index_t output_elements() const { return attention_block_rows * value_stride(); }
    index_t scratch_elements() const { return key_elements() + value_elements() + score_elements() + output_elements(); }
};

// keys: n_ctx rows of d values (float or bf16) at `stride`; kt: transposed, padding keys zero.
template <class E>
inline void transpose_keys(const E* keys, index_t stride, attention_head_layout l, float* kt) {
    const index_t ldk = l.key_stride();
    for (index_t c = 0; c < l.d; ++c) std::fill(kt + c * ldk + l.n_ctx, kt + (c + 1) * ldk, 0.0f);
    // 16 keys at a time, so that each coordinate's row of kt gets a whole cache line per pass: one
    // key at a time wrote d lines key_stride() apart, which (a power of two in floats for prefill
    // lengths like 256) fall into a handful of L1 sets and evicted each other.
    constexpr index_t keys_per_pass = 16;
    for (index_t j0 = 0; j0 < l.n_ctx; j0 += keys_per_pass) {
        const index_t j1 = std::min(l.n_ctx, j0 + keys_per_pass);
        for (index_t c = 0; c < l.d; ++c)
            for (index_t j = j0; j < j1; ++j) kt[c * ldk + j] = static_cast<float>(keys[j * stride + c]);
    }
}
// values: n_ctx rows of d values; vp: the same rows padded with zeros to value_stride().
template <class E>
inline void pad_values(const E* values, index_t stride, attention_head_layout l, float* vp) {
    const index_t ldv = l.value_stride();
    for (index_t j = 0; j < l.n_ctx; ++j) {
        widen(values + j * stride, l.d, vp + j * ldv);
        std::fill(vp + j * ldv + l.d, vp + (j + 1) * ldv, 0.0f);
    }
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
namespace detail {
// What softmax_row needs beyond weight_kernels' vector ops: max, selection by a lane mask, and 2^n
// scaling.
#if defined(__AVX512F__)
inline vfloat vselect(vmask m, vfloat where_set, vfloat elsewhere) { return _mm512_mask_blend_ps(m, elsewhere, where_set); }
inline vfloat vmax(vfloat a, vfloat b) { return _mm512_max_ps(a, b); }
inline float vmax_of(vfloat a) { return _mm512_reduce_max_ps(a); }
inline vfloat vsub(vfloat a, vfloat b) { return _mm512_sub_ps(a, b); }
inline vfloat vround(vfloat x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vfloat vtimes_pow2(vfloat x, vfloat n) { return _mm512_scalef_ps(x, n); }
#else
inline vfloat vselect(vmask m, vfloat where_set, vfloat elsewhere) { return _mm256_blendv_ps(elsewhere, where_set, m); }
inline vfloat vmax(vfloat a, vfloat b) { return _mm256_max_ps(a, b); }
inline float vmax_of(vfloat a) {
    const __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 q = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_shuffle_ps(q, q, 1)));
}
inline vfloat vsub(vfloat a, vfloat b) { return _mm256_sub_ps(a, b); }
inline vfloat vround(vfloat x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// x * 2^n for integral n in [-126, 127], through the exponent bits
inline vfloat vtimes_pow2(vfloat x, vfloat n) {
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(x, _mm256_castsi256_ps(bits));
}
#endif
// e^x for x <= 0 (a softmax's shifted scores), within about 2 ulp: x = n ln2 + r with |r| <=
// ln2 / 2 (ln2 in two parts, the first exact in float), e^r = 1 + r + r^2 P(r) with P the
// classic degree-5 minimax fit, times 2^n. Below -87 (e^x < 2^-125) x counts as -87.
inline vfloat vexp_nonpositive(vfloat x) {
    x = vmax(x, vbroadcast(-87.0f));
    const vfloat n = vround(vmul(x, vbroadcast(1.44269504088896341f)));
    vfloat r = vfma(n, vbroadcast(-0.693359375f), x);
    r = vfma(n, vbroadcast(2.12194440e-4f), r);
    vfloat poly = vbroadcast(1.9875691500e-4f);
    poly = vfma(poly, r, vbroadcast(1.3981999507e-3f));
    poly = vfma(poly, r, vbroadcast(8.3334519073e-3f));
    poly = vfma(poly, r, vbroadcast(4.1665795894e-2f));
    poly = vfma(poly, r, vbroadcast(1.6666665459e-1f));
    poly = vfma(poly, r, vbroadcast(5.0000001201e-1f));
    return vtimes_pow2(vfma(poly, vmul(r, r), vadd(r, vbroadcast(1.0f))), n);
}
}  // namespace detail

// One row of a causal softmax, unnormalised: p[j] = e^(p[j] - max of p[0, seen)) for j < seen
// and 0 for seen <= j < keys; returns the sum of the exponentials. The row must hold
// round_up_to_lanes(keys) floats (attention_scores' rows do).
inline float softmax_row(float* p, index_t seen, index_t keys) {
    using namespace detail;
    const index_t full = seen / lanes * lanes, rest = seen - full;
    const vfloat lowest = vbroadcast(-std::numeric_limits<float>::infinity());
    vfloat top = lowest;
    for (index_t j = 0; j < full; j += lanes) top = vmax(top, vload(p + j));
    if (rest > 0) top = vmax(top, vselect(first_lanes(rest), vload(p + full), lowest));
    const vfloat shift = vbroadcast(vmax_of(top));
    vfloat sum = vzero();
    for (index_t j = 0; j < full; j += lanes) {
        const vfloat e = vexp_nonpositive(vsub(vload(p + j), shift));
        vstore(p + j, e);
        sum = vadd(sum, e);
    }
    index_t zero_from = full;
    if (rest > 0) {
        const vfloat e = vselect(first_lanes(rest), vexp_nonpositive(vsub(vload(p + full), shift)), vzero());
        vstore(p + full, e);
        sum = vadd(sum, e);
        zero_from = full + lanes;
    }
    if (zero_from < keys) std::fill(p + zero_from, p + keys, 0.0f);
    return vsum(sum);
}

namespace detail {
// scores[r][j0 .. j0 + C * lanes) = scale * q_r . key j, for R query rows.
template <int R, int C>
inline void score_chunks(const float* const* q, const float* kt, index_t ldk, index_t d, index_t j0, float scale, float* scores,
                         index_t lds) {
    vfloat acc[R][C];
    for (auto& row : acc)
        for (auto& a : row) a = vzero();
    for (index_t c = 0; c < d; ++c) {
        vfloat k[C];
        for (int i = 0; i < C; ++i) k[i] = vload(kt + c * ldk + j0 + i * lanes);
        for (int r = 0; r < R; ++r) {
            const vfloat qc = vbroadcast(q[r][c]);
            for (int i = 0; i < C; ++i) acc[r][i] = vfma(qc, k[i], acc[r][i]);
        }
    }
    const vfloat s = vbroadcast(scale);
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < C; ++i) vstore(scores + r * lds + j0 + i * lanes, vmul(acc[r][i], s));
}

// out_r[c0 .. c0 + C * lanes) = sum over j < keys of p_r[j] * value j, for R rows.
template <int R, int C>
inline void value_chunks(const float* p, index_t lds, const float* vp, index_t ldv, index_t keys, index_t c0, float* out,
                         index_t ldo) {
    vfloat acc[R][C];
    for (auto& row : acc)
        for (auto& a : row) a = vzero();
    for (index_t j = 0; j < keys; ++j) {
        vfloat v[C];
        for (int i = 0; i < C; ++i) v[i] = vload(vp + j * ldv + c0 + i * lanes);
        for (int r = 0; r < R; ++r) {
            const vfloat w = vbroadcast(p[r * lds + j]);
            for (int i = 0; i < C; ++i) acc[r][i] = vfma(w, v[i], acc[r][i]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < C; ++i) vstore(out + r * ldo + c0 + i * lanes, acc[r][i]);
}

template <int R>
inline void scores_of_rows(const float* const* q, const float* kt, index_t ldk, index_t d, index_t keys, float scale, float* scores,
                           index_t lds) {
    index_t j0 = 0;
    for (; j0 + 2 * lanes <= keys; j0 += 2 * lanes) score_chunks<R, 2>(q, kt, ldk, d, j0, scale, scores, lds);
    for (; j0 < keys; j0 += lanes) score_chunks<R, 1>(q, kt, ldk, d, j0, scale, scores, lds);
}
template <int R>
inline void values_of_rows(const float* p, index_t lds, const float* vp, index_t ldv, index_t keys, float* out, index_t ldo) {
    constexpr int widest = R <= 4 ? 4 : 2;  // R x widest sums, at most 16 registers
    index_t c0 = 0;
    for (; c0 + widest * lanes <= ldv; c0 += widest * lanes) value_chunks<R, widest>(p, lds, vp, ldv, keys, c0, out, ldo);
    switch ((ldv - c0) / lanes) {
        case 3:
            if constexpr (widest > 3) value_chunks<R, 3>(p, lds, vp, ldv, keys, c0, out, ldo);
            break;
        case 2:
            if constexpr (widest > 2) value_chunks<R, 2>(p, lds, vp, ldv, keys, c0, out, ldo);
            break;
        case 1: value_chunks<R, 1>(p, lds, vp, ldv, keys, c0, out, ldo); break;
        default: break;
    }
}
// f.template operator()<R>() for R = rows, 1 <= rows <= attention_block_rows.
template <class F>
inline void with_rows(index_t rows, F&& f) {
    switch (rows) {
        case 8: if constexpr (attention_block_rows >= 8) f.template operator()<8>(); break;
        case 7: if constexpr (attention_block_rows >= 7) f.template operator()<7>(); break;
        case 6: if constexpr (attention_block_rows >= 6) f.template operator()<6>(); break;
        case 5: if constexpr (attention_block_rows >= 5) f.template operator()<5>(); break;
        case 4: f.template operator()<4>(); break;
        case 3: f.template operator()<3>(); break;
        case 2: f.template operator()<2>(); break;
        default: f.template operator()<1>(); break;
    }
}
}  // namespace detail

// scores[r][j] = scale * q_r . key j for the rows < rows (<= attention_block_rows) and the keys
// j < keys rounded up to whole vectors (the padding keys score 0). q_r = q + r * q_stride.
inline void attention_scores(const float* q, index_t q_stride, index_t rows, const float* kt, attention_head_layout l, index_t keys,
                             float scale, float* scores) {
    const float* q_rows[attention_block_rows];
    for (index_t r = 0; r < attention_block_rows; ++r) q_rows[r] = q + std::min(r, rows - 1) * q_stride;
    const index_t ldk = l.key_stride(), lds = ldk, padded = round_up_to_lanes(keys);
    detail::with_rows(rows, [&]<int R>() { detail::scores_of_rows<R>(q_rows, kt, ldk, l.d, padded, scale, scores, lds); });
}
// out[r][c] = sum over j < keys of p[r][j] * value j (c < value_stride(), the padding columns 0),
// for the rows < rows; p: attention_scores' layout. out rows are out_stride apart and must hold
// value_stride() floats.
inline void attention_values(const float* p, index_t rows, const float* vp, attention_head_layout l, index_t keys, float* out,
                             index_t out_stride) {
    const index_t lds = l.key_stride(), ldv = l.value_stride();
    detail::with_rows(rows, [&]<int R>() { detail::values_of_rows<R>(p, lds, vp, ldv, keys, out, out_stride); });
}
#else
// The same contracts in plain loops (the backend uses Eigen's attention on such targets).
inline float softmax_row(float* p, index_t seen, index_t keys) {
    const float top = *std::max_element(p, p + seen);
    float sum = 0;
    for (index_t j = 0; j < seen; ++j) sum += p[j] = std::exp(p[j] - top);
    std::fill(p + seen, p + keys, 0.0f);
    return sum;
}
inline void attention_scores(const float* q, index_t q_stride, index_t rows, const float* kt, attention_head_layout l, index_t keys,
                             float scale, float* scores) {
    for (index_t r = 0; r < rows; ++r)
        for (index_t j = 0; j < keys; ++j) {
            float sum = 0;
            for (index_t c = 0; c < l.d; ++c) sum += q[r * q_stride + c] * kt[c * l.key_stride() + j];
            scores[r * l.key_stride() + j] = scale * sum;
        }
}
inline void attention_values(const float* p, index_t rows, const float* vp, attention_head_layout l, index_t keys, float* out,
                             index_t out_stride) {
    for (index_t r = 0; r < rows; ++r)
        for (index_t c = 0; c < l.value_stride(); ++c) {
            float sum = 0;
            for (index_t j = 0; j < keys; ++j) sum += p[r * l.key_stride() + j] * vp[j * l.value_stride() + c];
            out[r * out_stride + c] = sum;
        }
}
#endif

}  // namespace vwt::cpu::kernels
