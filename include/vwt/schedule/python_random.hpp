// A constexpr Mersenne Twister seeded and drawn exactly as CPython's random.Random(int), so that
// the authors' seeded width permutations (random.Random(seed).shuffle) are reproduced bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>

namespace vwt::detail {

class python_random {
public:
    // random.Random(seed) for a non-negative integer seed: init_by_array over its 32-bit words.
    constexpr explicit python_random(std::uint64_t seed) {
        std::array<std::uint32_t, 2> key{static_cast<std::uint32_t>(seed),
                                         static_cast<std::uint32_t>(seed >> 32)};
        const std::size_t key_length = (seed >> 32) != 0 ? 2 : 1;
        init_by_array(std::span<const std::uint32_t>(key.data(), key_length));
    }

    constexpr std::uint32_t next_u32() {
        if (index_ >= n) twist();
        std::uint32_t y = state_[index_++];
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c5680u;
        y ^= (y << 15) & 0xefc60000u;
        y ^= y >> 18;
        return y;
    }

    // random.getrandbits(k) for 1 <= k <= 32.
    constexpr std::uint32_t bits(int k) { return next_u32() >> (32 - k); }

    // random._randbelow(upper): rejection sampling on bit_length(upper) bits.
    constexpr std::uint32_t below(std::uint32_t upper) {
        int k = 0;
        for (std::uint32_t u = upper; u != 0; u >>= 1) ++k;
        std::uint32_t r = bits(k);
        while (r >= upper) r = bits(k);
        return r;
    }

    // random.shuffle: Fisher-Yates from the back.
    template <class T>
    constexpr void shuffle(std::span<T> values) {
        for (std::size_t i = values.size(); i-- > 1;) {
            const std::size_t j = below(static_cast<std::uint32_t>(i + 1));
            std::swap(values[i], values[j]);
        }
    }

private:
    static constexpr std::size_t n = 624;
    static constexpr std::size_t m = 397;

    constexpr void init_genrand(std::uint32_t s) {
        state_[0] = s;
        for (std::size_t i = 1; i < n; ++i)
            state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
        index_ = n;
    }

    constexpr void init_by_array(std::span<const std::uint32_t> key) {
        init_genrand(19650218u);
        std::size_t i = 1, j = 0;
        for (std::size_t k = n > key.size() ? n : key.size(); k > 0; --k) {
            state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] +
                        static_cast<std::uint32_t>(j);
            ++i;
            ++j;
            if (i >= n) { state_[0] = state_[n - 1]; i = 1; }
            if (j >= key.size()) j = 0;
        }
        for (std::size_t k = n - 1; k > 0; --k) {
            state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) -
                        static_cast<std::uint32_t>(i);
            ++i;
            if (i >= n) { state_[0] = state_[n - 1]; i = 1; }
        }
        state_[0] = 0x80000000u;
    }

    constexpr void twist() {
        for (std::size_t k = 0; k < n; ++k) {
            const std::uint32_t y = (state_[k] & 0x80000000u) | (state_[(k + 1) % n] & 0x7fffffffu);
            state_[k] = state_[(k + m) % n] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        index_ = 0;
    }

    std::array<std::uint32_t, n> state_{};
    std::size_t index_ = n;
};

}  // namespace vwt::detail
