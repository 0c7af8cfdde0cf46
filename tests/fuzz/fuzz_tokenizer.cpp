// libFuzzer target: BPE encode and decode of arbitrary bytes with a small byte-level tokenizer
// (cl100k's pre-tokenizer pattern, a few merges, two added tokens). Every id must be a token,
// decode(encode(x)) must give x made valid UTF-8 back, and the streaming decoder the same bytes.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <vwt/io/bpe_tokenizer.hpp>

namespace {

const vwt::io::bpe_tokenizer& tokenizer() {
    static const auto t = [] {
        nlohmann::json vocab = nlohmann::json::object();
        const auto cp = vwt::io::bpe_detail::byte_code_points();
        for (int b = 0; b < 256; ++b) {
            std::string s;
            vwt::io::bpe_detail::append_utf8(s, cp[static_cast<std::size_t>(b)]);
            vocab[s] = b;
        }
        const std::vector<std::pair<std::string, std::string>> merges{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"}, {"1", "2"}};
        nlohmann::json list = nlohmann::json::array();
        for (const auto& [a, b] : merges) {
            if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
            list.push_back(a + " " + b);
        }
        const nlohmann::json j = {
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", list}}},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"},
                 {"pattern", {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                 {"behavior", "Isolated"}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"added_tokens", {{{"id", 400}, {"content", "<|eot|>"}}, {{"id", 401}, {"content", "<|eo"}}}}};
        return vwt::io::bpe_tokenizer(j, "fuzz");
    }();
    return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto& t = tokenizer();
    const auto ids = t.encode(text);
    for (int id : ids)
        if (id < 0 || id >= t.vocab_size()) __builtin_trap();
    const auto back = t.decode(ids);
    if (back != vwt::report::valid_utf8(text)) __builtin_trap();
    vwt::io::bpe_tokenizer::stream_decoder stream(t);
    std::string streamed;
    for (int id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed != back) __builtin_trap();
    return 0;
}
