// config.json in the authors' format (lm_engine's GPTBase fields plus the width-varying ones and an
// explicit `widths` list): the writer, and a strict reader that refuses what vwt does not implement.
#pragma once

// The reader takes lm_engine's defaults for absent fields (a missing normalization_function means
// layernorm, a missing tie_word_embeddings means tied, ...), so a config that omits a field vwt
// needs is refused rather than read as something it is not. Every number is checked for type and
// range before it is used, and every message names the file and the field.

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../model/config.hpp"
#include "../schedule/generate.hpp"

namespace vwt::io {

// Host-controlled logging: load warnings go here (nothing is printed by the library itself).
using log_function = std::function<void(const std::string&)>;

inline nlohmann::ordered_json config_to_json(const model_config& c, const schedule_spec* generator = nullptr) {
    const auto& s = c.schedule;
    const auto& moe = s.dims.moe;
    nlohmann::ordered_json j;
    j["model_type"] = "width_varying";
    j["architectures"] = {"GPTBaseForCausalLM"};
    j["hidden_size"] = s.dims.hidden;
    j["num_layers"] = s.dims.layers;
    j["vocab_size"] = s.dims.vocab;
    j["max_position_embeddings"] = s.dims.context;
    j["widths"] = s.widths;
    if (generator && generator->kind != shape::uniform) {
        const auto plan = solve_plan(*generator);
        j["base_width"] = plan.base_width;
        j["max_layer"] = plan.shape.turn;
        j["duplicate_max_layer"] = plan.shape.duplicate_peak;
        j["quantize_to"] = generator->quantize;
        j["symmetric_widths"] = generator->symmetric;
        if (plan.rates.kind == solver::progression::geometric) {
            j["expansion_factor"] = plan.rates.grow;
            j["reduction_factor"] = plan.rates.shrink;
        } else {
            j["delta"] = plan.rates.grow;
            j["delta_neg"] = plan.rates.shrink;
        }
        if (generator->kind == shape::x || generator->kind == shape::increasing || generator->kind == shape::decreasing)
            j["bottleneck_ratio"] = generator->bottleneck;
    }
    j["expand_method"] = resize_method_name(c.resize);
    j["interpolate_align_corners"] = c.interpolate_align_corners;
    if (c.resize == resize_method::gaussian) j["vwt_resize_seed"] = c.resize_seed;
    j["sinkhorn_iters"] = 0;
    j["expand_linear_bias"] = false;
    j["fixed_residual_width"] = s.dims.stream.fixed_width;
    j["original_input_width"] = s.dims.stream.original_input_width;
    j["original_output_width"] = s.dims.stream.original_output_width;
    j["wide_unembedding"] = s.dims.stream.wide_unembedding;
    j["embedding_width"] = embedding_width(s);
    j["unembedding_width"] = unembedding_width(s);
    j["init_method"] = c.param == parametrization::mup ? "mup" : "normal";
    j["m_emb"] = c.m_emb;
    j["m_residual"] = c.m_residual;
    j["m_width"] = c.m_width;
    j["initializer_range"] = c.initializer_range;
    j["layer_norm_epsilon"] = c.norm_eps;
    j["normalization_function"] = "rmsnorm";
    j["position_embedding_type"] = "rope";
    j["rope_theta"] = c.rope_theta;
    j["tie_word_embeddings"] = false;
    if (moe.enabled()) {
        j["moe_intermediate_size"] = moe.intermediate;
        j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    }
    const auto special = [](int id) { return id >= 0 ? nlohmann::ordered_json(id) : nlohmann::ordered_json(); };
    j["bos_token_id"] = special(c.bos_token_id);
    j["eos_token_id"] = special(c.eos_token_id);
    j["pad_token_id"] = special(c.pad_token_id);
    // Built apart and moved in: a reference into an ordered_json dangles once a later key is added.
    auto attn = nlohmann::ordered_json::array(), mlp = nlohmann::ordered_json::array();
    for (int i = 0; i < s.layers(); ++i) {
        attn.push_back({{"sequence_mixer_type", "softmax_attention"},
                        {"num_attention_heads", s.dims.heads},
                        {"num_key_value_heads", s.dims.kv_heads},
                        {"add_bias", false},
                        {"attention_multiplier", c.attention_scale(i)}});
        if (moe.enabled())
            mlp.push_back({{"mlp_type", "MoE"}, {"activation_function", "swiglu"}, {"intermediate_size", moe_intermediate(s.dims, s.width(i))},
                           {"add_bias", false}, {"shared_intermediate_size", nullptr}, {"num_experts", moe.experts},
                           {"num_experts_per_tok", moe.experts_per_token}, {"use_interleaved_weights", c.mlp == swiglu_layout::interleaved}});
        else
            mlp.push_back({{"mlp_type", "MLP"}, {"activation_function", "swiglu"}, {"intermediate_size", 4 * s.width(i)},
                           {"add_bias", false}, {"use_interleaved_weights", c.mlp == swiglu_layout::interleaved}});
    }
    j["sequence_mixer_blocks"] = std::move(attn);
    j["mlp_blocks"] = std::move(mlp);
    return j;
}

namespace detail {

// Typed, range-checked access to the fields of one JSON object; `where` prefixes field names in
// messages ("mlp_blocks[3]."), `file` names the config.
class config_fields {
public:
    config_fields(const nlohmann::json& object, const std::string& file, std::string where = {})
        : j_(object), file_(file), where_(std::move(where)) {
        if (!j_.is_object()) {
            if (where_.empty()) fail("the config is not a JSON object");
            fail("'", where_.substr(0, where_.size() - 1), "' is not an object");
        }
    }

    // Absent or null.
    bool absent(const char* key) const { return !j_.contains(key) || j_.at(key).is_null(); }
    const nlohmann::json& at(const char* key) const {
        if (absent(key)) fail("missing field '", where_, key, "'");
        return j_.at(key);
    }

    std::int64_t integer(const char* key, std::int64_t lo, std::int64_t hi) const { return integer_value(at(key), key, lo, hi); }
    std::int64_t integer_or(const char* key, std::int64_t lo, std::int64_t hi, std::int64_t fallback) const {
        return absent(key) ? fallback : integer(key, lo, hi);
    }
    std::vector<int> integers(const char* key, std::size_t count, std::int64_t lo, std::int64_t hi) const {
        const auto& v = at(key);
        if (!v.is_array()) fail("field '", where_, key, "' is not a list");
        if (v.size() != count) fail("field '", where_, key, "' holds ", v.size(), " values, expected ", count);
        std::vector<int> out;
        for (std::size_t i = 0; i < v.size(); ++i)
            out.push_back(static_cast<int>(integer_value(v[i], key, lo, hi, static_cast<std::int64_t>(i))));
        return out;
    }
    // A finite number in [lo, hi]; null reads as `if_null` where the authors' format allows it.
    double number_or(const char* key, double lo, double hi, double fallback) const {
        if (absent(key)) return fallback;
        const auto& v = j_.at(key);
        if (!v.is_number()) fail("field '", where_, key, "' is not a number");
        const double x = v.get<double>();
        if (!std::isfinite(x) || x < lo || x > hi) fail("field '", where_, key, "' is ", x, ", outside [", lo, ", ", hi, "]");
        return x;
    }
    bool boolean_or(const char* key, bool fallback) const {
        if (absent(key)) return fallback;
        if (!j_.at(key).is_boolean()) fail("field '", where_, key, "' is not true or false");
        return j_.at(key).get<bool>();
    }
    std::string string_or(const char* key, const std::string& fallback) const {
        if (absent(key)) return fallback;
        if (!j_.at(key).is_string()) fail("field '", where_, key, "' is not a string");
        return j_.at(key).get<std::string>();
    }
    // A string that must be one of `supported`; `fallback` is what the authors' code assumes when
    // the field is absent.
    std::string choice(const char* key, const std::string& fallback, std::initializer_list<const char*> supported) const {
        const auto value = string_or(key, fallback);
        std::string list;
        for (const char* s : supported) {
            if (value == s) return value;
            list += (list.empty() ? "" : ", ") + std::string(s);
        }
        fail("field '", where_, key, "' is '", value, "'", absent(key) ? " (the default of the authors' format)" : "",
             "; vwt implements ", list);
    }
    // The field must be absent, null or equal to `expected` (a feature vwt does not implement).
    void require_bool(const char* key, bool expected, const char* why) const {
        if (!absent(key) && boolean_or(key, expected) != expected)
            fail("field '", where_, key, "' is ", expected ? "false" : "true", ": ", why);
    }
    void require_null(const char* key, const char* why) const {
        if (!absent(key)) fail("field '", where_, key, "' is set: ", why);
    }

    template <class... P>
    [[noreturn]] void fail(const P&... p) const {
        vwt::detail::fail("config '", file_, "': ", p...);
    }

private:
    std::int64_t integer_value(const nlohmann::json& v, const char* key, std::int64_t lo, std::int64_t hi,
                               std::int64_t index = -1) const {
        // Built with append (GCC 12 warns falsely on chains of operator+).
        std::string name = where_;
        name.append(key);
        if (index >= 0) name.append("[").append(std::to_string(index)).append("]");
        if (v.is_number_float()) fail("field '", name, "' is ", v.get<double>(), ", not an integer");
        if (!v.is_number_integer()) fail("field '", name, "' is not an integer");
        const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
        if (!negative && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
            fail("field '", name, "' is ", v.get<std::uint64_t>(), ", above the limit of ", hi);
        const auto x = negative ? v.get<std::int64_t>() : static_cast<std::int64_t>(v.get<std::uint64_t>());
        if (x < lo) fail("field '", name, "' is ", x, ", below the minimum of ", lo);
        return x;
    }

    const nlohmann::json& j_;
    const std::string& file_;
    std::string where_;
};

}  // namespace detail

// Reads a config object; `file` names it in errors. Throws vwt::error for anything malformed, out
// of range, or not implemented by vwt; warns through `log` when the generator parameters stored
// beside `widths` would give other widths (`widths` is trusted).
inline model_config config_from_json(const nlohmann::json& j, const std::string& file, const log_function& log = {}) {
    using lim = schedule_limits;
    const detail::config_fields top(j, file);
    const auto type = top.string_or("model_type", "");
    if (type != "width_varying") top.fail("model_type '", type, "', expected 'width_varying'");

    model_dims d;
    d.hidden = static_cast<int>(top.integer("hidden_size", 1, lim::width));
    d.layers = static_cast<int>(top.integer("num_layers", 1, lim::layers));
    d.vocab = static_cast<int>(top.integer("vocab_size", 1, lim::vocab));
    d.context = static_cast<int>(top.integer("max_position_embeddings", 1, lim::context));
    const auto layers = static_cast<std::size_t>(d.layers);
    const auto widths = top.integers("widths", layers, 1, lim::width);

    // One entry per layer in both block lists, as lm_engine requires.
    const auto block_list = [&](const char* key) {
        const auto& list = top.at(key);
        if (!list.is_array() || list.size() != layers)
            top.fail("field '", key, "' must be a list of ", layers, " blocks (num_layers)");
        return &list;
    };
    const auto* attention = block_list("sequence_mixer_blocks");
    const auto* mlps = block_list("mlp_blocks");
    std::vector<double> multipliers(layers);
    bool interleaved = false;
    // MoE: every MLP a mixture of the same experts; the experts' intermediate size at hidden_size is
    // the top-level moe_intermediate_size, each layer's is round(w_i x it / h) (the authors' rule).
    const bool moe = (*mlps).size() > 0 && (*mlps)[0].is_object() && (*mlps)[0].contains("mlp_type") && (*mlps)[0]["mlp_type"] == "MoE";
    if (moe) {
        d.moe.intermediate = static_cast<int>(top.integer("moe_intermediate_size", 1, lim::moe_intermediate));
        if (!top.absent("moe_shared_intermediate_size") && top.integer("moe_shared_intermediate_size", -1, lim::moe_intermediate) != -1)
            top.fail("field 'moe_shared_intermediate_size' is set: shared experts are not implemented");
    }
    for (std::size_t i = 0; i < layers; ++i) {
        const detail::config_fields a((*attention)[i], file, "sequence_mixer_blocks[" + std::to_string(i) + "].");
        a.choice("sequence_mixer_type", "softmax_attention", {"softmax_attention"});
        const auto heads = static_cast<int>(a.integer("num_attention_heads", 1, lim::heads));
        const auto kv_heads = static_cast<int>(a.integer_or("num_key_value_heads", 1, lim::heads, 1));  // lm_engine's default
        if (i == 0) d.heads = heads, d.kv_heads = kv_heads;
        else if (heads != d.heads || kv_heads != d.kv_heads)
            a.fail("heads differ between layers (", heads, "/", kv_heads, " in layer ", i, ", ", d.heads, "/", d.kv_heads,
                   " in layer 0); vwt needs the same heads in every layer");
        a.require_bool("add_bias", false, "attention biases are not implemented");
        a.require_bool("qkv_bias", false, "attention biases are not implemented");
        a.require_null("sliding_window", "sliding-window attention is not implemented");
        // lm_engine scales scores by attention_multiplier, or by 1/sqrt(head dim) when it is null.
        const double head_dim = static_cast<double>(widths[i]) / heads;
        multipliers[i] = a.number_or("attention_multiplier", 0, 1e6, 1.0 / std::sqrt(head_dim));

        const detail::config_fields m((*mlps)[i], file, "mlp_blocks[" + std::to_string(i) + "].");
        if ((m.choice("mlp_type", "MLP", {"MLP", "MoE"}) == "MoE") != moe)
            m.fail("field 'mlp_blocks[", i, "].mlp_type' differs from layer 0's; vwt needs every MLP dense or every MLP MoE");
        m.choice("activation_function", "gelu_pytorch_tanh", {"swiglu"});
        m.require_bool("add_bias", false, "MLP biases are not implemented");
        if (moe) {
            const auto experts = static_cast<int>(m.integer("num_experts", 1, lim::experts));
            const auto per_token = static_cast<int>(m.integer("num_experts_per_tok", 1, experts));
            if (i == 0) d.moe.experts = experts, d.moe.experts_per_token = per_token;
            else if (experts != d.moe.experts || per_token != d.moe.experts_per_token)
                m.fail("experts differ between layers (", experts, " / ", per_token, " per token in layer ", i, ", ", d.moe.experts, " / ",
                       d.moe.experts_per_token, " in layer 0); vwt needs the same experts in every layer");
            if (!m.absent("shared_intermediate_size") && m.integer("shared_intermediate_size", -1, lim::moe_intermediate) != -1)
                m.fail("field 'mlp_blocks[", i, "].shared_intermediate_size' is set: shared experts are not implemented");
            // -1 (the authors' yml) means derived; a saved config states the derived value.
            const auto expected = moe_intermediate(d, widths[i]);
            if (expected < 1)
                m.fail("layer ", i, " of width ", widths[i], " is too narrow for experts: round(", widths[i], " x moe_intermediate_size ",
                       d.moe.intermediate, " / hidden_size ", d.hidden, ") is 0");
            const auto inter = m.integer_or("intermediate_size", -1, lim::moe_intermediate, -1);
            if (inter != -1 && inter != expected)
                m.fail("field 'mlp_blocks[", i, "].intermediate_size' is ", inter, "; the MoE experts' size at width ", widths[i],
                       " is round(", widths[i], " x moe_intermediate_size ", d.moe.intermediate, " / hidden_size ", d.hidden, ") = ", expected);
        } else {
            const auto inter = m.integer("intermediate_size", 1, 4LL * lim::width);
            if (inter != 4LL * widths[i])
                m.fail("field 'mlp_blocks[", i, "].intermediate_size' is ", inter, "; vwt implements 4 x the layer width (",
                       4LL * widths[i], ")");
        }
        const bool layer_interleaved = m.boolean_or("use_interleaved_weights", false);
        if (i == 0) interleaved = layer_interleaved;
        else if (layer_interleaved != interleaved)
            m.fail("field 'mlp_blocks[", i, "].use_interleaved_weights' differs from layer 0's; vwt needs one layout");
    }

    // The stream variant (validated with the schedule: the authors' combinations only).
    d.stream.fixed_width = top.boolean_or("fixed_residual_width", false);
    d.stream.original_input_width = top.boolean_or("original_input_width", true);
    d.stream.original_output_width = top.boolean_or("original_output_width", true);
    d.stream.wide_unembedding = top.boolean_or("wide_unembedding", false);

    model_config c;
    try {
        c.schedule = dynamic_schedule(d, widths);
    } catch (const vwt::error& e) {
        top.fail(e.what());
    }
    c.attention_multipliers = std::move(multipliers);
    if (moe) c.router_aux_loss_coef = top.number_or("router_aux_loss_coef", 0, 1e6, c.router_aux_loss_coef);
    c.param = top.choice("init_method", "normal", {"mup", "normal"}) == "mup" ? parametrization::mup : parametrization::standard;
    // null multipliers mean 1 (no multiplier) in lm_engine
    c.m_emb = top.number_or("m_emb", -1e6, 1e6, 1.0);
    c.m_residual = top.number_or("m_residual", -1e6, 1e6, 1.0);
    c.m_width = top.number_or("m_width", 1e-6, 1e6, 1.0);
    c.initializer_range = top.number_or("initializer_range", 0, 1e6, 0.02);
    c.norm_eps = top.number_or("layer_norm_epsilon", 0, 1, 1e-5);
    c.rope_theta = top.number_or("rope_theta", 1, 1e12, 10000.0);
    c.resize = *resize_method_named(top.choice("expand_method", "zero", {"move_up", "zero", "interpolate", "linear", "gaussian"}));
    c.resize_seed = static_cast<std::uint64_t>(top.integer_or("vwt_resize_seed", 0, std::int64_t{1} << 53, 0));
    c.interpolate_align_corners = top.boolean_or("interpolate_align_corners", false);
    if (!top.absent("sinkhorn_iters") && top.integer("sinkhorn_iters", 0, 1000000) != 0)
        top.fail("field 'sinkhorn_iters' is set: the Sinkhorn-normalised linear resize is not implemented");
    top.require_bool("expand_linear_bias", false, "a bias in the linear resize is not implemented");
    top.choice("normalization_function", "layernorm", {"rmsnorm"});
    top.choice("position_embedding_type", "learned_absolute", {"rope"});
    top.require_null("rope_scaling", "RoPE scaling is not implemented");
    // The authors' config stores rope_dim -1 (per-layer head dims); any other value is a partial RoPE.
    if (!top.absent("rope_dim") && top.integer("rope_dim", -1, lim::width) != -1)
        top.fail("field 'rope_dim' is set: a partial RoPE dimension is not implemented (vwt rotates each layer's whole head)");
    // A saved config states the widths the flags derive; they must agree.
    if (!top.absent("embedding_width") && top.integer("embedding_width", 1, lim::width) != embedding_width(c.schedule))
        top.fail("field 'embedding_width' is ", top.integer("embedding_width", 1, lim::width), "; original_input_width ",
                 d.stream.original_input_width ? "true" : "false", " gives ", embedding_width(c.schedule));
    if (!top.absent("unembedding_width") && top.integer("unembedding_width", 1, lim::width) != unembedding_width(c.schedule))
        top.fail("field 'unembedding_width' is ", top.integer("unembedding_width", 1, lim::width), "; original_output_width ",
                 d.stream.original_output_width ? "true" : "false", " and wide_unembedding ", d.stream.wide_unembedding ? "true" : "false",
                 " give ", unembedding_width(c.schedule));

    if (top.absent("tie_word_embeddings") || top.boolean_or("tie_word_embeddings", true))
        top.fail("field 'tie_word_embeddings' is ", top.absent("tie_word_embeddings") ? "absent (tied, lm_engine's default)" : "true",
                 ": tied embeddings are not supported");
    const bool legacy_interleaved = top.choice("vwt_mlp_layout", interleaved ? "interleaved" : "split", {"split", "interleaved"}) == "interleaved";
    if (legacy_interleaved != interleaved)
        top.fail("fields 'vwt_mlp_layout' and 'mlp_blocks[].use_interleaved_weights' disagree");
    c.mlp = interleaved ? swiglu_layout::interleaved : swiglu_layout::split;
    const auto special = [&](const char* key) { return static_cast<int>(top.integer_or(key, 0, d.vocab - 1, -1)); };
    c.bos_token_id = special("bos_token_id");
    c.eos_token_id = special("eos_token_id");
    c.pad_token_id = special("pad_token_id");

    // Trust `widths`, but say so when the generator parameters stored beside them disagree.
    if (log && j.contains("base_width") && j.contains("max_layer") && j.contains("expansion_factor") &&
        j.contains("reduction_factor")) {
        try {
            const schedule_plan plan{static_cast<int>(top.integer("base_width", 1, lim::width)),
                                     {solver::progression::geometric, top.number_or("expansion_factor", 1e-6, 1e6, 1.0),
                                      top.number_or("reduction_factor", 1e-6, 1e6, 1.0)},
                                     {static_cast<int>(top.integer("max_layer", 1, d.layers)),
                                      top.boolean_or("duplicate_max_layer", false)},
                                     static_cast<int>(top.integer_or("quantize_to", 1, lim::width, 1))};
            std::vector<int> regenerated(widths.size());
            write_widths(plan, regenerated);
            if (regenerated != widths && !j.contains("permute_widths_seed"))
                log("config '" + file + "': the generator parameters give other widths than the 'widths' list; using 'widths'");
        } catch (const vwt::error&) {
            log("config '" + file + "': the generator parameters do not form a schedule; using 'widths'");
        }
    }
    return c;
}

}  // namespace vwt::io
