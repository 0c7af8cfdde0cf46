// RMSNorm over a layer's columns: y = x / sqrt(mean(x^2) + eps) * g, with its backward. The column
// extent of the views (a layer's width, static or dynamic) reaches the op.
#pragma once

#include "../tensor/view.hpp"

namespace vwt {

template <class B>
struct rmsnorm {
    using T = typename B::compute_type;
    using M = typename B::memory;

    vector_view<const typename B::weight_type, M> gain;
    T eps = T(1e-5);

    template <index_t C>
    void forward(const typename B::context& ctx, matrix_view<const T, M, C> x, matrix_view<T, M, C> y) const {
        B::rmsnorm(ctx, x, gain, y, eps);
    }
    // dx += the input gradient; dgain += the gain gradient.
    template <index_t C>
    void backward(const typename B::context& ctx, matrix_view<const T, M, C> x, matrix_view<const T, M, C> dy,
                  matrix_view<T, M, C> dx, vector_view<T, M> dgain, vector_view<T, M> scratch) const {
        B::rmsnorm_backward(ctx, x, gain, dy, dx, dgain, eps, scratch);
    }
};

}  // namespace vwt
