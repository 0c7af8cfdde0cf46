// The weight formats a policy may store parameters in (float, vwt::bf16, vwt::q8_block), and what
// code that holds weights of any of them needs: how many weights one stored item holds, weight i
// of a tensor, and float parameters converted to a format.
#pragma once

#include <span>
#include <type_traits>
#include <vector>

#include "../error.hpp"
#include "bf16.hpp"
#include "q8.hpp"
#include "view.hpp"

namespace vwt {

// How many weights one stored item of type E holds: 32 for a q8 block, 1 for a scalar.
template <class E>
inline constexpr index_t elements_per_item = std::is_same_v<std::remove_const_t<E>, q8_block> ? q8_block::size : 1;

// Weight i of a tensor stored as items of E: a float for bf16 and q8, the element itself otherwise.
template <class E>
inline auto weight_at(const E* items, index_t i) {
    using U = std::remove_const_t<E>;
    if constexpr (std::is_same_v<U, q8_block>) return items[i / q8_block::size][i % q8_block::size];
    else if constexpr (std::is_same_v<U, bf16>) return static_cast<float>(items[i]);
    else return items[i];
}

// Float parameters in the weight format W: a copy (float), each rounded (bf16), or quantized
// block by block (q8: the size must be a multiple of 32; a model checks each of its tensors when it
// binds them).
template <class W>
std::vector<W> convert_elements(std::span<const float> from) {
    std::vector<W> out;
    if constexpr (std::is_same_v<W, q8_block>) {
        if (from.size() % q8_block::size != 0)
            vwt::detail::fail("q8 quantization: ", from.size(), " weights are not a whole number of blocks of ", q8_block::size);
        out.reserve(from.size() / q8_block::size);
        for (std::size_t i = 0; i < from.size(); i += q8_block::size) out.push_back(q8_block::quantize(from.data() + i));
    } else {
        out.reserve(from.size());
        for (float f : from) out.push_back(W(f));
    }
    return out;
}

}  // namespace vwt
