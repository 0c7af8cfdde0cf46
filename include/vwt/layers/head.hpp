// The head: the final RMSNorm over the last layer's width w_L, the resize to the unembedding width
// u (h by default; columns [w_L, u) straight from the residual stream: move_up for every model),
// lm_head / m_width, and the softmax cross-entropy of training and validation; forward and
// backward side by side. In a fixed-width stream the final norm is over h columns.
#pragma once

#include <algorithm>

#include "../params/layout.hpp"
#include "resize.hpp"
#include "rmsnorm.hpp"

namespace vwt {

template <class E, memory_space M>
struct head_tensors {
    vector_view<E, M> norm;    // ln_f [w_L]
    matrix_view<E, M> lm_head; // [V x u]
    matrix_view<E, M> resize;  // resize_method::linear with w_L < u: the learned [u x w_L]; else empty
    static head_tensors bind(const tensor_binder<E, M>& b) {
        const auto name = linear_resize_name(-1);
        return {b.vector("transformer.ln_f.weight"), b.matrix("lm_head.weight"),
                b.layout().find(name) ? b.matrix(name) : matrix_view<E, M>{}};
    }
};

template <class B>
struct head {
    using T = typename B::compute_type;
    using M = typename B::memory;
    template <class E>
    using tensors = head_tensors<E, M>;
    template <class U>
    using mat = matrix_view<U, M>;

    tensors<const typename B::weight_type> weights;
    rmsnorm<B> norm;
    index_t last_width = 0;   // the final norm's width: w_L (h in a fixed-width stream)
    index_t hidden = 0;       // u, the unembedding width
    residual_resize::column_range from_stream{};  // [w_L, u) when w_L < u (move_up and zero models)
    // interpolate and linear models with w_L < u: [u x w_L], the normed rows' projection to u
    matrix_view<const typename B::weight_type, M> projection{};
    residual_resize::projection padding{};  // gaussian models with w_L < u: the normed rows padded to u
    T inv_width = T(1);       // 1 / m_width

    // What a gaussian padding draws with: each row's counter and the key (detail/gaussian_noise.hpp).
    struct noise {
        vector_view<const int, M> counters{};
        std::uint64_t key = 0;
    };

    // Columns of the head's input rows: max(w_L, u), or w_L + u (the normed rows, then their
    // projection) with a projection.
    index_t input_cols() const { return head_input_cols(last_width, hidden, !projection.empty()); }
    // The columns of the head's input that lm_head reads.
    template <class U>
    mat<U> unembedding_input(mat<U> head_in) const {
        return projection.empty() ? head_in.first_cols(hidden) : head_in.cols_range(last_width, last_width + hidden);
    }

    // x: [n x W] rows of the residual stream; head_in: [n x input_cols()] (kept for backward);
    // logits: [n x V].
    void forward(const typename B::context& ctx, mat<const T> x, mat<T> head_in, mat<T> logits, const noise& draw = {}) const {
        norm.forward(ctx, x.first_cols(last_width), head_in.first_cols(last_width));
        if (!padding.empty()) B::gaussian_pad(ctx, head_in.first_cols(hidden), padding.from, padding.to, draw.counters, draw.key);
        if (!from_stream.empty())
            B::copy(ctx, x.cols_range(from_stream.begin, from_stream.end), head_in.cols_range(from_stream.begin, from_stream.end));
        if (!projection.empty()) B::matmul_nt(ctx, head_in.first_cols(last_width).as_const(), projection, unembedding_input(head_in));
        B::matmul_nt(ctx, unembedding_input(head_in).as_const(), weights.lm_head, logits, inv_width);
    }

    // The next-token cross-entropy of each row: row_losses[r] = -log softmax(logits[r])[targets[r]]
    // (in double), and logits replaced by grad_scale times their gradient (softmax - onehot).
    void loss(const typename B::context& ctx, mat<T> logits, vector_view<const int, M> targets, T grad_scale,
              vector_view<double, M> row_losses) const {
        B::cross_entropy(ctx, logits, targets, grad_scale, row_losses);
    }

    // From d_logits (the gradient of the loss by the logits): lm_head and ln_f gradients into
    // `grads`, the stream's gradient into dx (overwritten: the head is the first thing backward
    // reaches). d_head_in: scratch of head_in's shape.
    void backward(const typename B::context& ctx, mat<const T> x, mat<const T> head_in, mat<const T> d_logits,
                  mat<T> d_head_in, mat<T> dx, vector_view<T, M> norm_scratch, tensors<T> grads, const noise& draw = {}) const {
        B::matmul_tn(ctx, d_logits, unembedding_input(head_in), grads.lm_head, inv_width, T(1));
        B::matmul_nn(ctx, d_logits, weights.lm_head, unembedding_input(d_head_in), inv_width);
        if (!projection.empty()) {
            const auto d_projected = unembedding_input(d_head_in).as_const();
            if (!grads.resize.empty()) B::matmul_tn(ctx, d_projected, head_in.first_cols(last_width), grads.resize, T(1), T(1));
            B::matmul_nn(ctx, d_projected, projection, d_head_in.first_cols(last_width));
        } else if (!padding.empty()) {
            B::gaussian_pad_backward(ctx, head_in.first_cols(last_width), d_head_in.first_cols(hidden), padding.from, padding.to, draw.counters,
                                     draw.key);
        } else if (last_width > hidden) {
            B::fill(ctx, d_head_in.cols_range(hidden, last_width), T(0));
        }
        B::fill(ctx, dx, T(0));
        if (!from_stream.empty())
            B::copy(ctx, d_head_in.cols_range(from_stream.begin, from_stream.end), dx.cols_range(from_stream.begin, from_stream.end));
        norm.backward(ctx, x.first_cols(last_width), d_head_in.as_const().first_cols(last_width), dx.first_cols(last_width), grads.norm,
                      norm_scratch);
    }
};

}  // namespace vwt
