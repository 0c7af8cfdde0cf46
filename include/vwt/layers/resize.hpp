// The residual resize rule, in one place: what happens to the stream before each layer and before
// the head. A narrower layer truncates. A wider one grows it by its resize method: move_up (the
// grown columns' latest values, already in the buffer), zero (zeros), gaussian (per token, draws
// from the normal of its current values' mean and standard deviation) or a projection of the whole
// stream to the new width (interpolate: a fixed linear interpolation; linear: a learned map). The
// head's resize is move_up for move_up and zero models (semantics.md section 2, step 3) and the
// model's own method otherwise. A fixed-width stream never resizes.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../backend/policy.hpp"
#include "../detail/gaussian_noise.hpp"
#include "../model/config.hpp"
#include "../tensor/residual.hpp"

namespace vwt {

// The name of the learned resize into layer i (or into the head: layer -1), as the authors'
// WidthVaryingModel registers it.
inline std::string linear_resize_name(int layer) {
    return layer < 0 ? "transformer.linear_layers.linear_for_unembed.weight"
                     : "transformer.linear_layers.linear_for_layer" + std::to_string(layer) + ".weight";
}

// torch.nn.functional.interpolate(mode "linear") of a vector of `from` values to `to` values as a
// matrix [to x from], row-major: each output is a blend of its two nearest inputs.
inline std::vector<double> interpolation_matrix(int from, int to, bool align_corners) {
    std::vector<double> p(static_cast<std::size_t>(to) * static_cast<std::size_t>(from), 0.0);
    for (int j = 0; j < to; ++j) {
        double src = 0;
        if (align_corners) src = to > 1 ? j * static_cast<double>(from - 1) / (to - 1) : 0.0;
        else src = std::max((j + 0.5) * static_cast<double>(from) / to - 0.5, 0.0);
        const int i0 = std::min(static_cast<int>(std::floor(src)), from - 1), i1 = std::min(i0 + 1, from - 1);
        const double lambda = src - i0;
        double* row = p.data() + static_cast<std::size_t>(j) * static_cast<std::size_t>(from);
        row[i0] += 1.0 - lambda;
        row[i1] += lambda;
    }
    return p;
}

// What a gaussian resize draws with: each row's counter (in inference its token's position, so a
// cached decode equals the full forward; in training its row) and the salt (0 in inference; the
// trainer's per micro-batch, so that every step draws anew).
template <memory_space M>
struct resize_noise {
    vector_view<const int, M> counters{};
    std::uint64_t salt = 0;
};

class residual_resize {
public:
    struct column_range {
        int begin = 0, end = 0;
        bool empty() const { return begin >= end; }
    };
    // A projection of the stream's first `from` columns to its first `to` columns.
    struct projection {
        int from = 0, to = 0;
        bool empty() const { return to <= from; }
    };

    residual_resize(const dynamic_schedule& s, resize_method method) : method_(method) {
        // The stream starts at the embedding's width; a layer wider than the stream before it grows it.
        int stream = embedding_width(s);
        for (int i = 0; i < s.layers(); ++i) {
            const int w = stream_width(s, i);
            grows_.push_back(w > stream ? projection{stream, w} : projection{});
            stream = w;
        }
        const int last = final_norm_width(s), head = unembedding_width(s);
        if (last < head) head_grows_ = {last, head};
    }

    resize_method method() const { return method_; }
    // Columns set to zero before layer i (zero resize only).
    column_range zeroed_before(int layer) const {
        const auto g = grows_before(layer, method_ == resize_method::zero);
        return {g.from, g.to};
    }
    // The projection before layer i (interpolate and linear resizes only).
    projection projected_before(int layer) const { return grows_before(layer, projects()); }
    // The gaussian padding before layer i: columns [from, to) drawn from the first `from`.
    projection padded_before(int layer) const { return grows_before(layer, method_ == resize_method::gaussian); }
    // The gaussian padding of the head's normed rows from w_L to u.
    projection head_padding() const { return method_ == resize_method::gaussian ? head_grows_ : projection{}; }
    // Columns the head reads from the stream itself, un-normed: [w_L, u) when w_L < u, the
    // unembedding width (h, w_L, or the widest layer's), for move_up and zero models.
    column_range from_stream_to_head() const {
        return method_ == resize_method::move_up || method_ == resize_method::zero ? column_range{head_grows_.from, head_grows_.to}
                                                                                     : column_range{};
    }
    // The projection of the normed [0, w_L) to the head's u columns (interpolate and linear).
    projection head_projection() const { return projects() ? head_grows_ : projection{}; }

private:
    bool projects() const { return method_ == resize_method::interpolate || method_ == resize_method::linear; }
    projection grows_before(int layer, bool applies) const { return applies ? grows_[static_cast<std::size_t>(layer)] : projection{}; }

    resize_method method_;
    std::vector<projection> grows_;  // before each layer: the stream's growth from..to (empty where it does not grow)
    projection head_grows_;          // w_L..u when the head is wider than the final norm
};

// The columns of the head's input rows: max(w_L, u), or w_L + u (the normed rows, then their
// projection to u) when the head projects (interpolate and linear resizes with w_L < u).
inline index_t head_input_cols(index_t last_width, index_t unembedding_width, bool projects) {
    return projects ? last_width + unembedding_width : std::max(last_width, unembedding_width);
}
inline index_t head_input_cols(const model_config& c) {
    const residual_resize r(c.schedule, c.resize);
    return head_input_cols(final_norm_width(c.schedule), unembedding_width(c.schedule), !r.head_projection().empty());
}

}  // namespace vwt
