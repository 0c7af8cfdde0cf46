// The text side of a model directory, shared by `vwt generate`, `vwt serve` and the Python
// package: its tokenizer.json (byte-level BPE) when it has one, else the byte tokenizer; and
// decoding token by token into whole UTF-8 characters (an incomplete one waits for its bytes).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <vwt/io/bpe_tokenizer.hpp>
#include <vwt/io/byte_tokenizer.hpp>

namespace vwt::cli {

class model_text {
public:
    model_text(const std::filesystem::path& dir, int vocab) : bytes_(vocab) {
        if (const auto file = dir / "tokenizer.json"; std::filesystem::exists(file)) {
            bpe_.emplace(io::bpe_tokenizer::from_file(file));
            if (bpe_->vocab_size() > vocab)
                detail::fail(file.string(), ": ", bpe_->vocab_size(), " ids, more than the model's vocabulary of ", vocab);
        }
    }
    bool bpe() const { return bpe_.has_value(); }
    std::vector<int> encode(std::string_view text) const { return bpe_ ? bpe_->encode(text) : bytes_.encode(text); }
    std::string decode(const std::vector<int>& ids) const { return bpe_ ? bpe_->decode(ids) : bytes_.decode(ids); }
    // One token's bytes (possibly part of a character; none for a special id or an id past the
    // tokenizer's tokens).
    std::string bytes_of(int id) const {
        std::string out;
        if (!bpe_) bytes_.append(out, id);
        else if (bpe_->has_token(id)) out = bpe_->bytes_of(id);
        return out;
    }

    class stream {
    public:
        explicit stream(const model_text& t) : text_(&t) {}
        std::string push(int id) { return characters_.push(text_->bytes_of(id)); }
        std::string finish() { return characters_.finish(); }

    private:
        const model_text* text_;
        io::utf8_assembler characters_;
    };

private:
    io::byte_tokenizer bytes_;
    std::optional<io::bpe_tokenizer> bpe_;
};

}  // namespace vwt::cli
