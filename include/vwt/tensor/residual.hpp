// The fixed-residual view: one [rows x W] row-major buffer (W = the widest layer) seen by layer i
// as its first w_i columns, with no copy. This realises the paper's move_up resize exactly.
#pragma once

#include "view.hpp"

namespace vwt {

// The residual stream of a batch of tokens in memory space M. Shrinking to a narrower layer is
// taking fewer columns; growing back finds the wider columns untouched since the last layer that
// wrote them (move_up).
template <class T, memory_space M>
class residual_view {
public:
    residual_view() = default;
    explicit residual_view(matrix_view<T, M> all) : all_(all) {}

    index_t rows() const { return all_.rows(); }
    index_t residual_width() const { return all_.cols(); }
    // What a layer of width w reads and writes; a static Width gives a static column extent.
    template <class Width>
    matrix_view<T, M, Width::cols_extent> layer(const Width& w) const {
        if constexpr (Width::cols_extent == dynamic_extent) return all_.first_cols(w.value());
        else return all_.template first_cols<Width::cols_extent>();
    }
    matrix_view<T, M> all() const { return all_; }
    residual_view rows_range(index_t begin, index_t end) const { return residual_view(all_.rows_range(begin, end)); }

private:
    matrix_view<T, M> all_;
};

}  // namespace vwt
