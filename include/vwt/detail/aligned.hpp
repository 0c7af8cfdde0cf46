// Host memory aligned to a cache line: a std::vector with an allocator that starts every buffer
// on a 64-byte boundary, so vectorised reductions see the same alignment run after run.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace vwt {

// A vectorised sum over an array of unknown alignment peels its unaligned head, so its order of
// additions (and its rounding) depends on where the array starts. Buffers that always start on a
// 64-byte boundary (the widest packet: AVX-512) make every result independent of the heap.
inline constexpr std::size_t buffer_alignment = 64;

template <class T>
struct aligned_allocator {
    using value_type = T;
    aligned_allocator() = default;
    template <class U>
    constexpr aligned_allocator(const aligned_allocator<U>&) noexcept {}

    T* allocate(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{buffer_alignment}));
    }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{buffer_alignment}); }

    template <class U>
    friend constexpr bool operator==(const aligned_allocator&, const aligned_allocator<U>&) noexcept { return true; }
};

template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

}  // namespace vwt
