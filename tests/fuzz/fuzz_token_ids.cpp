// libFuzzer target: the token-id list parser behind `vwt logits --tokens`. The first byte picks
// the vocabulary size; every id returned must lie inside it.
#include <cstdint>
#include <string_view>

#include <vwt/io/token_ids.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const int vocab = 1 + data[0] * 1000;
    try {
        const auto ids = vwt::io::parse_token_ids(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), vocab, "fuzz");
        for (int id : ids)
            if (id < 0 || id >= vocab) __builtin_trap();
    } catch (const vwt::error&) {
    }
    return 0;
}
