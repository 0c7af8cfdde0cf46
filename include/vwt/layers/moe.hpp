// The mixture-of-experts MLP of the paper's MoE ><former (semantics.md section 6): a router over
// the layer's width picks k of E experts per token (largest logits, ties to the lower expert),
// weighs them by a softmax over the chosen logits, and adds residual * sum_s weight_s *
// expert_s(x) to the layer's columns, each expert a SwiGLU with its own intermediate size.
// Tokens are permuted by expert (the policy's moe_route), so each projection is one product
// grouped by expert over weights stacked on a leading expert axis; forward and backward side by
// side, the router's gradient included. (The auxiliary load-balancing loss is the trainer's.)
#pragma once

#include "../backend/policy.hpp"
#include "width.hpp"

namespace vwt {

// The authors' stacked tensors: gate [E x w]; c_fc [E, 2I, w] as [E 2I x w] (per expert: rows
// [0, I) up, [I, 2I) gate, or alternating); c_proj [E, w, I] as [E w x I].
template <class E, memory_space M>
struct moe_tensors {
    matrix_view<E, M> gate;
    matrix_view<E, M> c_fc;
    matrix_view<E, M> c_proj;
};

struct moe_shape {
    int experts = 0;
    int experts_per_token = 0;
    index_t inter = 0;  // the experts' intermediate size at this layer's width
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

    // Views for one pass over `rows` tokens (R) and their R k (token, expert) pairs: carved by
    // carve() from a compute-type buffer of elements() and an int buffer of int_elements().
    struct scratch {
        mat<T> logits;               // R x E
        vec<T> weights;              // R k
        vec<int> experts, order;     // R k
        vec<int> offsets;            // E + 1
        mat<T> gathered, fused, act, out;  // R k x (w, 2I, I, w)
        // backward
        vec<T> d_weights;            // R k
        mat<T> d_logits;             // R x E
        mat<T> d_out, d_fused, d_act, d_gathered;

        static index_t elements(index_t rows, const Width& w, const moe_shape& m, bool backward) {
            const index_t pairs = rows * m.experts_per_token, fwd = rows * m.experts + pairs * (1 + 2 * w.value() + 3 * m.inter);
            return backward ? 2 * fwd : fwd;
        }
        static index_t int_elements(index_t rows, const moe_shape& m) { return 2 * rows * m.experts_per_token + m.experts + 1; }
        static scratch carve(vec<T> memory, vec<int> ints, index_t rows, const Width& width, const moe_shape& m, bool backward) {
            if (memory.size() < elements(rows, width, m, backward) || ints.size() < int_elements(rows, m))
                detail::fail("moe scratch: ", memory.size(), " and ", ints.size(), " elements for ", elements(rows, width, m, backward),
                             " and ", int_elements(rows, m));
            const index_t pairs = rows * m.experts_per_token, w = width.value();
            index_t at = 0;
            const auto take = [&](index_t r, index_t c) {
                auto v = memory.subview(at, r * c).as_matrix(r, c);
                at += r * c;
                return v;
            };
            scratch s;
            s.logits = take(rows, m.experts);
            s.weights = memory.subview(at, pairs);
            at += pairs;
            s.gathered = take(pairs, w), s.fused = take(pairs, 2 * m.inter), s.act = take(pairs, m.inter), s.out = take(pairs, w);
            if (backward) {
                s.d_weights = memory.subview(at, pairs);
                at += pairs;
                s.d_logits = take(rows, m.experts);
                s.d_out = take(pairs, w), s.d_fused = take(pairs, 2 * m.inter), s.d_act = take(pairs, m.inter), s.d_gathered = take(pairs, w);
            }
            s.experts = ints.subview(0, pairs), s.order = ints.subview(pairs, pairs), s.offsets = ints.subview(2 * pairs, m.experts + 1);
            return s;
        }
    };

    tensors<const typename B::weight_type> weights;
    Width width;
    moe_shape shape;
    swiglu_layout layout = swiglu_layout::split;
    T residual = T(1);  // m_residual

    // layer += residual * sum over each token's experts of weight * c_proj_e swiglu(c_fc_e normed)
    template <index_t C>
    void forward(const typename B::context& ctx, mat<const T, C> normed, mat<T, C> layer, const scratch& s) const {
        const index_t pairs = normed.rows() * shape.experts_per_token;
        run_experts(ctx, normed, s);
        B::scatter_add_rows(ctx, s.out.rows_range(0, pairs).as_const(), vec<const int>(s.order.subview(0, pairs)), shape.experts_per_token,
                            vec<const T>(s.weights.subview(0, pairs)), mat<T>(layer), residual);
    }

    // d_layer: the gradient of the layer's columns after this MLP. Writes d_normed (the gradient
    // of the MLP's input) and adds the weight gradients into grads. Recomputes the forward
    // (routing, expert activations) from normed first: nothing is kept between the passes.
    template <index_t C>
    void backward(const typename B::context& ctx, mat<const T, C> normed, mat<const T, C> d_layer, const scratch& s, mat<T, C> d_normed,
                  tensors<T> grads) const {
        const index_t rows = normed.rows(), pairs = rows * shape.experts_per_token;
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
