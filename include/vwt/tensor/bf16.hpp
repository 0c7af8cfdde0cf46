// vwt::bf16: the bfloat16 storage type (the top 16 bits of an IEEE float), for weights kept in
// half the bytes of float and widened to float where they are used.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace vwt {

struct bf16 {
    std::uint16_t bits = 0;

    bf16() = default;
    // Rounds to the nearest bfloat16, ties to even; NaN stays a (quiet) NaN, infinities stay.
    explicit bf16(float f) : bits(round(f)) {}
    static constexpr bf16 from_bits(std::uint16_t b) {
        bf16 h;
        h.bits = b;
        return h;
    }
    explicit operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

    friend constexpr bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }

private:
    static std::uint16_t round(float f) {
        const auto x = std::bit_cast<std::uint32_t>(f);
        if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40);
        return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
};
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);

}  // namespace vwt
