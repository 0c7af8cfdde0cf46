// The residual resize rule, in one place: which columns a layer sees that the one before it did
// not have (move_up: their latest values, already in the buffer; zero: zeros), and the resize to
// the head's width, which is move_up for every model (semantics.md section 2, step 3). A
// fixed-width stream never resizes: every block reads and writes the same h columns.
#pragma once

#include <vector>

#include "../backend/policy.hpp"
#include "../model/config.hpp"
#include "../tensor/residual.hpp"

namespace vwt {

class residual_resize {
public:
    residual_resize(const dynamic_schedule& s, resize_method method) {
        // The stream starts at the embedding's width; a layer wider than the stream before it grows it.
        int stream = embedding_width(s);
        for (int i = 0; i < s.layers(); ++i) {
            const int w = stream_width(s, i);
            grown_.push_back(method == resize_method::zero && w > stream ? column_range{stream, w} : column_range{});
            stream = w;
        }
        const int last = final_norm_width(s), head = unembedding_width(s);
        head_ = last < head ? column_range{last, head} : column_range{};
    }

    struct column_range {
        int begin = 0, end = 0;
        bool empty() const { return begin >= end; }
    };

    // Columns set to zero before layer i (zero resize only; empty for move_up).
    column_range zeroed_before(int layer) const { return grown_[static_cast<std::size_t>(layer)]; }
    // Columns the head reads from the stream itself, un-normed: [w_L, u) when w_L < u, the
    // unembedding width (h, w_L, or the widest layer's).
    column_range from_stream_to_head() const { return head_; }

    template <class B>
    void before_layer(const typename B::context& ctx, residual_view<typename B::compute_type, typename B::memory> x,
                      int layer) const {
        if (const auto z = zeroed_before(layer); !z.empty()) B::fill(ctx, x.all().cols_range(z.begin, z.end), typename B::compute_type(0));
    }
    // The backward of before_layer: zeroed columns pass no gradient to the older values there.
    template <class B>
    void before_layer_backward(const typename B::context& ctx,
                               residual_view<typename B::compute_type, typename B::memory> dx, int layer) const {
        before_layer<B>(ctx, dx, layer);
    }

private:
    std::vector<column_range> grown_;
    column_range head_;
};

}  // namespace vwt
