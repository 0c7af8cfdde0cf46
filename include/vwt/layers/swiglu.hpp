// The dense MLP of the paper: SwiGLU over a layer's width (c_fc w -> 2 x 4w, out = u * silu(g),
// c_proj 4w -> w), added to the residual stream; forward and backward side by side. A block takes
// its MLP as a template parameter, so another MLP (MoE) is another file with this interface.
#pragma once

#include "../params/layout.hpp"
#include "scratch.hpp"
#include "width.hpp"

namespace vwt {

template <class E, memory_space M>
struct swiglu_tensors {
    matrix_view<E, M> c_fc;    // [8w x w]: rows [0, 4w) u, [4w, 8w) g (split) or alternating (interleaved)
    matrix_view<E, M> c_proj;  // [w x 4w]
    static swiglu_tensors bind(const tensor_binder<E, M>& b, int layer) {
        const auto p = layer_prefix(layer);
        return {b.matrix(p + "mlp_block.c_fc.weight"), b.matrix(p + "mlp_block.c_proj.weight")};
    }
};

// Whether policy B has the optional swiglu_matmul_nt (SwiGLU, then c_proj's product) and
// swiglu_mlp (the whole MLP: c_fc's product, SwiGLU, c_proj's product).
template <class B>
concept fuses_swiglu_matmul = requires(const typename B::context& ctx, matrix_view<const typename B::compute_type, typename B::memory> x,
                                       matrix_view<typename B::compute_type, typename B::memory> m,
                                       matrix_view<const typename B::weight_type, typename B::memory> w, swiglu_layout layout) {
    B::swiglu_matmul_nt(ctx, x, m, index_t{}, layout, w, m, typename B::compute_type(1), typename B::compute_type(1));
};
template <class B>
concept runs_swiglu_mlp = requires(const typename B::context& ctx, matrix_view<const typename B::compute_type, typename B::memory> x,
                                   matrix_view<typename B::compute_type, typename B::memory> m,
                                   matrix_view<const typename B::weight_type, typename B::memory> w, swiglu_layout layout) {
    B::swiglu_mlp(ctx, x, w, m, m, index_t{}, layout, w, m, typename B::compute_type(1), typename B::compute_type(1));
};

template <class B, layer_width Width>
struct swiglu_mlp {
    using T = typename B::compute_type;
    using M = typename B::memory;
    template <class E>
    using tensors = swiglu_tensors<E, M>;
    template <class U, index_t C = dynamic_extent>
    using mat = matrix_view<U, M, C>;

    // What backward needs: the fused c_fc output (the SwiGLU output is recomputed).
    struct saved {
        mat<T> fused;
        static index_t elements(index_t rows, const Width& w) { return rows * 8 * w.value(); }
        static saved carve(vector_view<T, M> memory, index_t rows, const Width& w) {
            return {memory.subview(0, rows * 8 * w.value()).as_matrix(rows, 8 * w.value())};
        }
    };

    tensors<const typename B::weight_type> weights;
    Width width;
    swiglu_layout layout = swiglu_layout::split;
    T residual = T(1);  // m_residual

    index_t inter() const { return 4 * static_cast<index_t>(width.value()); }

    // layer += residual * swiglu(normed c_fc^T) c_proj^T
    template <index_t C>
    void forward(const typename B::context& ctx, mat<const T, C> normed, mat<T, C> layer, const layer_scratch<B>& s,
                 const saved* keep) const {
        const index_t rows = normed.rows();
        const auto fused = keep ? keep->fused : s.fused.as_matrix(rows, 2 * inter());
        const auto act = s.act.as_matrix(rows, inter());
        if constexpr (runs_swiglu_mlp<B>)
            if (!keep)  // the policy's whole MLP (it leaves no c_fc output to keep)
                return B::swiglu_mlp(ctx, normed, weights.c_fc, fused, act, inter(), layout, weights.c_proj, layer, residual, T(1));
        B::matmul_nt(ctx, normed, weights.c_fc, fused);
        if constexpr (fuses_swiglu_matmul<B>) {
            B::swiglu_matmul_nt(ctx, fused.as_const(), act, inter(), layout, weights.c_proj, layer, residual, T(1));
        } else {
            B::swiglu(ctx, fused, act, inter(), layout);
            B::matmul_nt(ctx, act, weights.c_proj, layer, residual, T(1));
        }
    }

    template <index_t C>
    void backward(const typename B::context& ctx, mat<const T, C> normed, mat<const T, C> d_layer, const saved& kept,
                  const layer_scratch<B>& s, mat<T, C> d_normed, tensors<T> grads) const {
        const index_t rows = normed.rows();
        const auto act = s.act.as_matrix(rows, inter()), d_act = s.d_act.as_matrix(rows, inter());
        const auto d_fused = s.d_fused.as_matrix(rows, 2 * inter());
        B::swiglu(ctx, kept.fused, act, inter(), layout);
        B::matmul_tn(ctx, d_layer, act, grads.c_proj, residual, T(1));
        B::matmul_nn(ctx, d_layer, weights.c_proj, d_act, residual);
        B::swiglu_backward(ctx, kept.fused, d_act, d_fused, inter(), layout);
        B::matmul_tn(ctx, d_fused, normed, grads.c_fc, T(1), T(1));
        B::matmul_nn(ctx, d_fused, weights.c_fc, d_normed);
    }
};

}  // namespace vwt
