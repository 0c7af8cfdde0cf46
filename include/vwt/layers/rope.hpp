// Rotary position embedding of the queries and keys inside the fused qkv rows, rotate-half, at
// each token's true position, over each layer's whole head dimension (its frequencies differ from
// layer to layer). The backward is the inverse rotation.
#pragma once

#include "../backend/policy.hpp"
#include "width.hpp"

namespace vwt {

template <class B>
struct rope {
    double theta = 10000.0;

    // qkv: [rows x (H + 2 Hkv) d], per kv group its G = H / Hkv queries, key, value; the G
    // queries and the key of each group are rotated.
    template <layer_width Width>
    void forward(const typename B::context& ctx, matrix_view<typename B::compute_type, typename B::memory> qkv,
                 const Width& width, int kv_heads, vector_view<const int, typename B::memory> positions,
                 bool inverse = false) const {
        const int G = width.heads() / kv_heads;
        const rope_layout<Width::head_extent> layout{kv_heads, G + 1, static_cast<index_t>(G + 2) * width.head_dim(),
                                                      head_extent(width)};
        B::rope(ctx, qkv, layout, positions, theta, inverse);
    }
    template <layer_width Width>
    void backward(const typename B::context& ctx, matrix_view<typename B::compute_type, typename B::memory> d_qkv,
                  const Width& width, int kv_heads, vector_view<const int, typename B::memory> positions) const {
        forward(ctx, d_qkv, width, kv_heads, positions, true);
    }
};

}  // namespace vwt
