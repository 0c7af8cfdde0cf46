// The residual resize rule, in one place: which columns a layer sees that the one before it did
// not have (move_up: their latest values, already in the buffer; zero: zeros), and the resize to
// the head's width h, which is move_up for every model (semantics.md section 2, step 3).
#pragma once

#include <vector>

#include "../backend/policy.hpp"
#include "../model/config.hpp"
#include "../tensor/residual.hpp"

namespace vwt {

class residual_resize {
public:
    residual_resize(const dynamic_schedule& s, resize_method method) {
        // The stream starts at width h after the embedding; a layer wider than the stream before
        // it grows it.
        int stream = s.dims.hidden;
        for (int i = 0; i < s.layers(); ++i) {
            const int w = s.width(i);
            grown_.push_back(method == resize_method::zero && w > stream ? column_range{stream, w} : column_range{});
            stream = w;
        }
        const int last = s.width(s.layers() - 1);
        head_ = last < s.dims.hidden ? column_range{last, s.dims.hidden} : column_range{};
    }

    struct column_range {
        int begin = 0, end = 0;
        bool empty() const { return begin >= end; }
    };

    // Columns set to zero before layer i (zero resize only; empty for move_up).
    column_range zeroed_before(int layer) const { return grown_[static_cast<std::size_t>(layer)]; }
    // Columns the head reads from the stream itself, un-normed: [w_L, h) when w_L < h.
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
