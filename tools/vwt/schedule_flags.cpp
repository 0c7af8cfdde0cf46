// Translation of the schedule flags into a schedule_spec; a preset is the starting point and every
// flag given overrides one of its fields.
#include "schedule_flags.hpp"

#include <map>

namespace vwt::cli {

void schedule_flags::add_to(CLI::App& app) {
    std::string names;
    for (const auto& p : presets::all) names += (names.empty() ? "" : ", ") + std::string(p.name);
    app.add_option("--preset", preset, "start from a named configuration: " + names);
    app.add_option("--layers", layers, "number of layers L");
    app.add_option("--hidden", hidden, "hidden size h of the parameter-matched uniform model");
    app.add_option("--heads", heads, "attention heads (the same in every layer)");
    app.add_option("--kv-heads", kv_heads, "key/value heads (grouped-query attention); default: heads");
    app.add_option("--vocab", vocab, "vocabulary size");
    app.add_option("--context", context, "maximum context (max_position_embeddings)");
    app.add_option("--shape", shape_name, "uniform, x, diamond, increasing, decreasing, geometric, arithmetic");
    app.add_option("--bottleneck", bottleneck, "bottleneck ratio: min width / h (x, diamond, increasing, decreasing)");
    app.add_option("--turn", turn, "turning layer k, 1-indexed (default: round(0.75 L) for x, round(L/2) for diamond)");
    app.add_option("--quantize", quantize, "round widths to a multiple of this (ties to even)");
    app.add_flag("--duplicate-peak", duplicate_peak, "layer k+1 repeats the width of layer k");
    app.add_flag("--asymmetric", asymmetric, "do not force w_1 = w_L when deriving a factor or delta");
    app.add_option("--expansion", expansion, "geometric: factor up to the turning layer");
    app.add_option("--reduction", reduction, "geometric: factor after the turning layer");
    app.add_option("--delta", delta, "arithmetic: w_i = w_{i-1} + base * delta up to the turning layer");
    app.add_option("--delta-neg", delta_neg, "arithmetic: the delta after the turning layer");
    app.add_option("--experts", experts, "MoE: experts per layer (0: dense SwiGLU)");
    app.add_option("--experts-per-token", experts_per_token, "MoE: experts each token uses");
    app.add_option("--moe-intermediate", moe_intermediate, "MoE: expert intermediate size at width h");
    app.add_option("--permute", permute, "middle-width ablation: none, shuffle, sort, rsort");
    app.add_option("--permute-seed", permute_seed, "seed of --permute shuffle (Python random.Random)");
    app.add_flag("--permute-all", permute_all, "permute every layer, not only the middle ones");
    app.add_option("--widths", widths, "explicit widths, one per layer (comma separated)")->delimiter(',');
    app.add_flag("--fixed-residual-width", fixed_residual_width,
                 "the constant-residual baseline: the stream stays at width h, each block projects h -> w_i -> h");
    app.add_flag("--narrow-input", narrow_input, "original_input_width false: the embedding has the first layer's width");
    app.add_flag("--narrow-output", narrow_output, "original_output_width false: the head reads the last layer's width");
    app.add_flag("--wide-unembedding", wide_unembedding,
                 "with --narrow-output: the head reads the widest layer's width (the stream's move_up values above w_L)");
    app.add_option("--resize", resize,
                   "how a wider layer grows the stream: move_up (the paper), zero, interpolate (linear interpolation of the whole "
                   "vector), linear (a learned map per widening), gaussian (draws from each token's mean and standard deviation)");
    app.add_flag("--interpolate-align-corners", align_corners, "--resize interpolate: F.interpolate's align_corners");
}

schedule_spec schedule_flags::spec(std::string& name) const {
    schedule_spec s{};
    name = "custom";
    if (!preset.empty()) {
        const auto found = presets::find(preset);
        if (!found) detail::fail("--preset: unknown preset '", preset, "'");
        s = *found;
        name = preset;
    } else {
        s.dims = {0, 0, 0, 0, 256, 2048, {}};
        s.quantize = 1;
        if (!layers || !hidden || !heads)
            detail::fail("give --preset NAME, or at least --layers, --hidden and --heads");
    }
    const auto set = [&](const std::optional<int>& flag, int& field) { if (flag) field = *flag; };
    set(layers, s.dims.layers);
    set(hidden, s.dims.hidden);
    set(heads, s.dims.heads);
    set(vocab, s.dims.vocab);
    set(context, s.dims.context);
    set(turn, s.turn);
    set(quantize, s.quantize);
    set(experts, s.dims.moe.experts);
    set(experts_per_token, s.dims.moe.experts_per_token);
    set(moe_intermediate, s.dims.moe.intermediate);
    if (fixed_residual_width) s.dims.stream.fixed_width = true;
    if (narrow_input) s.dims.stream.original_input_width = false;
    if (narrow_output) s.dims.stream.original_output_width = false;
    if (wide_unembedding) s.dims.stream.wide_unembedding = true;
    if (kv_heads) s.dims.kv_heads = *kv_heads;
    else if (heads || preset.empty()) s.dims.kv_heads = s.dims.heads;
    if (shape_name) {
        static const std::map<std::string, shape> shapes = {
            {"uniform", shape::uniform},       {"x", shape::x},
            {"diamond", shape::diamond},       {"increasing", shape::increasing},
            {"decreasing", shape::decreasing}, {"geometric", shape::geometric},
            {"arithmetic", shape::arithmetic}};
        const auto it = shapes.find(*shape_name);
        if (it == shapes.end()) detail::fail("--shape: unknown shape '", *shape_name, "'");
        s.kind = it->second;
    } else if (expansion || reduction) {
        s.kind = shape::geometric;
    } else if (delta || delta_neg) {
        s.kind = shape::arithmetic;
    }
    if (bottleneck) s.bottleneck = *bottleneck;
    s.expansion = expansion;
    s.reduction = reduction;
    s.delta = delta;
    s.delta_neg = delta_neg;
    if (duplicate_peak) s.duplicate_peak = true;
    if (asymmetric) s.symmetric = false;
    static const std::map<std::string, permutation_kind> perms = {
        {"none", permutation_kind::none},
        {"shuffle", permutation_kind::shuffle},
        {"sort", permutation_kind::sorted},
        {"rsort", permutation_kind::reverse_sorted}};
    const auto p = perms.find(permute);
    if (p == perms.end()) detail::fail("--permute: unknown permutation '", permute, "'");
    s.permute = {p->second, permute_seed, permute_all};
    return s;
}

dynamic_schedule schedule_flags::build(std::string& name, int& base_width) const {
    const auto s = spec(name);
    if (!widths.empty()) {
        model_dims d = s.dims;
        d.layers = static_cast<int>(widths.size());
        base_width = 0;
        return dynamic_schedule(d, widths);
    }
    base_width = solve_plan(s).base_width;
    return make_schedule(s);
}

model_config schedule_flags::model(dynamic_schedule s, bool standard) const {
    auto c = byte_level_config(std::move(s), standard);
    const auto method = resize_method_named(resize);
    if (!method) detail::fail("--resize: unknown method '", resize, "' (move_up, zero, interpolate, linear, gaussian)");
    c.resize = *method;
    if (align_corners && c.resize != resize_method::interpolate) detail::fail("--interpolate-align-corners: needs --resize interpolate");
    c.interpolate_align_corners = align_corners;
    return c;
}

model_config byte_level_config(dynamic_schedule s, bool standard) {
    auto c = standard ? model_config::standard(std::move(s)) : model_config::mup(std::move(s));
    c.bos_token_id = std::min(256, c.schedule.dims.vocab - 1);
    c.eos_token_id = c.pad_token_id = std::min(257, c.schedule.dims.vocab - 1);
    return c;
}

std::uint64_t parse_shard_size(const std::string& flag, const std::string& text) {
    if (text.empty() || text == "0") return 0;
    std::size_t used = 0;
    double number = 0;
    try {
        number = std::stod(text, &used);
    } catch (const std::exception&) {
        detail::fail(flag, ": '", text, "' is not a size (e.g. 500MB, 2GB, 1GiB)");
    }
    const std::string unit = text.substr(used);
    static const std::map<std::string, double> units = {{"", 1},         {"B", 1},           {"KB", 1e3},        {"MB", 1e6},
                                                        {"GB", 1e9},     {"KiB", 1024.0},    {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
    const auto it = units.find(unit);
    if (it == units.end()) detail::fail(flag, ": unknown unit '", unit, "' in '", text, "' (B, KB, MB, GB, KiB, MiB, GiB)");
    const double bytes = number * it->second;
    if (!(bytes >= 1) || bytes > 1e18) detail::fail(flag, ": '", text, "' is not a positive size");
    return static_cast<std::uint64_t>(bytes);
}

train::token_file parse_token_format(const std::string& name) {
    if (name == "text") return train::token_file::text_bytes;
    if (name == "u16") return train::token_file::u16;
    if (name == "u32") return train::token_file::u32;
    detail::fail("--format: unknown format '", name, "' (text, u16, u32)");
}

}  // namespace vwt::cli
