// The command line's schedule flags (--preset or --layers/--hidden/...), shared by every
// subcommand that builds a model, and their translation to a vwt::schedule_spec.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <vwt/train/data.hpp>
#include <vwt/vwt.hpp>

namespace vwt::cli {

struct schedule_flags {
    std::string preset;
    std::optional<int> layers, hidden, heads, kv_heads, vocab, context, turn, quantize;
    std::optional<int> experts, experts_per_token, moe_intermediate;
    std::optional<std::string> shape_name;
    std::optional<double> bottleneck, expansion, reduction, delta, delta_neg;
    bool duplicate_peak = false;
    bool asymmetric = false;
    std::string permute = "none";
    std::uint64_t permute_seed = 0;
    bool permute_all = false;
    bool fixed_residual_width = false, narrow_input = false, narrow_output = false, wide_unembedding = false;
    std::string resize = "move_up";
    bool align_corners = false;
    std::vector<int> widths;

    void add_to(CLI::App& app);
    // The schedule the flags describe; `name` receives the preset name or "custom".
    // Throws vwt::error naming the flag at fault.
    schedule_spec spec(std::string& name) const;
    // Also honours --widths (an explicit list); returns the base width the solver chose.
    dynamic_schedule build(std::string& name, int& base_width) const;
    // The byte-level model config of a schedule (below) with --resize.
    model_config model(dynamic_schedule s, bool standard) const;
};

// The model config the command line makes for a schedule: muP (or standard) with the byte-level
// tokenizer's special ids (bos 256, eos/pad 257, clamped into a smaller vocabulary).
model_config byte_level_config(dynamic_schedule s, bool standard);

// A --max-shard-size: bytes, or a number with KB, MB, GB (powers of 1000, as save_pretrained reads
// them) or KiB, MiB, GiB; "0" or empty: no sharding.
std::uint64_t parse_shard_size(const std::string& flag, const std::string& text);

// --format: text (UTF-8 bytes), u16 or u32 (little-endian token ids).
train::token_file parse_token_format(const std::string& name);

}  // namespace vwt::cli
