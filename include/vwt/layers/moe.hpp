// The mixture-of-experts MLP of the paper's MoE ><former (semantics.md section 6): a router over
// the layer's width picks k of E experts per token (largest logits, ties to the lower expert),
// weighs them by a softmax over the chosen logits, and adds residual * sum_s weight_s *
// expert_s(x) to the layer's columns, each expert a SwiGLU with its own intermediate size.
// Tokens are permuted by expert (the policy's moe_route), so each projection is one product
// grouped by expert over weights stacked on a leading expert axis; forward and backward side by
// side, the router's gradient included, and in training the router's auxiliary load-balancing loss
// (its value per layer for the trainer's log, its gradient into the router's).
#pragma once

#include "../backend/policy.hpp"
#include "../params/layout.hpp"
#include "moe_shape.hpp"
#include "scratch.hpp"
#include "width.hpp"

namespace vwt {

// The authors' stacked tensors: gate [E x w]; c_fc [E, 2I, w] as [E 2I x w] (per expert: rows
// [0, I) up, [I, 2I) gate, or alternating); c_proj [E, w, I] as [E w x I].
template <class E, memory_space M>
struct moe_tensors {
    matrix_view<E, M> gate;
    matrix_view<E, M> c_fc;
    matrix_view<E, M> c_proj;
    static moe_tensors bind(const tensor_binder<E, M>& b, int layer) {
        const auto p = layer_prefix(layer);
        return {b.matrix(p + "mlp_block.gate.weight"), b.stacked_matrix(p + "mlp_block.c_fc.weight"),
                b.stacked_matrix(p + "mlp_block.c_proj.weight")};
    }
};

template <class B, layer_width Width>
    requires moe_backend_policy<B>
struct moe_mlp {
    using T = typename B::compute_type;
    using M = typename B::memory;
    template <class E>
    using tensors = moe_tensors<E, M>;
    template <class U, index_t C = dynamic_extent>
    using mat = matrix_view<U, M, C>;
    template <class U>
    using vec = vector_view<U, M>;

    // What backward keeps from forward: nothing (it recomputes the routing and the experts).
    struct saved {
        static index_t elements(index_t, const Width&) { return 0; }
        static saved carve(vec<T>, index_t, const Width&) { return {}; }
    };

    // Views for one pass over `rows` tokens (R) and their R k (token, expert) pairs, carved from
    // the layers' scratch (layer_scratch's moe, moe_pairs, expert_offsets, moe_aux).
    struct scratch {
        mat<T> logits;               // R x E
        vec<T> weights;              // R k
        vec<int> experts, order;     // R k
        vec<int> offsets;            // E + 1: this layer's in expert_offsets
        mat<T> gathered, fused, act, out;  // R k x (w, 2I, I, w)
        // backward
        vec<T> d_weights;            // R k
        mat<T> d_logits;             // R x E
        mat<T> d_out, d_fused, d_act, d_gathered;
        vec<double> aux;             // this layer's auxiliary loss (empty: none is computed)
    };

    tensors<const typename B::weight_type> weights;
    Width width;
    moe_shape shape;
    swiglu_layout layout = swiglu_layout::split;
    T residual = T(1);  // m_residual
    int layer = 0;      // which E + 1 of the scratch's expert_offsets and which moe_aux entry are this layer's
    T aux_coef = T(0);  // router_aux_loss_coef: the auxiliary loss's weight in training

    scratch carve(const layer_scratch<B>& ls, index_t rows, bool backward) const {
        const index_t pairs = rows * shape.experts_per_token, w = width.value(), E = shape.experts;
        if (ls.moe.size() < shape.scratch_elements(rows, w, backward) || ls.moe_pairs.size() < shape.scratch_ints(rows) ||
            ls.expert_offsets.size() < (layer + 1) * (E + 1))
            detail::fail("moe layer ", layer, ": the scratch holds ", ls.moe.size(), ", ", ls.moe_pairs.size(), " and ",
                         ls.expert_offsets.size(), " elements for ", shape.scratch_elements(rows, w, backward), ", ",
                         shape.scratch_ints(rows), " and ", (layer + 1) * (E + 1));
        index_t at = 0;
        const auto take = [&](index_t r, index_t c) {
            auto v = ls.moe.subview(at, r * c).as_matrix(r, c);
            at += r * c;
            return v;
        };
        scratch s;
        s.logits = take(rows, E);
        s.weights = ls.moe.subview(at, pairs);
        at += pairs;
        s.gathered = take(pairs, w), s.fused = take(pairs, 2 * shape.inter), s.act = take(pairs, shape.inter), s.out = take(pairs, w);
        if (backward) {
            s.d_weights = ls.moe.subview(at, pairs);
            at += pairs;
            s.d_logits = take(rows, E);
            s.d_out = take(pairs, w), s.d_fused = take(pairs, 2 * shape.inter), s.d_act = take(pairs, shape.inter);
            s.d_gathered = take(pairs, w);
            if (ls.moe_aux.size() > layer) s.aux = ls.moe_aux.subview(layer, 1);
        }
        s.experts = ls.moe_pairs.subview(0, pairs), s.order = ls.moe_pairs.subview(pairs, pairs);
        s.offsets = ls.expert_offsets.subview(layer * (E + 1), E + 1);
        return s;
    }

    // layer += residual * sum over each token's experts of weight * c_proj_e swiglu(c_fc_e normed)
    template <index_t C>
    void forward(const typename B::context& ctx, mat<const T, C> normed, mat<T, C> layer_cols, const layer_scratch<B>& ls,
                 const saved* = nullptr) const {
        const index_t pairs = normed.rows() * shape.experts_per_token;
        const auto s = carve(ls, normed.rows(), false);
        run_experts(ctx, normed, s);
        B::scatter_add_rows(ctx, s.out.rows_range(0, pairs).as_const(), vec<const int>(s.order.subview(0, pairs)), shape.experts_per_token,
                            vec<const T>(s.weights.subview(0, pairs)), mat<T>(layer_cols), residual);
    }

    // d_layer: the gradient of the layer's columns after this MLP. Writes d_normed (the gradient
    // of the MLP's input) and adds the weight gradients into grads. Recomputes the forward
    // (routing, expert activations) from normed first: nothing is kept between the passes. With an
    // aux entry in the scratch (training), also the auxiliary loss of these tokens: its value into
    // the scratch's moe_aux[layer], aux_coef times its gradient into the router's.
    template <index_t C>
    void backward(const typename B::context& ctx, mat<const T, C> normed, mat<const T, C> d_layer, const saved&, const layer_scratch<B>& ls,
                  mat<T, C> d_normed, tensors<T> grads) const {
        const index_t rows = normed.rows(), pairs = rows * shape.experts_per_token;
        const auto s = carve(ls, rows, true);
        const int k = shape.experts_per_token;
        run_experts(ctx, normed, s);
        const vec<const int> offsets = s.offsets;
        const auto order = vec<const int>(s.order.subview(0, pairs));
        const auto gathered = s.gathered.rows_range(0, pairs), fused = s.fused.rows_range(0, pairs), act = s.act.rows_range(0, pairs);
        const auto out = s.out.rows_range(0, pairs), d_out = s.d_out.rows_range(0, pairs);
        const auto d_fused = s.d_fused.rows_range(0, pairs), d_act = s.d_act.rows_range(0, pairs);
        const auto d_gathered = s.d_gathered.rows_range(0, pairs);
        // the weights' gradient: residual * out_j . d_layer[token]; the experts' outputs' gradient:
        // residual * weight * d_layer[token]
        B::pair_dots(ctx, out.as_const(), order, k, mat<const T>(d_layer), s.d_weights.subview(0, pairs));
        B::scale(ctx, s.d_weights.subview(0, pairs), residual);
        B::gather_rows(ctx, mat<const T>(d_layer), order, k, vec<const T>(s.weights.subview(0, pairs)), residual, d_out);
        // down and up projections, grouped by expert
        B::grouped_matmul_tn(ctx, d_out.as_const(), act.as_const(), offsets, grads.c_proj, T(1), T(1));
        B::grouped_matmul_nn(ctx, d_out.as_const(), offsets, weights.c_proj, d_act);
        B::swiglu_backward(ctx, fused.as_const(), d_act.as_const(), d_fused, shape.inter, layout);
        B::grouped_matmul_tn(ctx, d_fused.as_const(), gathered.as_const(), offsets, grads.c_fc, T(1), T(1));
        B::grouped_matmul_nn(ctx, d_fused.as_const(), offsets, weights.c_fc, d_gathered);
        // the router: logits = normed gate^T, weights = softmax over the chosen logits
        const auto d_logits = s.d_logits.rows_range(0, rows);
        B::moe_route_backward(ctx, vec<const int>(s.experts.subview(0, pairs)), vec<const T>(s.weights.subview(0, pairs)),
                              vec<const T>(s.d_weights.subview(0, pairs)), d_logits);
        if (!s.aux.empty())
            B::moe_aux_loss(ctx, s.logits.rows_range(0, rows).as_const(), vec<const int>(s.experts.subview(0, pairs)), aux_coef, d_logits,
                            s.aux);
        B::matmul_tn(ctx, d_logits.as_const(), mat<const T>(normed), grads.gate, T(1), T(1));
        B::matmul_nn(ctx, d_logits.as_const(), weights.gate, mat<T>(d_normed));
        B::scatter_add_rows(ctx, d_gathered.as_const(), order, k, vec<const T>(), mat<T>(d_normed), T(1));
    }

private:
    // Everything of the forward but the weighted sum: router logits, each token's experts and
    // weights, the pairs sorted by expert, the tokens' rows gathered in that order, and each pair's
    // expert output (s.out), with the expert activations (s.fused, s.act) the backward needs.
    template <index_t C>
    void run_experts(const typename B::context& ctx, mat<const T, C> normed, const scratch& s) const {
        const index_t rows = normed.rows(), pairs = rows * shape.experts_per_token;
        const auto logits = s.logits.rows_range(0, rows);
        const auto gathered = s.gathered.rows_range(0, pairs), fused = s.fused.rows_range(0, pairs), act = s.act.rows_range(0, pairs);
        const vec<const int> offsets = s.offsets;
        B::matmul_nt(ctx, mat<const T>(normed), weights.gate, logits);
        B::moe_route(ctx, logits.as_const(), shape.experts_per_token, s.experts.subview(0, pairs), s.weights.subview(0, pairs),
                     s.order.subview(0, pairs), s.offsets);
        B::gather_rows(ctx, mat<const T>(normed), vec<const int>(s.order.subview(0, pairs)), shape.experts_per_token, vec<const T>(), T(1),
                       gathered);
        B::grouped_matmul_nt(ctx, gathered.as_const(), offsets, weights.c_fc, fused);
        B::swiglu(ctx, fused.as_const(), act, shape.inter, layout);
        B::grouped_matmul_nt(ctx, act.as_const(), offsets, weights.c_proj, s.out.rows_range(0, pairs));
    }
};

}  // namespace vwt
