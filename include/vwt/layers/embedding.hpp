// The token embedding: rows of the residual stream = m_emb * wte[token] in columns [0, h), zero
// above; its backward adds the stream's gradient into the rows of the table the tokens used.
#pragma once

#include "../params/layout.hpp"
#include "../tensor/residual.hpp"

namespace vwt {

template <class E, memory_space M>
struct embedding_tensors {
    matrix_view<E, M> table;  // wte [V x h]
    static embedding_tensors bind(const tensor_binder<E, M>& b) { return {b.matrix("transformer.wte.weight")}; }
};

template <class B>
struct embedding {
    using T = typename B::compute_type;
    using M = typename B::memory;
    template <class E>
    using tensors = embedding_tensors<E, M>;

    tensors<const typename B::weight_type> weights;
    T scale = T(1);  // m_emb

    void forward(const typename B::context& ctx, vector_view<const int, M> ids, residual_view<T, M> x) const {
        B::embed(ctx, weights.table, ids, x.all(), scale);
    }
    void backward(const typename B::context& ctx, residual_view<T, M> dx, vector_view<const int, M> ids,
                  tensors<T> grads) const {
        B::embed_backward(ctx, dx.all().first_cols(weights.table.cols()), ids, grads.table, scale);
    }
};

}  // namespace vwt
