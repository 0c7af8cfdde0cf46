// The backend_policy concept: every op the layers, models, sessions and training may call, each
// taking the policy's context first and working on views of the policy's own memory.
#pragma once

// A policy B provides:
//  - element types: compute_type (activations, gradients), weight_type (parameters), state_type
//    (optimizer moments); a weight format other than compute_type is a weight type plus matmul
//    overloads for it, not a new policy;
//  - memory: a memory space tag `memory`, RAII `buffer<U>` in it, and upload/download, the only
//    way host data enters or leaves;
//  - context: what every op runs on (CPU: the thread count; a device: a stream and a workspace);
//  - a KV cache in the compute type, and optionally in bf16 (kv_bf16, see kv_dtype);
//  - ops that need scratch take it as a last view argument, sized by a *_scratch query (the
//    caller owns the workspace, so a decode step allocates nothing).
// Shapes that a layer knows at compile time (a head dimension) reach the ops as extents.

#include <concepts>
#include <cstdint>
#include <span>

#include "../error.hpp"
#include "../tensor/view.hpp"

namespace vwt {

// The fused qkv layout RoPE rotates: per kv group, `heads_per_group` consecutive head vectors of
// size head_dim starting at column group * group_stride.
template <index_t D = dynamic_extent>
struct rope_layout {
    int groups = 0;
    int heads_per_group = 0;
    index_t group_stride = 0;
    extent<D> head_dim{};
};

// Grouped-query attention: `heads` query heads of size head_dim share `kv_heads` key/value heads.
template <index_t D = dynamic_extent>
struct attention_shape {
    int heads = 0;
    int kv_heads = 0;
    extent<D> head_dim{};
};

// What a KV cache stores: the policy's compute type, or bf16 (half the bytes of float; rounded to
// nearest when written, widened when read). A policy that takes bf16 keys and values in
// split_qkv and attention says so with `static constexpr bool kv_bf16 = true`.
enum class kv_dtype { compute, bf16 };

template <class B>
inline constexpr bool supports_kv_bf16 = requires { requires B::kv_bf16; };

// c_fc's 2 * inter output columns: u (up) and g (gate) as two halves, or alternating.
enum class swiglu_layout { split, interleaved };

// One AdamW update of a tensor group (torch.optim.AdamW's formula with decoupled decay):
// p = p * decay - step_size * m / (sqrt(v) / root_bias2 + eps).
struct adamw_update {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-10;
    double decay = 1.0;      // 1 - lr * weight_decay, or 1 without decay
    double step_size = 0.0;  // lr / (1 - beta1^t)
    double root_bias2 = 1.0; // sqrt(1 - beta2^t)
};

// clang-format off
template <class B>
concept backend_policy =
    requires { typename B::context; typename B::memory; typename B::compute_type; typename B::weight_type;
               typename B::state_type; typename B::template buffer<typename B::compute_type>;
               typename B::template buffer<int>; } &&
    memory_space<typename B::memory> &&
    requires(const typename B::context& ctx,
             matrix_view<typename B::compute_type, typename B::memory> m,
             matrix_view<const typename B::compute_type, typename B::memory> cm,
             matrix_view<const typename B::weight_type, typename B::memory> w,
             vector_view<const typename B::weight_type, typename B::memory> gain,
             vector_view<typename B::weight_type, typename B::memory> params,
             vector_view<typename B::compute_type, typename B::memory> v,
             vector_view<const typename B::compute_type, typename B::memory> cv,
             vector_view<typename B::state_type, typename B::memory> state,
             vector_view<const int, typename B::memory> ids,
             vector_view<double, typename B::memory> dv,
             std::span<const typename B::compute_type> host_in, std::span<typename B::compute_type> host_out,
             typename B::compute_type s, index_t n, double theta, bool flag) {
        { typename B::template buffer<typename B::compute_type>(n).view() } -> std::same_as<vector_view<typename B::compute_type, typename B::memory>>;
        B::upload(ctx, host_in, v);
        B::download(ctx, cv, host_out);
        B::matmul_nt(ctx, cm, w, m, s, s);
        B::matmul_nn(ctx, cm, w, m, s, s);
        B::matmul_tn(ctx, cm, cm, m, s, s);
        B::rmsnorm(ctx, cm, gain, m, s);
        { B::rmsnorm_backward_scratch(ctx, n, n) } -> std::convertible_to<index_t>;
        B::rmsnorm_backward(ctx, cm, gain, cm, m, v, s, v);
        B::rope(ctx, m, rope_layout<>{}, ids, theta, flag);
        { B::attention_scratch(ctx, n, n, attention_shape<>{}, kv_dtype::compute) } -> std::convertible_to<index_t>;
        B::attention(ctx, cm, cm, cm, m, attention_shape<>{}, s, v);
        { B::attention_backward_scratch(ctx, n, attention_shape<>{}) } -> std::convertible_to<index_t>;
        B::attention_backward(ctx, cm, cm, cm, cm, m, m, m, attention_shape<>{}, s, v);
        B::swiglu(ctx, cm, m, n, swiglu_layout::split);
        B::swiglu_backward(ctx, cm, cm, m, n, swiglu_layout::split);
        B::embed(ctx, w, ids, m, s);
        B::embed_backward(ctx, cm, ids, m, s);
        B::cross_entropy(ctx, m, ids, s, dv);
        B::split_qkv(ctx, cm, m, m, m, attention_shape<>{});
        B::join_qkv(ctx, cm, cm, cm, m, attention_shape<>{});
        B::copy(ctx, cm, m);
        B::fill(ctx, m, s);
        B::gaussian_pad(ctx, m, n, n, ids, std::uint64_t{});
        B::gaussian_pad_backward(ctx, cm, m, n, n, ids, std::uint64_t{});
        B::scale(ctx, v, s);
        B::sum_squares(ctx, cv, dv);
        B::adamw(ctx, params, cv, state, state, adamw_update{});
    };
// clang-format on

namespace detail {
// For products grouped by expert: f(e, begin, end, n) for each expert e, its rows [begin, end) of
// the E + 1 ascending `offsets` (from 0 to `rows`, in memory the policy can read) and n =
// stacked_rows / E, the rows of one expert's matrix in weights stacked on a leading expert axis.
// Errors name the policy and the op.
template <class F>
void for_each_expert(const int* offsets, index_t E, index_t rows, index_t stacked_rows, index_t n, const char* policy, const char* op,
                     F f) {
    if (E < 1 || stacked_rows != E * n) fail(policy, ": ", op, ": stacked weights of ", stacked_rows, " rows are not ", E, " experts x ", n);
    if (offsets[0] != 0 || offsets[E] != rows) fail(policy, ": ", op, ": the expert offsets do not cover the ", rows, " rows");
    for (index_t e = 0; e < E; ++e) {
        if (offsets[e] > offsets[e + 1]) fail(policy, ": ", op, ": the expert offsets are not ascending");
        f(e, index_t(offsets[e]), index_t(offsets[e + 1]), n);
    }
}
}  // namespace detail

// A policy that runs mixture-of-experts MLPs (layers/moe.hpp) adds: routing (top-k of the router
// logits, ties to the lower expert, a softmax over the chosen, and the (row, slot) pairs sorted by
// expert: order and offsets), its backward, row gathers and weighted scatters between tokens and
// pairs, per-pair dot products, products grouped by expert over weights stacked on a leading
// expert axis, and the router's auxiliary loss with its gradient. The contracts are written out
// in reference/backend.hpp.
// clang-format off
template <class B>
concept moe_backend_policy =
    backend_policy<B> &&
    requires(const typename B::context& ctx,
             matrix_view<typename B::compute_type, typename B::memory> m,
             matrix_view<const typename B::compute_type, typename B::memory> cm,
             matrix_view<const typename B::weight_type, typename B::memory> w,
             vector_view<typename B::compute_type, typename B::memory> v,
             vector_view<const typename B::compute_type, typename B::memory> cv,
             vector_view<int, typename B::memory> iv,
             vector_view<const int, typename B::memory> civ,
             vector_view<double, typename B::memory> dv,
             typename B::compute_type s, int k) {
        B::moe_route(ctx, cm, k, iv, v, iv, iv);
        B::moe_route_backward(ctx, civ, cv, cv, m);
        B::moe_aux_loss(ctx, cm, civ, s, m, dv);
        B::gather_rows(ctx, cm, civ, k, cv, s, m);
        B::scatter_add_rows(ctx, cm, civ, k, cv, m, s);
        B::pair_dots(ctx, cm, civ, k, cm, v);
        B::grouped_matmul_nt(ctx, cm, civ, w, m, s, s);
        B::grouped_matmul_nn(ctx, cm, civ, w, m, s, s);
        B::grouped_matmul_tn(ctx, cm, cm, civ, m, s, s);
    };
// clang-format on

}  // namespace vwt
