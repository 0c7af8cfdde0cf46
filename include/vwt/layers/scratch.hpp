// The scratch memory of the layers for one pass over a batch of rows, carved from one buffer in
// the policy's memory: sized once (for the widest layer, the most rows, the longest context), so a
// pass allocates nothing.
#pragma once

#include <algorithm>

#include "../backend/policy.hpp"
#include "../schedule/schedule.hpp"
#include "moe_shape.hpp"

namespace vwt {

template <class B>
struct layer_scratch {
    using T = typename B::compute_type;
    using M = typename B::memory;
    using vec = vector_view<T, M>;
    // forward
    vec normed, qkv, q, attn, fused, act, attention;
    // backward (empty in an inference workspace)
    vec d_normed, d_act, d_fused, d_attn, dq, dk, dv, norm, attention_backward;
    // MoE models (empty otherwise): one layer's routing and expert scratch (moe: compute type,
    // moe_pairs: integers), every layer's expert offsets of the last pass (layer i's E + 1 at
    // i (E + 1): tokens per expert are their differences), and in training every layer's auxiliary
    // loss of the last backward.
    vec moe;
    vector_view<int, M> moe_pairs, expert_offsets;
    vector_view<double, M> moe_aux;
};

struct scratch_request {
    index_t rows = 0;          // rows of the residual buffer (tokens of the batch)
    index_t context = 0;       // the longest key sequence an attention call sees
    index_t query_rows = 0;    // the most rows one attention call has (a sequence's new tokens)
    bool backward = false;     // training: the gradient scratch too, and what `saved` holds not here
    kv_dtype kv = kv_dtype::compute;  // the KV caches' dtype (bf16 keys may need widening scratch)
};

// Sizes (in compute-type elements) of every scratch view for a schedule; `carve` lays them out.
template <class B>
class scratch_plan {
public:
    scratch_plan(const typename B::context& ctx, const dynamic_schedule& s, scratch_request r) {
        const index_t H = s.dims.heads, Hkv = s.dims.kv_heads, w = s.max_width, d = w / H, R = r.rows;
        const index_t widest = std::max<index_t>(s.residual_width, w);
        sizes_[normed] = R * widest;
        sizes_[qkv] = R * (H + 2 * Hkv) * d;
        const bool moe = s.dims.moe.enabled();
        sizes_[act] = moe ? 0 : R * 4 * w;
        // Training keeps q, the attention output and the fused MLP input in its saved activations.
        if (!r.backward) {
            sizes_[q] = sizes_[attn] = R * H * d;
            sizes_[fused] = moe ? 0 : R * 8 * w;
        }
        if (moe) {
            for (int i = 0; i < s.layers(); ++i)
                sizes_[moe_experts] = std::max(sizes_[moe_experts], moe_shape_of(s, i).scratch_elements(R, s.width(i), r.backward));
            pair_ints_ = moe_shape_of(s, 0).scratch_ints(R);
            offset_ints_ = static_cast<index_t>(s.layers()) * (s.dims.moe.experts + 1);
            aux_doubles_ = r.backward ? s.layers() : 0;
        }
        for (int i = 0; i < s.layers(); ++i) {
            const attention_shape<> shape{static_cast<int>(H), static_cast<int>(Hkv), extent<dynamic_extent>(s.head_dim(i))};
            sizes_[attention] = std::max(sizes_[attention], B::attention_scratch(ctx, r.query_rows, r.context, shape, r.kv));
            if (r.backward)
                sizes_[attention_backward] =
                    std::max(sizes_[attention_backward], B::attention_backward_scratch(ctx, r.query_rows, shape));
        }
        if (r.backward) {
            sizes_[d_normed] = R * widest;
            sizes_[d_act] = moe ? 0 : R * 4 * w;
            sizes_[d_fused] = moe ? 0 : R * 8 * w;
            sizes_[d_attn] = sizes_[dq] = R * H * d;
            sizes_[dk] = sizes_[dv] = R * Hkv * d;
            sizes_[norm] = B::rmsnorm_backward_scratch(ctx, R, widest);
        }
    }

    index_t total() const {
        index_t n = 0;
        for (index_t s : sizes_) n += padded(s);
        return n;
    }
    // Integers and doubles (MoE models only; 0 otherwise).
    index_t int_total() const { return pair_ints_ + offset_ints_; }
    index_t double_total() const { return aux_doubles_; }

    layer_scratch<B> carve(vector_view<typename B::compute_type, typename B::memory> buffer, vector_view<int, typename B::memory> ints = {},
                           vector_view<double, typename B::memory> doubles = {}) const {
        if (buffer.size() < total() || ints.size() < int_total() || doubles.size() < double_total())
            detail::fail("layer scratch: ", buffer.size(), ", ", ints.size(), " and ", doubles.size(), " elements, ", total(), ", ",
                         int_total(), " and ", double_total(), " needed");
        layer_scratch<B> s;
        index_t at = 0;
        const auto take = [&](field f) {
            auto v = buffer.subview(at, sizes_[f]);
            at += padded(sizes_[f]);
            return v;
        };
        s.normed = take(normed), s.qkv = take(qkv), s.q = take(q), s.attn = take(attn), s.fused = take(fused);
        s.act = take(act), s.attention = take(attention);
        s.d_normed = take(d_normed), s.d_act = take(d_act), s.d_fused = take(d_fused), s.d_attn = take(d_attn);
        s.dq = take(dq), s.dk = take(dk), s.dv = take(dv), s.norm = take(norm), s.attention_backward = take(attention_backward);
        s.moe = take(moe_experts);
        if (int_total() > 0) s.moe_pairs = ints.subview(0, pair_ints_), s.expert_offsets = ints.subview(pair_ints_, offset_ints_);
        if (aux_doubles_ > 0) s.moe_aux = doubles.subview(0, aux_doubles_);
        return s;
    }

private:
    enum field {
        normed, qkv, q, attn, fused, act, attention, d_normed, d_act, d_fused, d_attn, dq, dk, dv, norm, attention_backward, moe_experts, count
    };
    // Every view starts on a 64-byte boundary of an aligned buffer (16 floats or 8 doubles).
    static index_t padded(index_t n) { return (n + 15) / 16 * 16; }
    index_t sizes_[count] = {};
    index_t pair_ints_ = 0, offset_ints_ = 0, aux_doubles_ = 0;
};

}  // namespace vwt
