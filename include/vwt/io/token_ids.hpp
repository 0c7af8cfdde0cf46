// Token ids written as text ("72,105,33"): the parser behind `vwt logits --tokens`, strict about
// every element so that a typo is an error naming its position, never a silent id 0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../error.hpp"

namespace vwt::io {

// Comma-separated decimal ids, each in [0, vocab); spaces around an id are allowed. `what` prefixes
// every message (e.g. "--tokens").
inline std::vector<int> parse_token_ids(std::string_view text, int vocab, std::string_view what) {
    std::vector<int> ids;
    const auto is_space = [](char c) { return c == ' ' || c == '\t'; };
    std::size_t begin = 0;
    for (std::size_t position = 0;; ++position) {
        const std::size_t comma = std::min(text.find(',', begin), text.size());
        std::string_view item = text.substr(begin, comma - begin);
        while (!item.empty() && is_space(item.front())) item.remove_prefix(1);
        while (!item.empty() && is_space(item.back())) item.remove_suffix(1);
        if (item.empty()) {
            if (text.find_first_not_of(" \t") == std::string_view::npos) vwt::detail::fail(what, ": no token ids given");
            vwt::detail::fail(what, ": empty id at position ", position);
        }
        const bool negative = item.front() == '-';
        const std::string_view digits = negative ? item.substr(1) : item;
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
            vwt::detail::fail(what, ": '", std::string(item.substr(0, 32)), "' at position ", position, " is not a token id");
        std::int64_t value = 0;
        for (char c : digits) {
            value = value * 10 + (c - '0');
            if (value > vocab) break;  // already outside; stop before it can overflow
        }
        if (negative && value != 0) vwt::detail::fail(what, ": id -", std::string(digits.substr(0, 32)), " at position ", position, " is negative");
        if (value >= vocab)
            vwt::detail::fail(what, ": id ", std::string(digits.substr(0, 32)), " at position ", position,
                         " is outside the vocabulary [0, ", vocab, ")");
        ids.push_back(static_cast<int>(value));
        if (comma == text.size()) break;
        begin = comma + 1;
    }
    return ids;
}

}  // namespace vwt::io
