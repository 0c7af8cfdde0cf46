// The CPU policy's prefill attention kernels (float compute, SIMD builds). One head at a time: its
// keys are laid out transposed ([d x n_ctx], so that a vector holds one coordinate of `lanes`
// consecutive keys) and its values padded to whole vectors ([n_ctx x d rounded up]), so that both
// products vectorise over keys or over padded columns whatever the head dim. The ><former's head
// dims (12 to 72 in dense_200m) are far too short for a GEMM's inner loop: a row-major dot product
// of 12 values fills one vector three quarters and then needs a horizontal sum.
#pragma once

#include <algorithm>

#include "weight_kernels.hpp"

namespace vwt::cpu::kernels {

// Whether the kernels below run in SIMD (else they are plain loops the backend does not use).
inline constexpr bool simd_attention = detail::lanes > 0;

// Query rows processed together: each loaded key or value vector serves this many rows.
inline constexpr index_t attention_block_rows = 4;

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
    index_t c0 = 0;
    for (; c0 + 4 * lanes <= ldv; c0 += 4 * lanes) value_chunks<R, 4>(p, lds, vp, ldv, keys, c0, out, ldo);
    switch ((ldv - c0) / lanes) {
        case 3: value_chunks<R, 3>(p, lds, vp, ldv, keys, c0, out, ldo); break;
        case 2: value_chunks<R, 2>(p, lds, vp, ldv, keys, c0, out, ldo); break;
        case 1: value_chunks<R, 1>(p, lds, vp, ldv, keys, c0, out, ldo); break;
        default: break;
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
    switch (rows) {
        case 4: detail::scores_of_rows<4>(q_rows, kt, ldk, l.d, padded, scale, scores, lds); break;
        case 3: detail::scores_of_rows<3>(q_rows, kt, ldk, l.d, padded, scale, scores, lds); break;
        case 2: detail::scores_of_rows<2>(q_rows, kt, ldk, l.d, padded, scale, scores, lds); break;
        default: detail::scores_of_rows<1>(q_rows, kt, ldk, l.d, padded, scale, scores, lds); break;
    }
}
// out[r][c] = sum over j < keys of p[r][j] * value j (c < value_stride(), the padding columns 0),
// for the rows < rows; p: attention_scores' layout. out rows are out_stride apart and must hold
// value_stride() floats.
inline void attention_values(const float* p, index_t rows, const float* vp, attention_head_layout l, index_t keys, float* out,
                             index_t out_stride) {
    const index_t lds = l.key_stride(), ldv = l.value_stride();
    switch (rows) {
        case 4: detail::values_of_rows<4>(p, lds, vp, ldv, keys, out, out_stride); break;
        case 3: detail::values_of_rows<3>(p, lds, vp, ldv, keys, out, out_stride); break;
        case 2: detail::values_of_rows<2>(p, lds, vp, ldv, keys, out, out_stride); break;
        default: detail::values_of_rows<1>(p, lds, vp, ldv, keys, out, out_stride); break;
    }
}
#else
// The same contracts in plain loops (the backend uses Eigen's attention on such targets).
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
