// The noise of the gaussian resize: a standard normal per (key, position, column) from a
// counter-based hash (splitmix64, then Box-Muller), so every policy -- the CPU's, the reference's,
// a CUDA kernel -- draws the same values, a token's noise does not depend on its row in a batch,
// and a cached decode equals the full forward. docs/semantics-decisions.md gives the formula.
#pragma once

#include <cstdint>
#include <math.h>

#if defined(__CUDACC__)
#define VWT_HOST_DEVICE __host__ __device__
#else
#define VWT_HOST_DEVICE
#endif

namespace vwt::detail {

VWT_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The key of one resize: the model's seed, a salt (0 in inference; the step in training, so each
// step draws anew) and the resize's place (layer i: i; the head: the number of layers).
VWT_HOST_DEVICE inline std::uint64_t gaussian_noise_key(std::uint64_t seed, std::uint64_t salt, int place) {
    return splitmix64(splitmix64(splitmix64(seed) ^ salt) ^ static_cast<std::uint64_t>(place));
}

// A standard normal value for the token at `position` and the stream column `column`.
VWT_HOST_DEVICE inline double gaussian_noise(std::uint64_t key, int position, int column) {
    const std::uint64_t counter = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(position)) << 32) |
                                  static_cast<std::uint32_t>(column);
    const std::uint64_t a = splitmix64(key ^ counter), b = splitmix64(a);
    const double u1 = static_cast<double>((a >> 11) + 1) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;        // [0, 1)
    return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

}  // namespace vwt::detail
