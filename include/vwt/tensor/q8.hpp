// vwt::q8_block: an 8-bit weight format with a scale per block of 32 weights (the layout of
// llama.cpp's q8_0, with a float scale): weight i of a block is scale * q[i]. A tensor stored in
// q8 is a sequence of blocks, so its rows must hold a multiple of 32 weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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
        const q8_block b = quantize_or_nan(x);
        if (std::isnan(b.scale)) vwt::detail::fail("q8 quantization: a block holds a non-finite weight");
        return b;
    }
    // quantize's rule without its error, for activations quantized on the fly (q8 decode): a block
    // holding a non-finite value gets a NaN scale, so every product with it is NaN, as in float.
    static q8_block quantize_or_nan(const float* x) {
        float amax = 0.0f;
        bool finite = true;
        for (index_t i = 0; i < size; ++i) amax = std::max(amax, std::abs(x[i])), finite = finite && std::isfinite(x[i]);
        q8_block b;
        if (!finite) b.scale = std::numeric_limits<float>::quiet_NaN();
        if (!finite || amax == 0.0f) return b;
        b.scale = amax / 127.0f;
        for (index_t i = 0; i < size; ++i)
            b.q[i] = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[i] / b.scale), -127.0f, 127.0f));
        return b;
    }
    float operator[](index_t i) const { return scale * static_cast<float>(q[i]); }
};
static_assert(sizeof(q8_block) == 36 && std::is_trivially_copyable_v<q8_block>);

}  // namespace vwt
