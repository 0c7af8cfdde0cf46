// A layer's width as a type: fixed at compile time (a static schedule, so the width and the head
// dimension reach the ops as static extents) or known at run time; one code path for both.
#pragma once

#include "../error.hpp"
#include "../tensor/view.hpp"

namespace vwt {

template <int W, int Heads>
struct fixed_width {
    static_assert(W > 0 && Heads > 0, "a layer width and its head count are positive");
    static_assert(W % Heads == 0, "a layer width must be divisible by the heads");
    static_assert((W / Heads) % 2 == 0, "a head dimension must be even (RoPE rotates pairs)");
    static constexpr index_t cols_extent = W;
    static constexpr index_t head_extent = W / Heads;
    constexpr int value() const { return W; }
    constexpr int heads() const { return Heads; }
    constexpr int head_dim() const { return W / Heads; }
};

struct dynamic_width {
    static constexpr index_t cols_extent = dynamic_extent;
    static constexpr index_t head_extent = dynamic_extent;
    int width = 0;
    int head_count = 0;
    dynamic_width(int w, int heads) : width(w), head_count(heads) {
        if (w <= 0 || heads <= 0 || w % heads != 0 || (w / heads) % 2 != 0)
            detail::fail("width ", w, " does not split into ", heads, " heads of even size");
    }
    int value() const { return width; }
    int heads() const { return head_count; }
    int head_dim() const { return width / head_count; }
};

template <class W>
concept layer_width = requires(const W& w) {
    { W::cols_extent } -> std::convertible_to<index_t>;
    { W::head_extent } -> std::convertible_to<index_t>;
    { w.value() } -> std::convertible_to<int>;
    { w.heads() } -> std::convertible_to<int>;
    { w.head_dim() } -> std::convertible_to<int>;
};

// The head dimension of a width as an extent (static when the width is).
template <layer_width W>
constexpr extent<W::head_extent> head_extent(const W& w) { return extent<W::head_extent>(w.head_dim()); }

}  // namespace vwt
