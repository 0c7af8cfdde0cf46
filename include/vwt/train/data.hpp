// Training data: a byte-level UTF-8 text file or a binary token file (little-endian uint16 or
// uint32), split into train and validation tails, served as contiguous windows in a seeded order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../io/safetensors.hpp"

namespace vwt::train {

enum class token_file { text_bytes, u16, u32 };

inline std::vector<int> read_tokens(const std::filesystem::path& path, token_file kind, int vocab) {
    const auto bytes = io::read_file_bytes(path);
    std::vector<int> tokens;
    const std::size_t width = kind == token_file::text_bytes ? 1 : kind == token_file::u16 ? 2 : 4;
    if (bytes.size() % width != 0)
        vwt::detail::fail("data '", path.string(), "': ", bytes.size(), " bytes is not a whole number of ", width, "-byte tokens");
    tokens.reserve(bytes.size() / width);
    for (std::size_t i = 0; i < bytes.size(); i += width) {
        std::uint32_t t = 0;
        for (std::size_t b = 0; b < width; ++b) t |= static_cast<std::uint32_t>(bytes[i + b]) << (8 * b);
        if (t >= static_cast<std::uint32_t>(vocab))
            vwt::detail::fail("data '", path.string(), "': token ", t, " at index ", i / width, " is outside the vocabulary [0, ", vocab, ")");
        tokens.push_back(static_cast<int>(t));
    }
    return tokens;
}

// Windows of seq + 1 tokens (inputs and next-token targets) starting every `seq` tokens of the
// training part; the validation part is the last `validation_fraction` of the corpus.
class window_loader {
public:
    window_loader(std::vector<int> tokens, int seq, double validation_fraction, std::uint64_t seed, std::string source)
        : seq_(seq), seed_(seed) {
        if (seq < 1) vwt::detail::fail("data '", source, "': sequence length must be positive, got ", seq);
        if (!(validation_fraction >= 0 && validation_fraction < 1))
            vwt::detail::fail("data '", source, "': validation fraction must be in [0, 1), got ", validation_fraction);
        const auto n = tokens.size();
        const auto n_val = static_cast<std::size_t>(static_cast<double>(n) * validation_fraction);
        train_.assign(tokens.begin(), tokens.end() - static_cast<std::ptrdiff_t>(n_val));
        validation_.assign(tokens.end() - static_cast<std::ptrdiff_t>(n_val), tokens.end());
        if (train_.size() < static_cast<std::size_t>(seq) + 1)
            vwt::detail::fail("data '", source, "': ", train_.size(), " training tokens, too few for one window of ", seq + 1);
        if (validation_fraction > 0 && validation_.size() < static_cast<std::size_t>(seq) + 1)
            vwt::detail::fail("data '", source, "': ", validation_.size(), " validation tokens, too few for one window of ", seq + 1);
        windows_ = (train_.size() - 1) / static_cast<std::size_t>(seq);
        reshuffle();
    }

    std::size_t windows_per_epoch() const { return windows_; }
    int sequence_length() const { return seq_; }
    std::uint64_t position() const { return position_; }  // windows served so far (for resuming)
    // Continues as if `position` windows had been served: the order of that window's epoch.
    void seek(std::uint64_t position) {
        position_ = position;
        epoch_ = position / windows_;
        reshuffle();
    }

    // The next training window: inputs [start, start + seq), targets shifted by one.
    void next(std::vector<int>& inputs, std::vector<int>& targets) {
        const std::size_t start = next_start();
        inputs.assign(train_.begin() + static_cast<std::ptrdiff_t>(start), train_.begin() + static_cast<std::ptrdiff_t>(start + seq_));
        targets.assign(train_.begin() + static_cast<std::ptrdiff_t>(start + 1), train_.begin() + static_cast<std::ptrdiff_t>(start + seq_ + 1));
    }
    // Validation windows, in order, without overlap.
    std::size_t validation_windows() const { return validation_.empty() ? 0 : (validation_.size() - 1) / static_cast<std::size_t>(seq_); }
    void validation_window(std::size_t i, std::vector<int>& inputs, std::vector<int>& targets) const {
        const std::size_t start = i * static_cast<std::size_t>(seq_);
        inputs.assign(validation_.begin() + static_cast<std::ptrdiff_t>(start), validation_.begin() + static_cast<std::ptrdiff_t>(start + seq_));
        targets.assign(validation_.begin() + static_cast<std::ptrdiff_t>(start + 1),
                       validation_.begin() + static_cast<std::ptrdiff_t>(start + seq_ + 1));
    }

private:
    std::size_t next_start() {
        if (position_ > 0 && position_ % windows_ == 0 && position_ / windows_ != epoch_) {
            epoch_ = position_ / windows_;
            reshuffle();
        }
        const std::size_t w = order_[static_cast<std::size_t>(position_ % windows_)];
        ++position_;
        return w * static_cast<std::size_t>(seq_);
    }
    // Each epoch's order is a function of (seed, epoch) alone, so seek() reproduces it.
    void reshuffle() {
        order_.resize(windows_);
        for (std::size_t i = 0; i < windows_; ++i) order_[i] = i;
        std::mt19937_64 rng(seed_ ^ (0x9e3779b97f4a7c15ULL * (epoch_ + 1)));
        std::shuffle(order_.begin(), order_.end(), rng);
    }

    std::vector<int> train_, validation_;
    int seq_;
    std::uint64_t seed_;
    std::size_t windows_ = 0;
    std::vector<std::size_t> order_;
    std::uint64_t position_ = 0, epoch_ = 0;
};

}  // namespace vwt::train
