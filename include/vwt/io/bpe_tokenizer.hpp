// vwt::io::bpe_tokenizer: the byte-level BPE of a Hugging Face tokenizer.json (GPT-2, cl100k-style
// and Llama-3-style files), encode and decode, and a streaming decoder that never splits a UTF-8
// character. Needs PCRE2 (link vwt::tokenizer): the pre-tokenizers' patterns use Unicode
// properties (\p{L}, \p{N}) and lookahead, which std::regex does not have.
//
// What a file may hold, and what is refused with an error naming the field:
//  - model: BPE with vocab and merges ("a b" strings or [a, b] pairs), ignore_merges; no dropout,
//    continuing_subword_prefix, end_of_word_suffix or byte_fallback; every byte has a token;
//  - pre_tokenizer: ByteLevel (use_regex: GPT-2's pattern; add_prefix_space), or a Sequence of
//    Split (a Regex or String pattern, behavior Isolated, not inverted) and ByteLevel;
//  - normalizer: none; decoder: ByteLevel or none; added_tokens matched in the text, longest
//    first (no single_word, lstrip or rstrip); post_processor ignored: encode adds no special
//    tokens (the caller adds BOS where its model wants one).
// Text that is not valid UTF-8 is encoded as Python's bytes.decode("utf-8", "replace") makes it:
// one U+FFFD per maximal ill-formed subpart.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../error.hpp"
#include "../report/text.hpp"
#include "json.hpp"
#include "safetensors.hpp"

namespace vwt::io {

namespace bpe_detail {

// GPT-2's printable stand-ins for bytes: printable Latin-1 bytes stand for themselves, the other
// 68 take code points 256, 257, ... in byte order.
inline std::array<std::uint32_t, 256> byte_code_points() {
    std::array<std::uint32_t, 256> cp{};
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        cp[b] = printable ? b : next++;
    }
    return cp;
}

inline void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

// The code points of valid UTF-8 text.
inline std::vector<std::uint32_t> code_points(std::string_view s) {
    std::vector<std::uint32_t> out;
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; k < n && i + static_cast<std::size_t>(k) < s.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
        out.push_back(cp);
        i += static_cast<std::size_t>(n);
    }
    return out;
}

// Bytes of UTF-8 at the start of `s` that form a complete character, or 0 if `s` holds only the
// start of one (a lead byte and valid continuations, fewer than it announces).
inline std::size_t pending_tail(std::string_view s) {
    for (std::size_t back = 1; back <= std::min<std::size_t>(3, s.size()); ++back) {
        const auto c = static_cast<unsigned char>(s[s.size() - back]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation: look further back
        const std::size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        return need > back ? back : 0;  // the lead byte's character is incomplete: hold it back
    }
    return 0;
}

// A tokenizer.json pattern as PCRE2 must read it to match what `tokenizers` matches. `tokenizers`
// runs patterns on Oniguruma with Ruby syntax, where `?+`, `*+` and `++` are possessive (as in
// PCRE2) but an interval followed by `+` is not: `X{1,3}+` is `(?:X{1,3})+`, one or more digits in
// tiktoken's `\p{N}{1,3}+`, where PCRE2 (and tiktoken itself) read a possessive `X{1,3}`. The
// interval `{1,m}+` becomes `+`; other intervals followed by `+` are refused.
inline std::string onig_to_pcre2(const std::string& p, const std::string& where) {
    std::string out;
    bool in_class = false;
    for (std::size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            out += c;
            out += p[++i];
            if ((p[i] == 'p' || p[i] == 'P') && i + 1 < p.size() && p[i + 1] == '{') {  // \p{...}: the braces are the escape's
                const auto close = p.find('}', i + 1);
                if (close == std::string::npos) return out + p.substr(i + 1);
                out += p.substr(i + 1, close - i);
                i = close;
            }
            continue;
        }
        if (in_class) {
            if (c == ']') in_class = false;
            out += c;
            continue;
        }
        if (c == '[') {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
            continue;
        }
        if (c == '{') {
            const auto close = p.find('}', i);
            const auto body = close == std::string::npos ? std::string() : p.substr(i + 1, close - i - 1);
            const bool interval = !body.empty() && body.find_first_not_of("0123456789,") == std::string::npos &&
                                  std::isdigit(static_cast<unsigned char>(body[0]));
            if (interval && close + 1 < p.size() && p[close + 1] == '+') {
                if (!body.starts_with("1,") && body != "1")
                    vwt::detail::fail(where, ": pattern interval {", body, "}+ (a repeated interval in tokenizers' Oniguruma syntax) is not implemented");
                out += '+';
                i = close + 1;
                continue;
            }
        }
        out += c;
    }
    return out;
}

// A compiled PCRE2 pattern (UTF, Unicode properties; JIT-compiled where PCRE2 has a JIT).
class regex {
public:
    regex(const std::string& source_pattern, const std::string& where) {
        const std::string pattern = onig_to_pcre2(source_pattern, where);
        int error = 0;
        PCRE2_SIZE offset = 0;
        code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error, &offset,
                                  nullptr));
        if (!code_) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof message);
            vwt::detail::fail(where, ": pattern '", pattern, "' does not compile at offset ", offset, ": ",
                              reinterpret_cast<const char*>(message));
        }
        pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // an interpreter match where there is no JIT
    }
    // Splits `text` (valid UTF-8) into the pattern's matches and the gaps between them (the
    // "Isolated" behaviour), calling piece(part) for each non-empty part in order.
    template <class F>
    void split(std::string_view text, F&& piece) const {
        std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(pcre2_match_data_create_from_pattern(code_.get(), nullptr),
                                                                                  &pcre2_match_data_free);
        if (!match) throw std::bad_alloc();
        std::size_t at = 0, gap = 0;
        while (at <= text.size()) {
            const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, PCRE2_NO_UTF_CHECK,
                                       match.get(), nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) vwt::detail::fail("tokenizer: pattern match failed (PCRE2 error ", rc, ")");
            const PCRE2_SIZE* v = pcre2_get_ovector_pointer(match.get());
            const std::size_t begin = v[0], end = v[1];
            if (end == begin) {  // an empty match: step over one character
                if (begin >= text.size()) break;
                at = begin + 1;
                while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
                continue;
            }
            if (begin > gap) piece(text.substr(gap, begin - gap));
            piece(text.substr(begin, end - begin));
            at = gap = end;
        }
        if (gap < text.size()) piece(text.substr(gap));
    }

private:
    struct code_free {
        void operator()(pcre2_code* c) const { pcre2_code_free(c); }
    };
    std::unique_ptr<pcre2_code, code_free> code_;
};

}  // namespace bpe_detail

// Bytes that arrive in pieces (a token's at a time), handed on as whole UTF-8 characters: push
// returns what is complete, holding back the start of a character whose other bytes have not come;
// finish returns what is held.
class utf8_assembler {
public:
    std::string push(std::string_view bytes) {
        pending_ += bytes;
        const std::size_t hold = bpe_detail::pending_tail(pending_);
        std::string out = pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return out;
    }
    std::string finish() { return std::exchange(pending_, {}); }

private:
    std::string pending_;
};

class bpe_tokenizer {
public:
    // GPT-2's pre-tokenizer pattern (ByteLevel with use_regex).
    static constexpr const char* gpt2_pattern =
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

    static bpe_tokenizer from_file(const std::filesystem::path& path) {
        const auto bytes = read_file_bytes(path, 1u << 30);
        const auto where = "tokenizer '" + path.string() + "'";
        return bpe_tokenizer(parse_json(std::span(reinterpret_cast<const char*>(bytes.data()), bytes.size()), where), where);
    }

    bpe_tokenizer(const nlohmann::json& j, std::string where) : where_(std::move(where)) {
        if (!j.is_object()) fail("not a JSON object");
        read_model(field(j, "model"));
        read_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json());
        if (j.contains("normalizer") && !j["normalizer"].is_null())
            fail("normalizer '", type_of(j["normalizer"]), "' is not implemented (vwt implements none)");
        if (j.contains("decoder") && !j["decoder"].is_null() && type_of(j["decoder"]) != "ByteLevel")
            fail("decoder '", type_of(j["decoder"]), "' is not implemented (vwt implements ByteLevel)");
        if (j.contains("added_tokens")) read_added(j["added_tokens"]);
    }

    // One more than the largest id (vocabulary and added tokens).
    int vocab_size() const { return static_cast<int>(bytes_.size()); }
    // Whether the pre-tokenizer puts a space in front of text that does not start with one.
    bool adds_prefix_space() const {
        return std::any_of(steps_.begin(), steps_.end(), [](const step& s) { return s.prefix_space; });
    }
    // The id of a token (a vocabulary entry or added token, as the file spells it).
    std::optional<int> token_id(std::string_view token) const {
        if (const auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
        if (const auto it = vocab_.find(token); it != vocab_.end()) return it->second;
        return std::nullopt;
    }

    std::vector<int> encode(std::string_view text) const {
        const std::string valid = report::valid_utf8(text);
        std::vector<int> ids;
        std::unordered_map<std::string, std::vector<int>, string_hash, std::equal_to<>> seen;  // this call's words (a corpus repeats them)
        const auto encode_text = [&](std::string_view part) {
            pre_tokenize(part, 0, [&](std::string_view word) {
                auto it = seen.find(word);
                if (it == seen.end()) it = seen.emplace(std::string(word), encode_word(word)).first;
                ids.insert(ids.end(), it->second.begin(), it->second.end());
            });
        };
        std::size_t from = 0;
        for (std::size_t at = 0; at < valid.size();) {
            const auto [length, id] = added_at(valid, at);
            if (length == 0) {
                ++at;
                continue;
            }
            if (at > from) encode_text(std::string_view(valid).substr(from, at - from));
            ids.push_back(id);
            at += length;
            from = at;
        }
        if (from < valid.size()) encode_text(std::string_view(valid).substr(from));
        return ids;
    }

    // The bytes of a sequence of ids (added tokens as their text).
    std::string decode(std::span<const int> ids) const {
        std::string out;
        for (int id : ids) out += bytes_of(id);
        return out;
    }
    // Whether `id` is one of the tokenizer's tokens (a model's vocabulary may be larger).
    bool has_token(int id) const { return id >= 0 && id < vocab_size() && present_[static_cast<std::size_t>(id)]; }
    // One token's bytes.
    const std::string& bytes_of(int id) const {
        if (!has_token(id))
            fail("id ", id, " is not a token (ids in [0, ", vocab_size(), "))");
        return bytes_[static_cast<std::size_t>(id)];
    }

    // Decodes tokens as they are generated: push(id) returns the text now complete, holding back
    // the start of a UTF-8 character that the next token finishes; finish() returns the rest.
    class stream_decoder {
    public:
        explicit stream_decoder(const bpe_tokenizer& t) : t_(&t) {}
        std::string push(int id) { return characters_.push(t_->bytes_of(id)); }
        std::string finish() { return characters_.finish(); }

    private:
        const bpe_tokenizer* t_;
        utf8_assembler characters_;
    };

private:
    template <class... P>
    [[noreturn]] void fail(const P&... p) const {
        vwt::detail::fail(where_, ": ", p...);
    }
    const nlohmann::json& field(const nlohmann::json& j, const char* name) const {
        if (!j.is_object() || !j.contains(name)) fail("no '", name, "'");
        return j[name];
    }
    std::string type_of(const nlohmann::json& j) const {
        if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) fail("a component without a \"type\": ", j.dump().substr(0, 80));
        return j["type"].get<std::string>();
    }
    static bool is_off(const nlohmann::json& j, const char* name) {
        return !j.contains(name) || j[name].is_null() || j[name] == false || (j[name].is_string() && j[name].get<std::string>().empty());
    }

    void read_model(const nlohmann::json& m) {
        if (type_of(m) != "BPE") fail("model '", type_of(m), "' is not implemented (vwt implements BPE)");
        for (const char* off : {"continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"})
            if (!is_off(m, off)) fail("model.", off, " is ", m[off].dump(), "; vwt implements byte-level BPE without it");
        if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"] != 0) fail("model.dropout is set; vwt encodes without dropout");
        ignore_merges_ = m.contains("ignore_merges") && m["ignore_merges"] == true;
        const auto& vocab = field(m, "vocab");
        if (!vocab.is_object()) fail("model.vocab is not an object");
        for (auto it = vocab.begin(); it != vocab.end(); ++it) {
            if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() >= (1 << 30))
                fail("model.vocab: token '", it.key(), "' has id ", it->dump(), ", not an id in [0, 2^30)");
            add_token(it.key(), it->get<int>(), false);
        }
        const auto cp = bpe_detail::byte_code_points();
        for (int b = 0; b < 256; ++b) {
            std::string s;
            bpe_detail::append_utf8(s, cp[static_cast<std::size_t>(b)]);
            const auto it = vocab_.find(s);
            if (it == vocab_.end()) fail("model.vocab has no token for byte ", b, " ('", s, "'): not a byte-level vocabulary");
            byte_ids_[static_cast<std::size_t>(b)] = it->second;
        }
        const auto& merges = field(m, "merges");
        if (!merges.is_array()) fail("model.merges is not a list");
        for (std::size_t rank = 0; rank < merges.size(); ++rank) {
            const auto& e = merges[rank];
            std::string a, b;
            if (e.is_string()) {
                const auto s = e.get<std::string>();
                const auto space = s.find(' ');
                if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) fail("merge ", rank, " '", s, "' is not two tokens");
                a = s.substr(0, space), b = s.substr(space + 1);
            } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
                a = e[0].get<std::string>(), b = e[1].get<std::string>();
            } else {
                fail("merge ", rank, " is neither \"a b\" nor [\"a\", \"b\"]");
            }
            const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
            if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
                fail("merge ", rank, " ('", a, "', '", b, "'): '", ia == vocab_.end() ? a : ib == vocab_.end() ? b : a + b,
                     "' is not in the vocabulary");
            merges_.try_emplace(pair_key(ia->second, ib->second), merge{static_cast<int>(rank), iab->second});
        }
    }

    void read_pre_tokenizer(const nlohmann::json& p) {
        if (p.is_null()) fail("no pre_tokenizer: vwt implements byte-level files (ByteLevel, or a Sequence of Split and ByteLevel)");
        const auto type = type_of(p);
        if (type == "Sequence") {
            const auto& list = field(p, "pretokenizers");
            if (!list.is_array()) fail("pre_tokenizer.pretokenizers is not a list");
            for (const auto& step : list) read_step(step);
        } else {
            read_step(p);
        }
        if (!byte_level_) fail("pre_tokenizer has no ByteLevel step: vwt implements byte-level BPE");
    }
    void read_step(const nlohmann::json& s) {
        const auto type = type_of(s);
        if (byte_level_) fail("pre_tokenizer: a ", type, " step after ByteLevel is not implemented");
        if (type == "Split") {
            if (s.contains("invert") && s["invert"] == true) fail("pre_tokenizer Split with invert is not implemented");
            const auto behavior = s.contains("behavior") && s["behavior"].is_string() ? s["behavior"].get<std::string>() : "";
            if (behavior != "Isolated") fail("pre_tokenizer Split behavior '", behavior, "' is not implemented (vwt implements Isolated)");
            const auto& pattern = field(s, "pattern");
            if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
                steps_.push_back({std::make_shared<bpe_detail::regex>(pattern["Regex"].get<std::string>(), where_), false});
            } else if (pattern.contains("String") && pattern["String"].is_string()) {
                std::string quoted = "\\Q" + pattern["String"].get<std::string>() + "\\E";
                steps_.push_back({std::make_shared<bpe_detail::regex>(quoted, where_), false});
            } else {
                fail("pre_tokenizer Split pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
            }
        } else if (type == "ByteLevel") {
            byte_level_ = true;
            const bool prefix = s.contains("add_prefix_space") && s["add_prefix_space"] == true;
            const bool use_regex = !s.contains("use_regex") || s["use_regex"] == true;
            if (prefix) steps_.push_back({nullptr, true});
            if (use_regex) steps_.push_back({std::make_shared<bpe_detail::regex>(gpt2_pattern, where_), false});
        } else {
            fail("pre_tokenizer '", type, "' is not implemented (vwt implements ByteLevel and Split)");
        }
    }

    void read_added(const nlohmann::json& list) {
        if (!list.is_array()) fail("added_tokens is not a list");
        for (const auto& t : list) {
            if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") || !t["content"].is_string())
                fail("added_tokens: an entry without an integer id and a content string");
            const auto content = t["content"].get<std::string>();
            for (const char* option : {"single_word", "lstrip", "rstrip"})
                if (t.contains(option) && t[option] == true) fail("added token '", content, "': ", option, " is not implemented");
            if (content.empty()) fail("added token ", t["id"].dump(), " is empty");
            const auto id = t["id"].get<std::int64_t>();
            if (id < 0 || id >= (1 << 30)) fail("added token '", content, "' has id ", id);
            add_token(content, static_cast<int>(id), true);
            added_ids_[content] = static_cast<int>(id);
            longest_added_ = std::max(longest_added_, content.size());
            starts_added_[static_cast<unsigned char>(content[0])] = true;
        }
    }

    // Registers a token: its id, and the bytes it decodes to (byte-level stand-ins mapped back,
    // or its own UTF-8 where a character has no byte, as the ByteLevel decoder does).
    void add_token(const std::string& s, int id, bool added) {
        if (!added) {
            if (!vocab_.try_emplace(s, id).second) fail("model.vocab: token '", s, "' given twice");
        }
        const auto n = static_cast<std::size_t>(id) + 1;
        if (bytes_.size() < n) bytes_.resize(n), present_.resize(n, false);
        if (present_[static_cast<std::size_t>(id)] && !added) fail("model.vocab: id ", id, " given twice");
        present_[static_cast<std::size_t>(id)] = true;
        static const auto inverse = [] {
            std::unordered_map<std::uint32_t, unsigned char> m;
            const auto cp = bpe_detail::byte_code_points();
            for (int b = 0; b < 256; ++b) m[cp[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);
            return m;
        }();
        std::string bytes;
        for (std::uint32_t c : bpe_detail::code_points(s)) {
            const auto it = inverse.find(c);
            if (it == inverse.end()) {
                bytes = s;
                break;
            }
            bytes.push_back(static_cast<char>(it->second));
        }
        bytes_[static_cast<std::size_t>(id)] = std::move(bytes);
    }

    // The longest added token at text[at], as (its length, its id), or (0, -1).
    std::pair<std::size_t, int> added_at(std::string_view text, std::size_t at) const {
        if (!starts_added_[static_cast<unsigned char>(text[at])]) return {0, -1};
        for (std::size_t n = std::min(longest_added_, text.size() - at); n > 0; --n)
            if (const auto it = added_ids_.find(text.substr(at, n)); it != added_ids_.end()) return {n, it->second};
        return {0, -1};
    }

    // Applies the pre-tokenizer steps from `step` on, calling word(piece) for each final piece.
    template <class F>
    void pre_tokenize(std::string_view text, std::size_t step, F&& word) const {
        if (step == steps_.size()) return word(text);
        const auto& s = steps_[step];
        if (s.prefix_space) {
            if (!text.empty() && text.front() == ' ') return pre_tokenize(text, step + 1, word);
            std::string prefixed(1, ' ');  // alive while its words are encoded
            prefixed.append(text);
            return pre_tokenize(std::string_view(prefixed), step + 1, word);
        }
        s.pattern->split(text, [&](std::string_view piece) { pre_tokenize(piece, step + 1, word); });
    }

    // BPE over one pre-tokenized word: its bytes' tokens, merged lowest rank first (leftmost among
    // equal ranks) until no adjacent pair has a merge.
    std::vector<int> encode_word(std::string_view word) const {
        if (ignore_merges_) {
            std::string mapped;
            const auto cp = bpe_detail::byte_code_points();
            for (unsigned char c : word) bpe_detail::append_utf8(mapped, cp[c]);
            if (const auto it = vocab_.find(mapped); it != vocab_.end()) return {it->second};
        }
        struct symbol {
            int id, prev, next;
        };
        std::vector<symbol> s(word.size());
        for (std::size_t i = 0; i < word.size(); ++i)
            s[i] = {byte_ids_[static_cast<unsigned char>(word[i])], static_cast<int>(i) - 1,
                    i + 1 < word.size() ? static_cast<int>(i) + 1 : -1};
        struct candidate {
            int rank, pos, left, right;
            bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
        };
        std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
        const auto consider = [&](int pos) {
            if (pos < 0 || s[static_cast<std::size_t>(pos)].next < 0) return;
            const int right = s[static_cast<std::size_t>(pos)].next;
            const auto it = merges_.find(pair_key(s[static_cast<std::size_t>(pos)].id, s[static_cast<std::size_t>(right)].id));
            if (it != merges_.end()) queue.push({it->second.rank, pos, s[static_cast<std::size_t>(pos)].id, s[static_cast<std::size_t>(right)].id});
        };
        for (std::size_t i = 0; i + 1 < word.size(); ++i) consider(static_cast<int>(i));
        std::vector<bool> gone(word.size(), false);
        while (!queue.empty()) {
            const auto c = queue.top();
            queue.pop();
            auto& left = s[static_cast<std::size_t>(c.pos)];
            if (gone[static_cast<std::size_t>(c.pos)] || left.id != c.left || left.next < 0) continue;  // stale
            auto& right = s[static_cast<std::size_t>(left.next)];
            if (right.id != c.right) continue;
            left.id = merges_.at(pair_key(c.left, c.right)).id;
            gone[static_cast<std::size_t>(left.next)] = true;
            left.next = right.next;
            if (right.next >= 0) s[static_cast<std::size_t>(right.next)].prev = c.pos;
            consider(left.prev);
            consider(c.pos);
        }
        std::vector<int> ids;
        for (int i = word.empty() ? -1 : 0; i >= 0; i = s[static_cast<std::size_t>(i)].next) ids.push_back(s[static_cast<std::size_t>(i)].id);
        return ids;
    }

    static std::uint64_t pair_key(int a, int b) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32 | static_cast<std::uint32_t>(b); }

    struct string_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
    };
    struct merge {
        int rank, id;
    };
    struct step {
        std::shared_ptr<const bpe_detail::regex> pattern;  // split by it (Isolated), or
        bool prefix_space = false;                         // add a space in front if there is none
    };

    std::string where_;
    std::unordered_map<std::string, int, string_hash, std::equal_to<>> vocab_, added_ids_;
    std::unordered_map<std::uint64_t, merge> merges_;
    std::array<int, 256> byte_ids_{};
    std::vector<std::string> bytes_;  // what each id decodes to
    std::vector<bool> present_;
    std::vector<step> steps_;
    std::array<bool, 256> starts_added_{};  // the first bytes of added tokens
    std::size_t longest_added_ = 0;
    bool byte_level_ = false, ignore_merges_ = false;
};

// encode(text) for a large text, a piece at a time: pieces of about `chunk` bytes, each ending
// after a newline that a non-whitespace character follows (where GPT-2's and cl100k's patterns
// always end a pre-token, and no character is split), so the ids are encode(text)'s; one piece
// for a tokenizer that adds a prefix space. progress(n) is called with the bytes done after each.
template <class Progress>
std::vector<int> encode_in_pieces(const bpe_tokenizer& t, std::string_view text, Progress&& progress, std::size_t chunk = 1 << 20) {
    std::vector<int> ids;
    if (t.adds_prefix_space()) chunk = text.size();  // a space would be added in front of every piece
    std::size_t from = 0;
    while (from < text.size()) {
        std::size_t end = std::min(text.size(), from + chunk);
        while (end < text.size() && !(text[end - 1] == '\n' && !std::isspace(static_cast<unsigned char>(text[end])))) ++end;
        const auto part = t.encode(text.substr(from, end - from));
        ids.insert(ids.end(), part.begin(), part.end());
        from = end;
        progress(from);
    }
    return ids;
}

}  // namespace vwt::io
