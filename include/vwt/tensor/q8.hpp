// vwt::q8_block: an 8-bit weight format with a scale per block of 32 weights (the layout of
// llama.cpp's q8_0, with a float scale): weight i of a block is scale * q[i]. A tensor stored in
// q8 is a sequence of blocks, so its rows must hold a multiple of 32 weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../error.hpp"
#include "view.hpp"

namespace vwt {

struct q8_block {
    static constexpr index_t size = 32;
    float scale = 0.0f;
    std::int8_t q[size] = {};

    // scale = max |x| / 127 and q = x / scale rounded to the nearest integer (ties to even), so the
    // largest weight of the block is exact and every other one is within scale / 2.
    static q8_block quantize(const float* x) {
        float amax = 0.0f;
        for (index_t i = 0; i < size; ++i) amax = std::max(amax, std::abs(x[i]));
        q8_block b;
        if (!(amax > 0.0f) || !std::isfinite(amax)) {
            if (!std::isfinite(amax)) vwt::detail::fail("q8 quantization: a block holds a non-finite weight");
            return b;
        }
        b.scale = amax / 127.0f;
        for (index_t i = 0; i < size; ++i)
            b.q[i] = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[i] / b.scale), -127.0f, 127.0f));
        return b;
    }
    float operator[](index_t i) const { return scale * static_cast<float>(q[i]); }
};
static_assert(sizeof(q8_block) == 36 && std::is_trivially_copyable_v<q8_block>);

}  // namespace vwt
