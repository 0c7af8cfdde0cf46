// The shape of one layer's mixture of experts (experts, experts per token, the experts'
// intermediate size at the layer's width) and the scratch one pass over it needs: shared by the
// MoE MLP (layers/moe.hpp), which carves the scratch, and the workspaces, which size it.
#pragma once

#include <span>

#include "../accounting.hpp"
#include "../error.hpp"
#include "../tensor/view.hpp"

namespace vwt {

struct moe_shape {
    int experts = 0;
    int experts_per_token = 0;
    index_t inter = 0;  // the experts' intermediate size at this layer's width

    // Compute-type elements of one pass over `rows` tokens of width w: router logits, pair
    // weights, and the pairs' gathered rows, expert activations and outputs (backward: twice,
    // for their gradients).
    index_t scratch_elements(index_t rows, index_t w, bool backward) const {
        const index_t pairs = rows * experts_per_token, forward = rows * experts + pairs * (1 + 2 * w + 3 * inter);
        return backward ? 2 * forward : forward;
    }
    // Integers of one pass: each pair's expert and the pairs' order by expert.
    index_t scratch_ints(index_t rows) const { return 2 * rows * experts_per_token; }
};

// Layer i's MoE shape; fails when the layer is too narrow for an expert of at least one unit.
inline moe_shape moe_shape_of(const dynamic_schedule& s, int layer) {
    const auto& m = s.dims.moe;
    if (!m.enabled()) detail::fail("moe_shape_of: the schedule has no MoE layers");
    const int inter = moe_intermediate(s.dims, s.width(layer));
    if (inter < 1)
        detail::fail("MoE layer ", layer, " of width ", s.width(layer), ": its experts' intermediate size round(", s.width(layer), " x ",
                     m.intermediate, " / ", s.dims.hidden, ") is 0");
    return {m.experts, m.experts_per_token, inter};
}

// Adds to `tokens` (layer i's E at i E) the (token, expert) pairs each expert took in one pass,
// from every layer's E + 1 expert offsets (layer i's at i (E + 1); a workspace's expert_offsets).
template <class N>
void add_expert_tokens(std::span<const int> offsets, int experts, std::span<N> tokens) {
    const auto E = static_cast<std::size_t>(experts);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::size_t at = i / E * (E + 1) + i % E;
        tokens[i] += static_cast<N>(offsets[at + 1] - offsets[at]);
    }
}

}  // namespace vwt
