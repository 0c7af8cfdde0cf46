// An RAII allocation in one memory space: what a backend policy's `buffer<T>` is built from. The
// policy supplies an allocator (how to get and release memory, and what a new buffer holds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "../error.hpp"
#include "../tensor/view.hpp"

namespace vwt {

// Allocator: static U* allocate<U>(index_t n) and static void deallocate<U>(U*, index_t n).
template <class U, memory_space M, class Allocator>
class owning_buffer {
public:
    using element_type = U;
    using memory = M;

    owning_buffer() = default;
    explicit owning_buffer(index_t n) : size_(n) {
        if (n < 0) detail::fail("buffer: negative size ", n);
        if (n > 0) data_ = Allocator::template allocate<U>(n);
    }
    owning_buffer(owning_buffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    owning_buffer& operator=(owning_buffer&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }
    owning_buffer(const owning_buffer&) = delete;
    owning_buffer& operator=(const owning_buffer&) = delete;
    ~owning_buffer() { release(); }

    index_t size() const { return size_; }
    vector_view<U, M> view() { return {data_, size_}; }
    vector_view<const U, M> view() const { return {data_, size_}; }
    // The first rows * cols elements as a row-major matrix.
    matrix_view<U, M> matrix(index_t rows, index_t cols) {
        check(rows * cols);
        return {data_, rows, cols, cols};
    }
    matrix_view<const U, M> matrix(index_t rows, index_t cols) const {
        check(rows * cols);
        return {data_, rows, cols, cols};
    }

private:
    void check(index_t n) const {
        if (n > size_) detail::fail("buffer: a view of ", n, " elements over a buffer of ", size_);
    }
    void release() {
        if (data_) Allocator::template deallocate<U>(data_, size_);
        data_ = nullptr;
        size_ = 0;
    }
    U* data_ = nullptr;
    index_t size_ = 0;
};

// Host memory on 64-byte boundaries, value-initialised: a vectorised reduction peels its unaligned
// head, so its order of additions (and its rounding) depends on where the array starts; buffers
// that always start on a 64-byte boundary (the widest packet, AVX-512) make results independent of
// the heap.
//
// On Linux, an allocation of huge_page_threshold bytes or more (a model's weights, a KV cache, a
// training step's workspace) starts on a 2 MiB boundary and asks the kernel for transparent huge
// pages (madvise MADV_HUGEPAGE; the kernel may decline, and /sys/kernel/mm/transparent_hugepage
// set to "never" turns it off). Streaming a buffer from memory through 4 KiB pages ran at 19-22
// GB/s on a 2-core Xeon VM against 30-31 GB/s through 2 MiB pages: every 4 KiB page costs a TLB
// walk and stops the hardware prefetcher, and decode streams every weight once per token.
struct aligned_host_allocator {
    static constexpr std::size_t alignment = 64;
    static constexpr std::size_t huge_page = std::size_t{2} << 20;
    static constexpr std::size_t huge_page_threshold = std::size_t{4} << 20;
    static constexpr std::size_t alignment_of([[maybe_unused]] std::size_t bytes) {
#if defined(__linux__)
        if (bytes >= huge_page_threshold) return huge_page;
#endif
        return alignment;
    }
    // n value-initialized elements
    template <class U>
    static U* allocate(index_t n) {
        U* u = allocate_storage<U>(n);
        for (index_t i = 0; i < n; ++i) new (u + i) U();
        return u;
    }
    // Storage for n elements, none constructed (what std_allocator hands a container, which
    // constructs its elements itself)
    template <class U>
    static U* allocate_storage(index_t n) {
        if (static_cast<std::size_t>(n) > static_cast<std::size_t>(-1) / sizeof(U)) throw std::bad_array_new_length();
        const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(U);
        void* p = ::operator new(bytes, std::align_val_t{alignment_of(bytes)});
#if defined(__linux__)
        // before the first touch, so that the pages are huge from their first fault
        if (alignment_of(bytes) == huge_page) ::madvise(p, bytes / 4096 * 4096, MADV_HUGEPAGE);  // advice: failure changes nothing
#endif
        return static_cast<U*>(p);
    }
    template <class U>
    static void deallocate(U* p, index_t n) {
        ::operator delete(p, std::align_val_t{alignment_of(static_cast<std::size_t>(n) * sizeof(U))});
    }
};

// A standard-library allocator (std::vector's) over one of the allocators above, for host scratch
// that grows as it is used: std_allocator<float> puts a vector's elements on a cache line (or, from
// 4 MiB, on huge pages) like the policy's own buffers.
template <class T, class Allocator = aligned_host_allocator>
struct std_allocator {
    using value_type = T;
    std_allocator() = default;
    template <class U>
    std_allocator(const std_allocator<U, Allocator>&) noexcept {}
    // Storage only, where the allocator offers it: the container constructs the elements (so a
    // vector's resize zeroes new floats once, not twice)
    T* allocate(std::size_t n) {
        if constexpr (requires { Allocator::template allocate_storage<T>(index_t{}); })
            return Allocator::template allocate_storage<T>(static_cast<index_t>(n));
        else
            return Allocator::template allocate<T>(static_cast<index_t>(n));
    }
    void deallocate(T* p, std::size_t n) noexcept { Allocator::template deallocate<T>(p, static_cast<index_t>(n)); }
    template <class U>
    bool operator==(const std_allocator<U, Allocator>&) const noexcept {
        return true;
    }
};

}  // namespace vwt
