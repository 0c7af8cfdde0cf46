// The fixed-residual view: one [rows x W] row-major buffer (W = the widest layer) seen by layer i
// as its first w_i columns, with no copy. This realises the paper's move_up resize exactly.
#pragma once

#include <cstddef>

namespace vwt {

using index_t = std::ptrdiff_t;

// A row-major matrix view of memory the caller owns (like Eigen::Map with an outer stride).
template <class T>
struct matrix_view {
    T* data = nullptr;
    index_t rows = 0;
    index_t cols = 0;
    index_t stride = 0;  // elements between the starts of consecutive rows (>= cols)

    T* row(index_t r) const { return data + r * stride; }
    T& operator()(index_t r, index_t c) const { return data[r * stride + c]; }
    // The first `w` columns: what a layer of width w reads and writes.
    matrix_view first_cols(index_t w) const { return {data, rows, w, stride}; }
    matrix_view cols_range(index_t begin, index_t end) const { return {data + begin, rows, end - begin, stride}; }
    matrix_view rows_range(index_t begin, index_t end) const { return {data + begin * stride, end - begin, cols, stride}; }
    operator matrix_view<const T>() const { return {data, rows, cols, stride}; }
};

// The residual stream of a batch of tokens. Shrinking to a narrower layer is taking fewer columns;
// growing back finds the wider columns untouched since the last layer that wrote them (move_up).
template <class T>
class residual_view {
public:
    residual_view(T* data, index_t rows, index_t residual_width)
        : all_{data, rows, residual_width, residual_width} {}

    index_t rows() const { return all_.rows; }
    index_t residual_width() const { return all_.cols; }
    matrix_view<T> layer(index_t width) const { return all_.first_cols(width); }
    matrix_view<T> all() const { return all_; }

private:
    matrix_view<T> all_;
};

}  // namespace vwt
