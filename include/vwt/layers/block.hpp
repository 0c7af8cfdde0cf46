// One transformer block as a template over its width: pre-norm attention (RoPE, GQA, causal,
// KV cache) and a pre-norm SwiGLU MLP, each added to the layer's columns of the residual stream.
#pragma once

// Layers call only Backend:: ops, never Eigen, so a CUDA policy needs no change here.

#include <span>
#include <type_traits>
#include <vector>

#include "../detail/aligned.hpp"
#include "../infer/kv_cache.hpp"
#include "../model_config.hpp"
#include "../residual_view.hpp"

namespace vwt {

// A width known at compile time (a static schedule) or at run time (a dynamic one).
template <int W>
struct fixed_width {
    static_assert(W > 0, "a layer width must be positive");
    static constexpr bool is_fixed = true;
    constexpr int operator()() const { return W; }
};
struct dynamic_width {
    static constexpr bool is_fixed = false;
    int value = 0;
    constexpr int operator()() const { return value; }
};

// One sequence of a batch: its rows in the batch's residual buffer and its KV cache. Rows are
// positions cache.length() .. cache.length() + rows - 1.
template <class T>
struct batch_sequence {
    kv_cache<T>* cache = nullptr;
    index_t row_begin = 0;
    index_t rows = 0;
};

// Scratch memory of one forward pass, sized for the widest layer.
template <class T>
struct block_scratch {
    aligned_vector<T> normed, qkv, q, attn, fused, act;
    void reserve(index_t rows, const dynamic_schedule& s) {
        const index_t w = s.max_width, hd = s.max_width / s.dims.heads;
        normed.resize(static_cast<std::size_t>(rows * s.residual_width));
        qkv.resize(static_cast<std::size_t>(rows * (s.dims.heads + 2 * s.dims.kv_heads) * hd));
        q.resize(static_cast<std::size_t>(rows * s.dims.heads * hd));
        attn.resize(static_cast<std::size_t>(rows * s.dims.heads * hd));
        fused.resize(static_cast<std::size_t>(rows * 8 * w));
        act.resize(static_cast<std::size_t>(rows * 4 * w));
    }
};

struct block_hyper {
    int layer = 0;
    int heads = 0, kv_heads = 0;
    double attention_scale = 0, m_residual = 1, norm_eps = 1e-5, rope_theta = 10000;
    mlp_layout mlp = mlp_layout::split;
};

template <class Backend, class Width>
class block {
public:
    using T = typename Backend::scalar;

    struct weights {
        const T* ln_1;
        const T* c_attn;    // [(H + 2 Hkv) d x w], rows grouped per kv head: [G d query | d key | d value]
        const T* attn_proj; // [w x H d]
        const T* ln_2;
        const T* c_fc;      // [8w x w]
        const T* mlp_proj;  // [w x 4w]
    };

    block(Width width, block_hyper hyper, weights w) : width_(width), hp_(hyper), w_(w) {
        if (width_() % hp_.heads != 0 || (width_() / hp_.heads) % 2 != 0)
            detail::fail("block ", hp_.layer, ": width ", width_(), " does not split into ", hp_.heads,
                         " heads of even size");
    }

    constexpr int width() const { return width_(); }
    constexpr int head_dim() const { return width_() / hp_.heads; }

    template <class Context>
    void forward(const Context& ctx, residual_view<T> x, std::span<const batch_sequence<T>> seqs,
                 std::span<const int> positions, block_scratch<T>& s) const {
        const index_t rows = x.rows(), w = width(), d = head_dim();
        const int H = hp_.heads, Hkv = hp_.kv_heads, G = H / Hkv;
        const index_t qkv_cols = (H + 2 * Hkv) * d;
        const auto layer = x.layer(w);
        const matrix_view<T> normed{s.normed.data(), rows, w, w};
        const matrix_view<T> qkv{s.qkv.data(), rows, qkv_cols, qkv_cols};
        const matrix_view<T> q{s.q.data(), rows, H * d, H * d};
        const matrix_view<T> attn{s.attn.data(), rows, H * d, H * d};
        const T res = static_cast<T>(hp_.m_residual);

        // attention
        Backend::rmsnorm(ctx, layer, w_.ln_1, normed, static_cast<T>(hp_.norm_eps));
        Backend::matmul_nt(ctx, normed, matrix_view<const T>{w_.c_attn, qkv_cols, w, w}, qkv);
        // Each kv group holds G queries then its key, contiguous: rotate those G + 1 heads.
        Backend::rope(ctx, qkv, Hkv, G + 1, (G + 2) * d, static_cast<int>(d), positions.data(), hp_.rope_theta);
        for (const auto& seq : seqs) {
            auto keys = seq.cache->keys(hp_.layer);
            auto values = seq.cache->values(hp_.layer);
            const index_t past = seq.cache->length(), end = seq.row_begin + seq.rows;
            Backend::split_qkv(qkv.rows_range(seq.row_begin, end), q.rows_range(seq.row_begin, end),
                               keys.rows_range(past, past + seq.rows), values.rows_range(past, past + seq.rows), H, Hkv, d);
            const index_t n_ctx = past + seq.rows;
            Backend::attention(ctx, q.rows_range(seq.row_begin, end), keys.rows_range(0, n_ctx), values.rows_range(0, n_ctx),
                               attn.rows_range(seq.row_begin, end), H, Hkv,
                               static_cast<int>(d), static_cast<T>(hp_.attention_scale));
        }
        Backend::matmul_nt(ctx, attn, matrix_view<const T>{w_.attn_proj, w, H * d, H * d}, layer, res, T(1));

        // MLP
        const index_t inter = 4 * w;
        const matrix_view<T> fused{s.fused.data(), rows, 2 * inter, 2 * inter};
        const matrix_view<T> act{s.act.data(), rows, inter, inter};
        Backend::rmsnorm(ctx, layer, w_.ln_2, normed, static_cast<T>(hp_.norm_eps));
        Backend::matmul_nt(ctx, normed, matrix_view<const T>{w_.c_fc, 2 * inter, w, w}, fused);
        Backend::swiglu(ctx, fused, act, inter, hp_.mlp == mlp_layout::interleaved);
        Backend::matmul_nt(ctx, act, matrix_view<const T>{w_.mlp_proj, w, inter, inter}, layer, res, T(1));
    }

private:
    Width width_;
    block_hyper hp_;
    weights w_;
};

}  // namespace vwt
