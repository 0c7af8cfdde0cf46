// Views of memory owned by someone else: a row-major matrix and a vector, each typed by the memory
// space it lives in (host, a policy's own) and by its column extent (static or dynamic).
#pragma once

// A view's memory space is part of its type, so handing a host view to a device op, or reading a
// device view's elements on the host, does not compile. Only views of host-accessible memory give
// out element access; a policy reaches the pointer of its own views through `policy_access`.
// The column extent is the width of a layer: a compile-time constant in a static schedule (as in
// Eigen's Matrix<T, N> vs Dynamic), a run-time value otherwise, with one code path for both.

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>

namespace vwt {

using index_t = std::ptrdiff_t;

inline constexpr index_t dynamic_extent = -1;

// A number of columns known at compile time (N >= 0) or at run time (dynamic_extent).
template <index_t N>
struct extent {
    static_assert(N >= 0, "a static extent is a non-negative column count");
    static constexpr bool is_static = true;
    static constexpr index_t static_value = N;
    constexpr extent() = default;
    constexpr explicit extent(index_t) {}
    constexpr index_t value() const { return N; }
};
template <>
struct extent<dynamic_extent> {
    static constexpr bool is_static = false;
    static constexpr index_t static_value = dynamic_extent;
    index_t n = 0;
    constexpr extent() = default;
    constexpr explicit extent(index_t v) : n(v) {}
    constexpr index_t value() const { return n; }
};

// Memory spaces. Host memory is what host code may read and write directly.
struct host_memory {
    static constexpr bool host_accessible = true;
};

template <class M>
concept memory_space = requires { { M::host_accessible } -> std::convertible_to<bool>; };

template <class M>
concept host_accessible_memory = memory_space<M> && M::host_accessible;

struct policy_access;

// A row-major [rows x cols] matrix with a row stride, in memory space M, element type T.
template <class T, memory_space M, index_t Cols = dynamic_extent>
class matrix_view {
public:
    using element_type = T;
    using memory = M;
    static constexpr index_t static_cols = Cols;

    constexpr matrix_view() = default;
    constexpr matrix_view(T* data, index_t rows, index_t cols, index_t stride)
        : data_(data), rows_(rows), cols_(cols), stride_(stride) {}
    // Adding const, or forgetting a static extent; a dynamic width becomes static only by with_cols<W>().
    template <class U, index_t C>
        requires std::convertible_to<U (*)[], T (*)[]> && (Cols == dynamic_extent || C == Cols)
    constexpr matrix_view(const matrix_view<U, M, C>& other)
        : matrix_view(other.data_, other.rows(), other.cols(), other.stride()) {}

    constexpr index_t rows() const { return rows_; }
    constexpr index_t cols() const { return cols_.value(); }
    constexpr index_t stride() const { return stride_; }
    constexpr bool empty() const { return rows_ == 0 || cols() == 0; }

    // Host memory only: element access.
    T* data() const requires host_accessible_memory<M> { return data_; }
    T* row(index_t r) const requires host_accessible_memory<M> { return data_ + r * stride_; }
    T& operator()(index_t r, index_t c) const requires host_accessible_memory<M> { return data_[r * stride_ + c]; }

    // Sub-views (no access, any memory space).
    constexpr matrix_view<T, M> first_cols(index_t w) const { return {data_, rows_, w, stride_}; }
    template <index_t W>
    constexpr matrix_view<T, M, W> first_cols() const { return {data_, rows_, W, stride_}; }
    constexpr matrix_view<T, M> cols_range(index_t begin, index_t end) const { return {data_ + begin, rows_, end - begin, stride_}; }
    constexpr matrix_view rows_range(index_t begin, index_t end) const {
        return matrix_view(data_ + begin * stride_, end - begin, cols(), stride_);
    }
    // The same memory with a static column extent (the caller knows cols() == W).
    template <index_t W>
    constexpr matrix_view<T, M, W> with_cols() const { return {data_, rows_, W, stride_}; }
    constexpr matrix_view<const T, M, Cols> as_const() const { return *this; }

private:
    template <class, memory_space, index_t>
    friend class matrix_view;
    friend struct policy_access;
    T* data_ = nullptr;
    index_t rows_ = 0;
    [[no_unique_address]] extent<Cols> cols_{};
    index_t stride_ = 0;
};

// A contiguous vector of n elements in memory space M.
template <class T, memory_space M>
class vector_view {
public:
    using element_type = T;
    using memory = M;

    constexpr vector_view() = default;
    constexpr vector_view(T* data, index_t size) : data_(data), size_(size) {}
    template <class U>
        requires std::convertible_to<U (*)[], T (*)[]>
    constexpr vector_view(const vector_view<U, M>& other) : data_(other.data_), size_(other.size()) {}
    // Host spans are host views.
    template <class U, std::size_t E>
        requires host_accessible_memory<M> && std::convertible_to<U (*)[], T (*)[]>
    constexpr vector_view(std::span<U, E> s) : data_(s.data()), size_(static_cast<index_t>(s.size())) {}

    constexpr index_t size() const { return size_; }
    constexpr bool empty() const { return size_ == 0; }
    T* data() const requires host_accessible_memory<M> { return data_; }
    T& operator[](index_t i) const requires host_accessible_memory<M> { return data_[i]; }
    std::span<T> span() const requires host_accessible_memory<M> { return {data_, static_cast<std::size_t>(size_)}; }

    constexpr vector_view subview(index_t begin, index_t count) const { return {data_ + begin, count}; }
    constexpr vector_view first(index_t count) const { return {data_, count}; }
    // The elements seen as a row-major matrix (cols == stride).
    constexpr matrix_view<T, M> as_matrix(index_t rows, index_t cols) const { return {data_, rows, cols, cols}; }
    // With column extent C: static (cols must equal C) or dynamic.
    template <index_t C>
    constexpr matrix_view<T, M, C> as_matrix_of(index_t rows, index_t cols) const { return {data_, rows, cols, cols}; }

private:
    template <class, memory_space>
    friend class vector_view;
    friend struct policy_access;
    T* data_ = nullptr;
    index_t size_ = 0;
};

// The pointer behind a view, for the implementation of a backend policy's ops and buffers in its
// own memory space. Layers, models, sessions and training never call this.
struct policy_access {
    template <class T, class M, index_t C>
    static T* data(const matrix_view<T, M, C>& v) { return v.data_; }
    template <class T, class M>
    static T* data(const vector_view<T, M>& v) { return v.data_; }
};

template <class T, index_t Cols = dynamic_extent>
using host_matrix = matrix_view<T, host_memory, Cols>;
template <class T>
using host_vector = vector_view<T, host_memory>;

}  // namespace vwt
