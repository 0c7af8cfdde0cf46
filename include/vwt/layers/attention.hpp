// The sequence mixer: causal grouped-query attention with RoPE over one layer's width, reading and
// writing each sequence's keys and values where the caller keeps them (a KV cache in inference,
// the saved activations in training); forward and backward side by side.
#pragma once

#include <span>
#include <variant>

#include "../params/layout.hpp"
#include "rope.hpp"
#include "scratch.hpp"
#include "width.hpp"

namespace vwt {

template <class E, memory_space M>
struct attention_tensors {
    matrix_view<E, M> c_attn;  // [(H + 2 Hkv) d x w], rows grouped per kv head: [G d query | d key | d value]
    matrix_view<E, M> c_proj;  // [w x H d]
    static attention_tensors bind(const tensor_binder<E, M>& b, int layer) {
        const auto p = layer_prefix(layer);
        return {b.matrix(p + "sequence_mixer.c_attn.weight"), b.matrix(p + "sequence_mixer.c_proj.weight")};
    }
};

// One sequence of a batch: rows [begin, begin + rows) of the residual buffer, at positions past ..
// past + rows - 1 (the first `past` keys and values are already stored).
struct sequence_rows {
    index_t begin = 0, rows = 0, past = 0;
};

// A sequence's keys and values in one layer: its whole history, at least past + rows rows.
template <class T, memory_space M>
struct kv_rows {
    matrix_view<T, M> keys, values;
};

// f(kv) on a layer's kv_rows, given as kv_rows (training's saved keys and values) or as a variant
// of them (a KV cache of a run-time dtype).
template <class T, memory_space M, class F>
void visit_kv(const kv_rows<T, M>& kv, F&& f) {
    f(kv);
}
template <class... Rows, class F>
void visit_kv(const std::variant<Rows...>& kv, F&& f) {
    std::visit(f, kv);
}

// Whether policy B has the optional split_qkv_rope (split_qkv with RoPE applied on the way).
template <class B, index_t D>
concept splits_with_rope = requires(const typename B::context& ctx, matrix_view<const typename B::compute_type, typename B::memory> qkv,
                                    matrix_view<typename B::compute_type, typename B::memory> m, attention_shape<D> shape,
                                    vector_view<const int, typename B::memory> positions) {
    B::split_qkv_rope(ctx, qkv, m, m, m, shape, positions, 1.0);
};

template <class B, layer_width Width>
struct attention {
    using T = typename B::compute_type;
    using M = typename B::memory;
    template <class E>
    using tensors = attention_tensors<E, M>;
    template <class U, index_t C = dynamic_extent>
    using mat = matrix_view<U, M, C>;

    // What backward needs: q and k after RoPE, v, and the attention output, one row per token.
    struct saved {
        mat<T> q, k, v, o;
        static index_t elements(index_t rows, const Width& w, int kv_heads) {
            return rows * w.value() * 2 + 2 * rows * kv_heads * w.head_dim();
        }
        static saved carve(vector_view<T, M> memory, index_t rows, const Width& w, int kv_heads) {
            const index_t hd = w.value(), kvd = static_cast<index_t>(kv_heads) * w.head_dim();
            return {memory.subview(0, rows * hd).as_matrix(rows, hd), memory.subview(rows * hd, rows * kvd).as_matrix(rows, kvd),
                    memory.subview(rows * (hd + kvd), rows * kvd).as_matrix(rows, kvd),
                    memory.subview(rows * (hd + 2 * kvd), rows * hd).as_matrix(rows, hd)};
        }
    };

    tensors<const typename B::weight_type> weights;
    Width width;
    int kv_heads = 0;
    T scale = T(0);     // the score multiplier (1/d for muP, 1/sqrt(d) standard, or the checkpoint's)
    T residual = T(1);  // m_residual
    rope<B> rotary{};

    attention_shape<Width::head_extent> shape() const { return {width.heads(), kv_heads, head_extent(width)}; }
    index_t qkv_cols() const { return static_cast<index_t>(width.heads() + 2 * kv_heads) * width.head_dim(); }

    // layer += residual * attention(normed) c_proj^T. kv_of(i) gives sequence i's kv_rows; `keep`
    // (training) receives q, k, v, o, else they live in the scratch and the cache.
    template <index_t C, class KvOf>
    void forward(const typename B::context& ctx, mat<const T, C> normed, mat<T, C> layer, std::span<const sequence_rows> seqs,
                 vector_view<const int, M> positions, KvOf&& kv_of, const layer_scratch<B>& s, const saved* keep) const {
        const index_t rows = normed.rows(), hd = width.value();
        const auto qkv = s.qkv.as_matrix(rows, qkv_cols());
        const auto q = keep ? keep->q : s.q.as_matrix(rows, hd);
        const auto o = keep ? keep->o : s.attn.as_matrix(rows, hd);
        constexpr bool rope_in_split = splits_with_rope<B, Width::head_extent>;
        B::matmul_nt(ctx, normed, weights.c_attn, qkv);
        if constexpr (!rope_in_split) rotary.forward(ctx, qkv, width, kv_heads, positions);
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            const auto& seq = seqs[i];
            const index_t end = seq.begin + seq.rows, n_ctx = seq.past + seq.rows;
            visit_kv(kv_of(i), [&]<class E>(const kv_rows<E, M>& kv) {
                if constexpr (rope_in_split)
                    B::split_qkv_rope(ctx, qkv.rows_range(seq.begin, end).as_const(), q.rows_range(seq.begin, end),
                                      kv.keys.rows_range(seq.past, n_ctx), kv.values.rows_range(seq.past, n_ctx), shape(),
                                      positions.subview(seq.begin, seq.rows), rotary.theta);
                else
                    B::split_qkv(ctx, qkv.rows_range(seq.begin, end), q.rows_range(seq.begin, end), kv.keys.rows_range(seq.past, n_ctx),
                                 kv.values.rows_range(seq.past, n_ctx), shape());
                B::attention(ctx, q.rows_range(seq.begin, end), kv.keys.rows_range(0, n_ctx).as_const(),
                             kv.values.rows_range(0, n_ctx).as_const(), o.rows_range(seq.begin, end), shape(), scale, s.attention);
            });
        }
        B::matmul_nt(ctx, o, weights.c_proj, layer, residual, T(1));
    }

    // From the gradient of the layer's output columns: adds the weight gradients into `grads` and
    // writes the gradient of the normed input into d_normed. Sequences have no past (training).
    template <index_t C>
    void backward(const typename B::context& ctx, mat<const T, C> normed, mat<const T, C> d_layer, const saved& kept,
                  std::span<const sequence_rows> seqs, vector_view<const int, M> positions, const layer_scratch<B>& s,
                  mat<T, C> d_normed, tensors<T> grads) const {
        const index_t rows = normed.rows(), hd = width.value(), kvd = static_cast<index_t>(kv_heads) * width.head_dim();
        const auto d_o = s.d_attn.as_matrix(rows, hd), dq = s.dq.as_matrix(rows, hd);
        const auto dk = s.dk.as_matrix(rows, kvd), dv = s.dv.as_matrix(rows, kvd);
        const auto d_qkv = s.qkv.as_matrix(rows, qkv_cols());
        B::matmul_tn(ctx, d_layer, kept.o, grads.c_proj, residual, T(1));
        B::matmul_nn(ctx, d_layer, weights.c_proj, d_o, residual);
        for (const auto& seq : seqs) {
            const index_t b = seq.begin, e = seq.begin + seq.rows;
            B::attention_backward(ctx, kept.q.rows_range(b, e), kept.k.rows_range(b, e), kept.v.rows_range(b, e),
                                  d_o.rows_range(b, e), dq.rows_range(b, e), dk.rows_range(b, e), dv.rows_range(b, e), shape(),
                                  scale, s.attention_backward);
        }
        B::join_qkv(ctx, dq, dk, dv, d_qkv, shape());
        rotary.backward(ctx, d_qkv, width, kv_heads, positions);
        B::matmul_tn(ctx, d_qkv, normed, grads.c_attn, T(1), T(1));
        B::matmul_nn(ctx, d_qkv, weights.c_attn, d_normed);
    }
};

}  // namespace vwt
