// Training forward (a batch of equal-length sequences, activations kept) and its backward pass:
// the mean next-token loss and its gradient for every parameter, added into one buffer laid out
// like the parameters (llm.c style). Every op is a call of the backend policy, as in the layers.
#pragma once

// What the forward keeps per layer: the layer's input and middle residual columns, the rotated
// q, k, v, the attention output and the fused MLP input (the normed inputs, the SwiGLU output and
// the attention probabilities are recomputed in the backward). All sequences of the batch are
// rows of one [B*T x ...] matrix, so each weight product is one large GEMM.

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "../backend/cpu/backend.hpp"
#include "../model_config.hpp"
#include "../parameters.hpp"
#include "../residual_view.hpp"

namespace vwt::train {

// B sequences of T tokens each, row-major [B x T]; targets[i] is the token that follows tokens[i].
struct token_batch {
    std::span<const int> tokens, targets;
    int sequences = 1;
    index_t length() const { return static_cast<index_t>(tokens.size()) / sequences; }
};

// The activations and scratch of one training step, sized on first use and reused afterwards.
template <class Backend>
struct gradient_workspace {
    using T = typename Backend::scalar;
    using buffer = typename Backend::template buffer<T>;
    struct layer_activations {
        buffer x_in, q, k, v, o, x_mid, fused;
    };
    std::vector<layer_activations> layers;
    buffer x, dx, normed, d_normed, qkv, act, d_act, d_fused, dq, dk, dv, d_o, head_in, d_head_in, logits;
    std::vector<int> positions, negated_positions;
};

namespace detail {

template <class T, class Buffer>
matrix_view<T> sized(Buffer& b, index_t rows, index_t cols) {
    const auto n = static_cast<std::size_t>(rows * cols);
    if (b.size() < n) b.resize(n);
    return {b.data(), rows, cols, cols};
}

}  // namespace detail

// Adds d(mean loss)/d(params) over the batch's B*T predictions into `grad` and returns that mean
// loss. `ctx` sets the threads (or stream) of every op.
template <class Backend>
double loss_and_gradient(const typename Backend::context_type& ctx, const model_config& c, const parameter_layout& layout,
                         std::span<const typename Backend::scalar> params, const token_batch& batch,
                         std::span<typename Backend::scalar> grad, gradient_workspace<Backend>& ws) {
    using T = typename Backend::scalar;
    using detail::sized;
    const auto& s = c.schedule;
    const index_t Tn = batch.sequences > 0 ? batch.length() : 0, rows = static_cast<index_t>(batch.tokens.size());
    if (batch.sequences < 1 || Tn == 0 || Tn * batch.sequences != rows || batch.targets.size() != batch.tokens.size())
        vwt::detail::fail("loss_and_gradient: the batch must hold ", batch.sequences,
                          " non-empty sequences of equal length, with one target per token");
    if (static_cast<std::int64_t>(grad.size()) != layout.size() || static_cast<std::int64_t>(params.size()) != layout.size())
        vwt::detail::fail("loss_and_gradient: parameter or gradient buffer of the wrong size");
    const int H = s.dims.heads, Hkv = s.dims.kv_heads, G = H / Hkv, V = s.dims.vocab;
    const index_t W = s.residual_width, h = s.dims.hidden;
    for (std::size_t i = 0; i < batch.tokens.size(); ++i)
        if (batch.tokens[i] < 0 || batch.tokens[i] >= V || batch.targets[i] < 0 || batch.targets[i] >= V)
            vwt::detail::fail("loss_and_gradient: token or target id outside [0, ", V, ")");
    const T eps = static_cast<T>(c.norm_eps), res = static_cast<T>(c.m_residual);
    const T inv_width = static_cast<T>(1.0 / c.m_width);
    const auto P = [&](const std::string& name) { return params.data() + layout.at(name).offset; };
    const auto D = [&](const std::string& name) { return grad.data() + layout.at(name).offset; };
    const auto weight = [&](const std::string& name, index_t r, index_t k) { return matrix_view<const T>{P(name), r, k, k}; };
    const auto weight_grad = [&](const std::string& name, index_t r, index_t k) { return matrix_view<T>{D(name), r, k, k}; };

    ws.positions.resize(static_cast<std::size_t>(rows));
    ws.negated_positions.resize(static_cast<std::size_t>(rows));
    for (index_t r = 0; r < rows; ++r) {
        ws.positions[static_cast<std::size_t>(r)] = static_cast<int>(r % Tn);
        ws.negated_positions[static_cast<std::size_t>(r)] = -static_cast<int>(r % Tn);
    }
    ws.layers.resize(static_cast<std::size_t>(s.layers()));
    const auto x = sized<T>(ws.x, rows, W);
    const auto layer_rows = [&](matrix_view<T> m, int b) { return m.rows_range(b * Tn, (b + 1) * Tn); };

    // forward
    Backend::embed(ctx, weight("transformer.wte.weight", V, h), batch.tokens.data(), x, static_cast<T>(c.m_emb));
    std::vector<int> zeroed_from(static_cast<std::size_t>(s.layers()), -1);
    int stream = static_cast<int>(h);
    for (int i = 0; i < s.layers(); ++i) {
        auto& L = ws.layers[static_cast<std::size_t>(i)];
        const index_t w = s.width(i), d = w / H, qkv_cols = (H + 2 * Hkv) * d;
        const std::string pre = "transformer.h." + std::to_string(i) + ".";
        if (c.resize == resize_method::zero && w > stream) {
            Backend::fill(x.cols_range(stream, w), T(0));
            zeroed_from[static_cast<std::size_t>(i)] = stream;
        }
        stream = static_cast<int>(w);
        const auto layer = x.first_cols(w);
        const auto x_in = sized<T>(L.x_in, rows, w), normed = sized<T>(ws.normed, rows, w);
        const auto qkv = sized<T>(ws.qkv, rows, qkv_cols);
        const auto q = sized<T>(L.q, rows, H * d), k = sized<T>(L.k, rows, Hkv * d), v = sized<T>(L.v, rows, Hkv * d);
        const auto o = sized<T>(L.o, rows, H * d);
        Backend::copy(layer, x_in);
        Backend::rmsnorm(ctx, x_in, P(pre + "ln_1.weight"), normed, eps);
        Backend::matmul_nt(ctx, normed, weight(pre + "sequence_mixer.c_attn.weight", qkv_cols, w), qkv);
        Backend::rope(ctx, qkv, Hkv, G + 1, (G + 2) * d, static_cast<int>(d), ws.positions.data(), c.rope_theta);
        Backend::split_qkv(qkv, q, k, v, H, Hkv, d);
        for (int b = 0; b < batch.sequences; ++b)
            Backend::attention(ctx, layer_rows(q, b), layer_rows(k, b), layer_rows(v, b), layer_rows(o, b), H, Hkv,
                               static_cast<int>(d), static_cast<T>(c.attention_scale(i)));
        Backend::matmul_nt(ctx, o, weight(pre + "sequence_mixer.c_proj.weight", w, H * d), layer, res, T(1));
        const auto x_mid = sized<T>(L.x_mid, rows, w), fused = sized<T>(L.fused, rows, 8 * w);
        const auto act = sized<T>(ws.act, rows, 4 * w);
        Backend::copy(layer, x_mid);
        Backend::rmsnorm(ctx, x_mid, P(pre + "ln_2.weight"), normed, eps);
        Backend::matmul_nt(ctx, normed, weight(pre + "mlp_block.c_fc.weight", 8 * w, w), fused);
        Backend::swiglu(ctx, fused, act, 4 * w, c.mlp == mlp_layout::interleaved);
        Backend::matmul_nt(ctx, act, weight(pre + "mlp_block.c_proj.weight", w, 4 * w), layer, res, T(1));
    }
    // Final norm over the last layer's wl columns; the head reads h of them, the columns
    // [wl, h) coming from the residual stream when wl < h: the resize to the head is move_up for
    // every model, zero-resize ones included (semantics.md section 2.3).
    const index_t wl = s.width(s.layers() - 1), head_cols = std::max(wl, h);
    const auto head_in = sized<T>(ws.head_in, rows, head_cols);
    Backend::rmsnorm(ctx, x.first_cols(wl), P("transformer.ln_f.weight"), head_in.first_cols(wl), eps);
    if (wl < h) Backend::copy(x.cols_range(wl, h), head_in.cols_range(wl, h));
    const auto logits = sized<T>(ws.logits, rows, V);
    Backend::matmul_nt(ctx, head_in.first_cols(h), weight("lm_head.weight", V, h), logits, inv_width);
    const double loss = Backend::cross_entropy(ctx, logits, batch.targets.data(), static_cast<T>(1.0 / static_cast<double>(rows)));
    const auto& dlogits = logits;  // cross_entropy left d(mean loss)/d(logits) there

    // backward
    Backend::matmul_tn(ctx, dlogits, head_in.first_cols(h), weight_grad("lm_head.weight", V, h), inv_width, T(1));
    const auto d_head_in = sized<T>(ws.d_head_in, rows, head_cols);
    Backend::matmul_nn(ctx, dlogits, weight("lm_head.weight", V, h), d_head_in.first_cols(h), inv_width);
    if (wl > h) Backend::fill(d_head_in.cols_range(h, wl), T(0));
    const auto dx = sized<T>(ws.dx, rows, W);
    Backend::fill(dx, T(0));
    if (wl < h) Backend::copy(d_head_in.cols_range(wl, h), dx.cols_range(wl, h));
    Backend::rmsnorm_backward(ctx, x.first_cols(wl), P("transformer.ln_f.weight"), d_head_in.first_cols(wl),
                              dx.first_cols(wl), D("transformer.ln_f.weight"), eps);
    for (int i = s.layers() - 1; i >= 0; --i) {
        auto& L = ws.layers[static_cast<std::size_t>(i)];
        const index_t w = s.width(i), d = w / H, qkv_cols = (H + 2 * Hkv) * d;
        const std::string pre = "transformer.h." + std::to_string(i) + ".";
        const auto d_layer = dx.first_cols(w);
        const matrix_view<T> x_in{L.x_in.data(), rows, w, w}, x_mid{L.x_mid.data(), rows, w, w};
        const matrix_view<T> q{L.q.data(), rows, H * d, H * d}, o{L.o.data(), rows, H * d, H * d};
        const matrix_view<T> k{L.k.data(), rows, Hkv * d, Hkv * d}, v{L.v.data(), rows, Hkv * d, Hkv * d};
        const matrix_view<T> fused{L.fused.data(), rows, 8 * w, 8 * w};
        const auto normed = sized<T>(ws.normed, rows, w), d_normed = sized<T>(ws.d_normed, rows, w);

        // MLP: x += res * swiglu(rmsnorm(x) W_fc^T) W_proj^T
        const auto act = sized<T>(ws.act, rows, 4 * w), d_act = sized<T>(ws.d_act, rows, 4 * w);
        const auto d_fused = sized<T>(ws.d_fused, rows, 8 * w);
        Backend::swiglu(ctx, fused, act, 4 * w, c.mlp == mlp_layout::interleaved);
        Backend::matmul_tn(ctx, d_layer, act, weight_grad(pre + "mlp_block.c_proj.weight", w, 4 * w), res, T(1));
        Backend::matmul_nn(ctx, d_layer, weight(pre + "mlp_block.c_proj.weight", w, 4 * w), d_act, res);
        Backend::swiglu_backward(ctx, fused, d_act, d_fused, 4 * w, c.mlp == mlp_layout::interleaved);
        Backend::rmsnorm(ctx, x_mid, P(pre + "ln_2.weight"), normed, eps);
        Backend::matmul_tn(ctx, d_fused, normed, weight_grad(pre + "mlp_block.c_fc.weight", 8 * w, w), T(1), T(1));
        Backend::matmul_nn(ctx, d_fused, weight(pre + "mlp_block.c_fc.weight", 8 * w, w), d_normed);
        Backend::rmsnorm_backward(ctx, x_mid, P(pre + "ln_2.weight"), d_normed, d_layer, D(pre + "ln_2.weight"), eps);

        // attention: x += res * attention(rope(rmsnorm(x) W_attn^T)) W_proj^T
        const auto d_o = sized<T>(ws.d_o, rows, H * d), dq = sized<T>(ws.dq, rows, H * d);
        const auto dk = sized<T>(ws.dk, rows, Hkv * d), dv = sized<T>(ws.dv, rows, Hkv * d);
        const auto dqkv = sized<T>(ws.qkv, rows, qkv_cols);
        Backend::matmul_tn(ctx, d_layer, o, weight_grad(pre + "sequence_mixer.c_proj.weight", w, H * d), res, T(1));
        Backend::matmul_nn(ctx, d_layer, weight(pre + "sequence_mixer.c_proj.weight", w, H * d), d_o, res);
        for (int b = 0; b < batch.sequences; ++b)
            Backend::attention_backward(ctx, layer_rows(q, b), layer_rows(k, b), layer_rows(v, b), layer_rows(d_o, b),
                                        layer_rows(dq, b), layer_rows(dk, b), layer_rows(dv, b), H, Hkv,
                                        static_cast<int>(d), static_cast<T>(c.attention_scale(i)));
        Backend::join_qkv(dq, dk, dv, dqkv, H, Hkv, d);
        Backend::rope(ctx, dqkv, Hkv, G + 1, (G + 2) * d, static_cast<int>(d), ws.negated_positions.data(), c.rope_theta);
        Backend::rmsnorm(ctx, x_in, P(pre + "ln_1.weight"), normed, eps);
        Backend::matmul_tn(ctx, dqkv, normed, weight_grad(pre + "sequence_mixer.c_attn.weight", qkv_cols, w), T(1), T(1));
        Backend::matmul_nn(ctx, dqkv, weight(pre + "sequence_mixer.c_attn.weight", qkv_cols, w), d_normed);
        Backend::rmsnorm_backward(ctx, x_in, P(pre + "ln_1.weight"), d_normed, d_layer, D(pre + "ln_1.weight"), eps);
        // zero resize: the grown columns were set to 0, so nothing flows to the older values there
        if (const int z = zeroed_from[static_cast<std::size_t>(i)]; z >= 0) Backend::fill(dx.cols_range(z, w), T(0));
    }
    Backend::embed_backward(ctx, dx.first_cols(h), batch.tokens.data(), weight_grad("transformer.wte.weight", V, h),
                            static_cast<T>(c.m_emb));
    return loss / static_cast<double>(rows);
}

// One sequence on the CPU backend, single-threaded: the loss of `targets` given `tokens` (same
// length) and its gradient added into `grad`.
template <class T>
T loss_and_gradient(const model_config& c, const parameter_layout& layout, std::span<const T> params,
                    std::span<const int> tokens, std::span<const int> targets, std::span<T> grad) {
    gradient_workspace<cpu::backend<T>> ws;
    return static_cast<T>(loss_and_gradient<cpu::backend<T>>({1}, c, layout, params, token_batch{tokens, targets, 1}, grad, ws));
}

}  // namespace vwt::train
