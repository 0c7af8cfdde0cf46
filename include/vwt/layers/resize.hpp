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
        const bool projects = method == resize_method::interpolate || method == resize_method::linear;
        const bool draws = method == resize_method::gaussian;
        // The stream starts at the embedding's width; a layer wider than the stream before it grows it.
        int stream = embedding_width(s);
        for (int i = 0; i < s.layers(); ++i) {
            const int w = stream_width(s, i);
            const bool grows = w > stream;
            grown_.push_back(grows && method == resize_method::zero ? column_range{stream, w} : column_range{});
            projected_.push_back(grows && projects ? projection{stream, w} : projection{});
            padded_.push_back(grows && draws ? projection{stream, w} : projection{});
            stream = w;
        }
        const int last = final_norm_width(s), head = unembedding_width(s);
        if (last < head && projects) head_projection_ = {last, head};
        else if (last < head && draws) head_padding_ = {last, head};
        else if (last < head) head_ = {last, head};
    }

    resize_method method() const { return method_; }
    // Columns set to zero before layer i (zero resize only).
    column_range zeroed_before(int layer) const { return grown_[static_cast<std::size_t>(layer)]; }
    // The projection before layer i (interpolate and linear resizes only).
    projection projected_before(int layer) const { return projected_[static_cast<std::size_t>(layer)]; }
    // The gaussian padding before layer i: columns [from, to) drawn from the first `from`.
    projection padded_before(int layer) const { return padded_[static_cast<std::size_t>(layer)]; }
    // The gaussian padding of the head's normed rows from w_L to u.
    projection head_padding() const { return head_padding_; }
    // Columns the head reads from the stream itself, un-normed: [w_L, u) when w_L < u, the
    // unembedding width (h, w_L, or the widest layer's), for move_up and zero models.
    column_range from_stream_to_head() const { return head_; }
    // The projection of the normed [0, w_L) to the head's u columns (interpolate and linear).
    projection head_projection() const { return head_projection_; }

private:
    resize_method method_;
    std::vector<column_range> grown_;
    std::vector<projection> projected_, padded_;
    column_range head_;
    projection head_projection_, head_padding_;
};

// The columns of the head's input rows (see head::input_cols): max(w_L, u), or w_L + u when the
// head projects its normed rows (interpolate and linear resizes with w_L < u).
inline index_t head_input_cols(const model_config& c) {
    const residual_resize r(c.schedule, c.resize);
    const index_t last = final_norm_width(c.schedule), head = unembedding_width(c.schedule);
    return r.head_projection().empty() ? std::max(last, head) : last + head;
}

}  // namespace vwt
