// The BPE tokenizer of tokenizer.json files against PyPI `tokenizers` (the oracle,
// tests/tokenizer/make_cases.py): four tokenizers it trained (GPT-2's ByteLevel pattern,
// cl100k's Split pattern, tiktoken's possessive cl100k pattern, ByteLevel with add_prefix_space), the ids it gives for a whole corpus
// and for adversarial strings (emoji, combining marks, CJK, invalid UTF-8, long runs of spaces and
// digits, special tokens inside text); decode(encode(x)) == x; the streaming decoder never emits
// part of a character; unsupported files are errors naming what is unsupported.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <vwt/io/bpe_tokenizer.hpp>
#include <vwt/vwt.hpp>

using Catch::Matchers::Contains;

namespace {

const std::filesystem::path cases_dir = VWT_TOKENIZER_CASES;

std::string from_hex(const std::string& hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
}

nlohmann::json read_json(const std::filesystem::path& p) {
    std::ifstream f(p);
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
}

// The text the oracle trained on and encoded (tinyshakespeare and this project's README).
std::string corpus_text() {
    const auto bytes = vwt::io::read_file_bytes(cases_dir / "corpus.txt");
    return {bytes.begin(), bytes.end()};
}

}  // namespace

TEST_CASE("encode equals tokenizers on adversarial strings, decode inverts it, streaming never splits a character") {
    const auto cases = read_json(cases_dir / "cases.json");
    for (const char* name : {"gpt2", "cl100k", "tiktoken", "prefix"}) {
        CAPTURE(name);
        const auto tok = vwt::io::bpe_tokenizer::from_file(cases_dir / (std::string(name) + ".json"));
        for (const auto& c : cases) {
            const auto text = from_hex(c["hex"].get<std::string>());
            CAPTURE(text.substr(0, 60));
            const auto want = c[name].get<std::vector<int>>();
            const auto ids = tok.encode(text);
            CHECK(ids == want);
            if (c["valid"].get<bool>() && std::string(name) != "prefix") CHECK(tok.decode(ids) == text);
            vwt::io::bpe_tokenizer::stream_decoder stream(tok);
            std::string streamed;
            bool whole = true;
            for (int id : ids) {
                const auto piece = stream.push(id);
                // a piece of valid text is valid UTF-8 by itself: no character is split across pieces
                if (c["valid"].get<bool>()) whole = whole && vwt::report::valid_utf8(piece) == piece;
                streamed += piece;
            }
            streamed += stream.finish();
            CHECK(whole);
            CHECK(streamed == tok.decode(ids));
        }
    }
}

TEST_CASE("encode equals tokenizers on the whole corpus, and decode gives the corpus back") {
    const auto text = corpus_text();
    for (const char* name : {"gpt2", "cl100k", "tiktoken", "prefix"}) {
        CAPTURE(name);
        const auto tok = vwt::io::bpe_tokenizer::from_file(cases_dir / (std::string(name) + ".json"));
        const auto bytes = vwt::io::read_file_bytes(cases_dir / (std::string(name) + ".corpus.u32"));
        std::vector<int> want(bytes.size() / 4);
        std::memcpy(want.data(), bytes.data(), bytes.size());
        const auto ids = tok.encode(text);
        REQUIRE(ids.size() == want.size());
        CHECK(ids == want);
        if (std::string(name) != "prefix") CHECK(tok.decode(ids) == text);
        // in pieces of ~4 kB (vwt tokenize and vwt train --tokenizer): the same ids, progress to the end
        std::size_t done = 0;
        CHECK(vwt::io::encode_in_pieces(tok, text, [&](std::size_t n) { done = n; }, 4096) == want);
        CHECK(done == text.size());
    }
}

TEST_CASE("special tokens: ids, text, and the vocabulary size") {
    const auto tok = vwt::io::bpe_tokenizer::from_file(cases_dir / "gpt2.json");
    CHECK(tok.vocab_size() == 2000);
    REQUIRE(tok.token_id("<|endoftext|>").has_value());
    const int eot = *tok.token_id("<|endoftext|>");
    CHECK(tok.encode("<|endoftext|>") == std::vector<int>{eot});
    CHECK(tok.decode(std::vector<int>{eot}) == "<|endoftext|>");
    CHECK_THROWS_WITH(tok.decode(std::vector<int>{2000}), Contains("id 2000 is not a token"));
    CHECK_THROWS_WITH(tok.decode(std::vector<int>{-1}), Contains("id -1 is not a token"));
}

TEST_CASE("tokenizer.json features vwt does not implement are errors naming them") {
    const auto good = read_json(cases_dir / "gpt2.json");
    const auto rejects = [&](const auto& change, const std::string& message) {
        auto j = good;
        change(j);
        CAPTURE(message);
        CHECK_THROWS_WITH(vwt::io::bpe_tokenizer(j, "tokenizer 't.json'"), Contains("tokenizer 't.json'") && Contains(message));
    };
    rejects([](auto& j) { j["model"]["type"] = "WordPiece"; }, "model 'WordPiece' is not implemented");
    rejects([](auto& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback is true");
    rejects([](auto& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix");
    rejects([](auto& j) { j["model"]["dropout"] = 0.1; }, "model.dropout is set");
    rejects([](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer 'NFC' is not implemented");
    rejects([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder 'WordPiece' is not implemented");
    rejects([](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer 'Whitespace' is not implemented");
    rejects([](auto& j) { j["pre_tokenizer"] = nullptr; }, "no pre_tokenizer");
    rejects([](auto& j) { j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s"}}}, {"behavior", "Isolated"}}; },
            "has no ByteLevel step");
    rejects([](auto& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L}"}}}, {"behavior", "Isolated"}}}}}; },
            "does not compile");
    rejects([](auto& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Removed"}}}}}; },
            "Split behavior 'Removed' is not implemented");
    rejects([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }, "added token '<|endoftext|>': lstrip is not implemented");
    rejects([](auto& j) { j["model"]["merges"].push_back({"zzzq", "t"}); }, "'zzzq' is not in the vocabulary");
    rejects([](auto& j) { j["model"]["merges"][0] = "a b c"; }, "merge 0 'a b c' is not two tokens");
    rejects([](auto& j) { j["model"]["vocab"].erase("Ġ"); }, "no token for byte 32");
    rejects([](auto& j) { j["model"]["vocab"]["x"] = -3; }, "token 'x' has id -3");
    rejects([](auto& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "\\d{2,3}+"}}}, {"behavior", "Isolated"}}}}}; },
            "interval {2,3}+");
    CHECK_THROWS_WITH(vwt::io::bpe_tokenizer::from_file(cases_dir / "missing.json"), Contains("missing.json") && Contains("no such file"));
}

// tokenizers reads patterns in Oniguruma's Ruby syntax: an interval followed by + repeats the
// interval (tiktoken's \p{N}{1,3}+ takes any run of digits there), other possessive quantifiers
// are possessive as in PCRE2; braces inside \p{...} and classes are not intervals.
TEST_CASE("patterns are read as tokenizers reads them") {
    using vwt::io::bpe_detail::onig_to_pcre2;
    CHECK(onig_to_pcre2(R"(\p{N}{1,3}+| ?\p{L}++|[^\s\p{L}]?+x)", "t") == R"(\p{N}+| ?\p{L}++|[^\s\p{L}]?+x)");
    CHECK(onig_to_pcre2(R"(a{1}+b{2,5}c[{1,2}+]\{1,2}+)", "t") == R"(a+b{2,5}c[{1,2}+]\{1,2}+)");
    CHECK(onig_to_pcre2(R"([]{1,2}+]x)", "t") == R"([]{1,2}+]x)");
}
