// The width schedule: the model's dimensions plus one width per layer, fixed-size (a structural
// literal type, usable as a template argument) or dynamic (known only at run time).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../error.hpp"

namespace vwt {

inline constexpr std::size_t dynamic = static_cast<std::size_t>(-1);

// Mixture-of-experts MLP, as in the authors' moe_1b3b: `experts` experts per layer, each a SwiGLU
// whose intermediate size is `intermediate` at width `hidden` and scales with the layer width.
struct moe_dims {
    int experts = 0;
    int experts_per_token = 0;
    int intermediate = 0;

    constexpr bool enabled() const { return experts > 0; }
    friend constexpr bool operator==(const moe_dims&, const moe_dims&) = default;
};

// How the residual stream meets the blocks, the embedding and the head: the authors'
// fixed_residual_width, original_input_width, original_output_width and wide_unembedding.
struct stream_dims {
    // The constant-residual baseline: the stream stays at width h; block i reads and writes all h
    // columns through h -> w_i projections at its inputs and w_i -> h at its outputs.
    bool fixed_width = false;
    bool original_input_width = true;   // the embedding has width h (false: w_1)
    bool original_output_width = true;  // the head reads width h (false: w_L, or see wide_unembedding)
    bool wide_unembedding = false;      // (original_output_width false) the head reads the widest layer's width

    friend constexpr bool operator==(const stream_dims&, const stream_dims&) = default;
};

// What a schedule does not change: these are the same for the ><former and its uniform twin.
struct model_dims {
    int layers = 0;
    int hidden = 0;     // hidden_size h: the width of the parameter-matched uniform model
    int heads = 0;      // query heads, the same in every layer
    int kv_heads = 0;   // key/value heads (== heads without grouped-query attention)
    int vocab = 0;
    int context = 0;    // max_position_embeddings
    moe_dims moe{};
    stream_dims stream{};

    friend constexpr bool operator==(const model_dims&, const model_dims&) = default;
};

// The largest dimensions vwt accepts. Far above every published model (the widest have h ~ 16k,
// ~130 layers, vocabularies of ~260k), and small enough that every size derived from them (a
// tensor's element count, the parameter layout, a KV cache row) fits in 64-bit integers, so a
// corrupt config is refused before anything is allocated for it.
struct schedule_limits {
    static constexpr int layers = 4096;
    static constexpr int width = 65536;      // hidden size and every layer width
    static constexpr int heads = 4096;
    static constexpr int vocab = 1 << 24;
    static constexpr int context = 1 << 24;
    static constexpr int experts = 4096;
    static constexpr int moe_intermediate = 1 << 20;
};

namespace detail {

constexpr void validate_dims(const model_dims& d) {
    using lim = schedule_limits;
    if (d.layers <= 0 || d.layers > lim::layers)
        fail("invalid schedule: layers must be in 1..", lim::layers, ", got ", d.layers);
    if (d.hidden <= 0 || d.hidden > lim::width)
        fail("invalid schedule: hidden size must be in 1..", lim::width, ", got ", d.hidden);
    if (d.heads <= 0 || d.heads > lim::heads) fail("invalid schedule: heads must be in 1..", lim::heads, ", got ", d.heads);
    if (d.kv_heads <= 0 || d.heads % d.kv_heads != 0)
        fail("invalid schedule: kv heads (", d.kv_heads, ") must be positive and divide heads (",
             d.heads, ")");
    if (d.vocab <= 0 || d.vocab > lim::vocab) fail("invalid schedule: vocab must be in 1..", lim::vocab, ", got ", d.vocab);
    if (d.context <= 0 || d.context > lim::context)
        fail("invalid schedule: context must be in 1..", lim::context, ", got ", d.context);
    if (d.moe.experts < 0 || d.moe.experts > lim::experts ||
        (d.moe.enabled() && (d.moe.experts_per_token <= 0 || d.moe.experts_per_token > d.moe.experts ||
                             d.moe.intermediate <= 0 || d.moe.intermediate > lim::moe_intermediate)))
        fail("invalid schedule: MoE needs experts (", d.moe.experts, ") in 0..", lim::experts,
             ", 0 < experts_per_token (", d.moe.experts_per_token, ") <= experts and an intermediate size (",
             d.moe.intermediate, ") in 1..", lim::moe_intermediate);
    // The combinations the authors' WidthVaryingConfig and solver accept.
    if (d.stream.fixed_width && (d.stream.wide_unembedding || !d.stream.original_input_width || !d.stream.original_output_width))
        fail("invalid schedule: fixed_residual_width needs original_input_width and original_output_width true and "
             "wide_unembedding false");
    if (d.stream.wide_unembedding && d.stream.original_output_width)
        fail("invalid schedule: wide_unembedding needs original_output_width false");
    if (d.stream.fixed_width && d.moe.enabled())
        fail("invalid schedule: fixed_residual_width is not defined for MoE layers (the authors' code refuses it too)");
}

// The invariants every layer width must meet; the same check runs for fixed and dynamic schedules.
constexpr void validate_width(const model_dims& d, int layer, int width) {
    if (width <= 0) fail("invalid schedule: width of layer ", layer + 1, " is ", width, ", not positive");
    if (width > schedule_limits::width)
        fail("invalid schedule: width ", width, " of layer ", layer + 1, " is above the limit of ", schedule_limits::width);
    if (width % d.heads != 0)
        fail("invalid schedule: width ", width, " of layer ", layer + 1, " is not divisible by ",
             d.heads, " heads");
    if ((width / d.heads) % 2 != 0)
        fail("invalid schedule: head dim ", width / d.heads, " of layer ", layer + 1,
             " is odd; RoPE rotates pairs of coordinates");
}

constexpr int max_of(std::span<const int> widths, int floor) {
    int m = floor;
    for (int w : widths) m = w > m ? w : m;
    return m;
}

}  // namespace detail

// A schedule of L layers known at compile time. Structural: usable as a template argument.
template <std::size_t L = dynamic>
struct schedule {
    model_dims dims{};
    std::array<int, L> widths{};
    int max_width = 0;       // widest layer
    int residual_width = 0;  // W = max(hidden, max_width): the width of the residual buffer

    static constexpr std::size_t static_layers = L;

    constexpr schedule() = default;
    constexpr schedule(const model_dims& d, const std::array<int, L>& w) : dims(d), widths(w) {
        detail::validate_dims(d);
        if (d.layers != static_cast<int>(L))
            detail::fail("invalid schedule: dims say ", d.layers, " layers but the schedule holds ", L);
        for (std::size_t i = 0; i < L; ++i) detail::validate_width(d, static_cast<int>(i), widths[i]);
        max_width = detail::max_of(widths, 0);
        residual_width = max_width > d.hidden ? max_width : d.hidden;
    }

    constexpr int layers() const { return static_cast<int>(L); }
    constexpr int width(int layer) const { return widths[static_cast<std::size_t>(layer)]; }
    constexpr int head_dim(int layer) const { return width(layer) / dims.heads; }
    friend constexpr bool operator==(const schedule&, const schedule&) = default;
};

// A schedule whose layer count is known only at run time (read from a checkpoint, from flags).
template <>
struct schedule<dynamic> {
    model_dims dims{};
    std::vector<int> widths{};
    int max_width = 0;
    int residual_width = 0;

    static constexpr std::size_t static_layers = dynamic;

    schedule() = default;
    schedule(const model_dims& d, std::vector<int> w) : dims(d), widths(std::move(w)) {
        detail::validate_dims(d);
        if (static_cast<int>(widths.size()) != d.layers)
            detail::fail("invalid schedule: dims say ", d.layers, " layers but ", widths.size(),
                         " widths were given");
        for (std::size_t i = 0; i < widths.size(); ++i)
            detail::validate_width(d, static_cast<int>(i), widths[i]);
        max_width = detail::max_of(widths, 0);
        residual_width = max_width > d.hidden ? max_width : d.hidden;
    }
    template <std::size_t L>
    explicit schedule(const schedule<L>& fixed)
        : schedule(fixed.dims, std::vector<int>(fixed.widths.begin(), fixed.widths.end())) {}

    int layers() const { return static_cast<int>(widths.size()); }
    int width(int layer) const { return widths.at(static_cast<std::size_t>(layer)); }
    int head_dim(int layer) const { return width(layer) / dims.heads; }
    friend bool operator==(const schedule&, const schedule&) = default;
};

using dynamic_schedule = schedule<dynamic>;

// The widths the stream variant derives from a schedule: the columns block i reads and writes (h
// for a fixed-width stream, else w_i), the embedding's width, the final norm's and the head's.
template <class S>
constexpr int stream_width(const S& s, int layer) {
    return s.dims.stream.fixed_width ? s.dims.hidden : s.width(layer);
}
template <class S>
constexpr int embedding_width(const S& s) {
    return s.dims.stream.original_input_width ? s.dims.hidden : s.width(0);
}
template <class S>
constexpr int final_norm_width(const S& s) {
    return stream_width(s, s.layers() - 1);
}
template <class S>
constexpr int unembedding_width(const S& s) {
    if (s.dims.stream.original_output_width) return s.dims.hidden;
    return s.dims.stream.wide_unembedding ? s.max_width : s.width(s.layers() - 1);
}

// Anything with dims, widths and the derived widths: both schedule kinds.
template <class S>
concept width_schedule = requires(const S& s) {
    { s.dims } -> std::convertible_to<model_dims>;
    { s.layers() } -> std::convertible_to<int>;
    { s.width(0) } -> std::convertible_to<int>;
    { s.residual_width } -> std::convertible_to<int>;
};

// The parameter-matched uniform twin: every layer at width h.
template <std::size_t L>
constexpr schedule<L> uniform_twin(const schedule<L>& s) {
    std::array<int, L> w{};
    for (auto& x : w) x = s.dims.hidden;
    return schedule<L>(s.dims, w);
}
inline dynamic_schedule uniform_twin(const dynamic_schedule& s) {
    return dynamic_schedule(s.dims, std::vector<int>(s.widths.size(), s.dims.hidden));
}

}  // namespace vwt
