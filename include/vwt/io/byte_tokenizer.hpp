// The byte-level tokenizer: ids 0..255 are the bytes of UTF-8 text, the config's special ids
// (bos, eos, pad) sit above them. Decoding drops special ids.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "../error.hpp"

namespace vwt::io {

class byte_tokenizer {
public:
    explicit byte_tokenizer(int vocab) : vocab_(vocab) {
        if (vocab < 256) vwt::detail::fail("byte tokenizer: vocab ", vocab, " is smaller than the 256 byte ids");
    }
    std::vector<int> encode(std::string_view text) const {
        std::vector<int> ids;
        ids.reserve(text.size());
        for (unsigned char c : text) ids.push_back(c);
        return ids;
    }
    std::string decode(const std::vector<int>& ids) const {
        std::string out;
        for (int id : ids) append(out, id);
        return out;
    }
    // Appends one token's bytes (none for a special id).
    void append(std::string& out, int id) const {
        if (id < 0 || id >= vocab_) vwt::detail::fail("byte tokenizer: id ", id, " is outside the vocabulary [0, ", vocab_, ")");
        if (id < 256) out.push_back(static_cast<char>(id));
    }

private:
    int vocab_;
};

}  // namespace vwt::io
