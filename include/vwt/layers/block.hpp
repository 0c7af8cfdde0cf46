// One transformer block as a template over its width and its MLP: pre-norm attention and a
// pre-norm MLP, each added to the layer's columns of the residual stream. The same block serves
// inference (KV cache, nothing kept) and training (it keeps what backward needs in `saved`).
#pragma once

// Layers call only ops of the backend policy B and never touch its memory, so any policy (the
// CPU's, the reference's, a device's) runs this code unchanged.

#include <span>

#include "../model/config.hpp"
#include "attention.hpp"
#include "moe_shape.hpp"
#include "rmsnorm.hpp"
#include "swiglu.hpp"

namespace vwt {

// All tensors of one block, over any element type E (weights, gradients, moments share it).
template <class E, memory_space M, class MlpTensors>
struct block_tensors {
    vector_view<E, M> ln_1;
    attention_tensors<E, M> attn;
    vector_view<E, M> ln_2;
    MlpTensors mlp;
};

struct block_hyper {
    int layer = 0;
    int kv_heads = 0;
    int stream_width = 0;  // the stream columns the block reads and writes: its width, or h (fixed-width stream)
    double attention_scale = 0, m_residual = 1, norm_eps = 1e-5, rope_theta = 10000;
    swiglu_layout mlp = swiglu_layout::split;
    moe_shape moe{};           // MoE layers: the experts; experts == 0 in a dense model
    double router_aux_coef = 0;  // MoE layers: the auxiliary loss's weight in training
};

inline block_hyper hyper_of(const model_config& c, int layer) {
    block_hyper h{layer, c.schedule.dims.kv_heads, stream_width(c.schedule, layer), c.attention_scale(layer), c.m_residual, c.norm_eps,
                  c.rope_theta, c.mlp};
    if (c.schedule.dims.moe.enabled()) h.moe = moe_shape_of(c.schedule, layer), h.router_aux_coef = c.router_aux_loss_coef;
    return h;
}

template <class B, layer_width Width, template <class, class> class Mlp = swiglu_mlp>
class block {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;
    using mlp_type = Mlp<B, Width>;
    using attention_type = attention<B, Width>;
    template <class E>
    using tensors = block_tensors<E, M, typename mlp_type::template tensors<E>>;
    template <class U, index_t C = dynamic_extent>
    using mat = matrix_view<U, M, C>;
    static constexpr index_t C = Width::cols_extent;

    // What backward needs from forward: the layer's input and middle residual columns, and what
    // the attention and the MLP keep.
    struct saved {
        mat<T, C> x_in, x_mid;
        typename attention_type::saved attn;
        typename mlp_type::saved mlp;
    };

    template <class E>
    static tensors<E> bind(const tensor_binder<E, M>& b, int layer) {
        const auto p = layer_prefix(layer);
        return {b.vector(p + "ln_1.weight"), attention_tensors<E, M>::bind(b, layer), b.vector(p + "ln_2.weight"),
                mlp_type::template tensors<E>::bind(b, layer)};
    }

    block(Width width, const block_hyper& hp, tensors<const typename B::weight_type> w)
        : width_(width),
          layer_(hp.layer),
          stream_(checked_stream(width, hp)),
          ln_1_{w.ln_1, T(hp.norm_eps)},
          ln_2_{w.ln_2, T(hp.norm_eps)},
          attn_{w.attn, width, hp.kv_heads, T(hp.attention_scale), T(hp.m_residual), rope<B>{hp.rope_theta}},
          mlp_(make_mlp(w.mlp, width, hp)) {}

    int width() const { return width_.value(); }
    // The stream columns it reads and writes: [0, width()), or [0, h) in a fixed-width stream.
    int stream_width() const { return stream_; }
    int layer() const { return layer_; }

    // The block's columns of the residual stream.
    mat<T, C> columns(residual_view<T, M> x) const {
        if constexpr (C == dynamic_extent) return x.all().first_cols(stream_);
        else return x.layer(width_);
    }

    // Elements of `saved` for `rows` tokens, and its views carved from `memory`.
    index_t saved_elements(index_t rows) const {
        return 2 * rows * stream_width() + attention_type::saved::elements(rows, width_, attn_.kv_heads) +
               mlp_type::saved::elements(rows, width_);
    }
    saved carve_saved(vector_view<T, M> memory, index_t rows) const {
        const index_t w = stream_width(), a = attention_type::saved::elements(rows, width_, attn_.kv_heads);
        return {memory.subview(0, rows * w).template as_matrix_of<C>(rows, w),
                memory.subview(rows * w, rows * w).template as_matrix_of<C>(rows, w),
                attention_type::saved::carve(memory.subview(2 * rows * w, a), rows, width_, attn_.kv_heads),
                mlp_type::saved::carve(memory.subview(2 * rows * w + a, mlp_type::saved::elements(rows, width_)), rows, width_)};
    }

    template <class KvOf>
    void forward(const typename B::context& ctx, residual_view<T, M> x, std::span<const sequence_rows> seqs,
                 vector_view<const int, M> positions, KvOf&& kv_of, const layer_scratch<B>& s, const saved* keep = nullptr) const {
        const index_t rows = x.rows();
        const auto layer = columns(x);
        const auto normed = s.normed.template as_matrix_of<C>(rows, stream_width());
        if (keep) B::copy(ctx, layer, keep->x_in);
        ln_1_.forward(ctx, layer.as_const(), normed);
        attn_.forward(ctx, normed.as_const(), layer, seqs, positions, kv_of, s, keep ? &keep->attn : nullptr);
        if (keep) B::copy(ctx, layer, keep->x_mid);
        ln_2_.forward(ctx, layer.as_const(), normed);
        mlp_.forward(ctx, normed.as_const(), layer, s, keep ? &keep->mlp : nullptr);
    }

    // dx: the gradient of the residual stream after this block, becomes the gradient before it
    // (in the layer's columns; the others pass through). Weight gradients are added into grads.
    void backward(const typename B::context& ctx, residual_view<T, M> dx, std::span<const sequence_rows> seqs,
                  vector_view<const int, M> positions, const saved& kept, const layer_scratch<B>& s, tensors<T> grads) const {
        const index_t rows = dx.rows();
        const auto d_layer = columns(dx);
        const auto normed = s.normed.template as_matrix_of<C>(rows, stream_width());
        const auto d_normed = s.d_normed.template as_matrix_of<C>(rows, stream_width());
        // MLP: x += res * mlp(rmsnorm(x))
        ln_2_.forward(ctx, kept.x_mid.as_const(), normed);
        mlp_.backward(ctx, normed.as_const(), d_layer.as_const(), kept.mlp, s, d_normed, grads.mlp);
        ln_2_.backward(ctx, kept.x_mid.as_const(), d_normed.as_const(), d_layer, grads.ln_2, s.norm);
        // attention: x += res * attention(rmsnorm(x))
        ln_1_.forward(ctx, kept.x_in.as_const(), normed);
        attn_.backward(ctx, normed.as_const(), d_layer.as_const(), kept.attn, seqs, positions, s, d_normed, grads.attn);
        ln_1_.backward(ctx, kept.x_in.as_const(), d_normed.as_const(), d_layer, grads.ln_1, s.norm);
    }

private:
    static int checked_stream(Width width, const block_hyper& hp) {
        const int stream = hp.stream_width > 0 ? hp.stream_width : width.value();
        if (C != dynamic_extent && stream != width.value())
            vwt::detail::fail("block ", hp.layer, ": a block of compile-time width ", width.value(), " cannot read ", stream,
                              " stream columns (a fixed-width stream runs as vwt::model)");
        return stream;
    }

    // The dense MLP from the layout and the residual multiplier; an MoE MLP also from its shape.
    static mlp_type make_mlp(typename mlp_type::template tensors<const typename B::weight_type> w, Width width, const block_hyper& hp) {
        if constexpr (requires(const mlp_type& m) { m.shape; })
            return mlp_type{w, width, hp.moe, hp.mlp, T(hp.m_residual), hp.layer, T(hp.router_aux_coef)};
        else
            return mlp_type{w, width, hp.mlp, T(hp.m_residual)};
    }

    Width width_;
    int layer_ = 0;
    int stream_ = 0;
    rmsnorm<B> ln_1_, ln_2_;
    attention_type attn_;
    mlp_type mlp_;
};

}  // namespace vwt
