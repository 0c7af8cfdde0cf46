// A model directory: config.json (HF style, the authors' field names plus an explicit `widths`
// list) and model.safetensors (F32, F16 or BF16, the authors' state-dict names).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../parameters.hpp"
#include "../schedule/generate.hpp"
#include "safetensors.hpp"

namespace vwt::io {

// Host-controlled logging: load warnings go here (nothing is printed by the library itself).
using log_function = std::function<void(const std::string&)>;

inline nlohmann::ordered_json config_to_json(const model_config& c, const schedule_spec* generator = nullptr) {
    const auto& s = c.schedule;
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
    j["expand_method"] = c.resize == resize_method::move_up ? "move_up" : "zero";
    j["fixed_residual_width"] = false;
    j["original_input_width"] = true;
    j["original_output_width"] = true;
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
    j["bos_token_id"] = c.bos_token_id;
    j["eos_token_id"] = c.eos_token_id;
    j["pad_token_id"] = c.pad_token_id;
    j["vwt_mlp_layout"] = c.mlp == mlp_layout::split ? "split" : "interleaved";
    auto& attn = j["sequence_mixer_blocks"] = nlohmann::ordered_json::array();
    auto& mlp = j["mlp_blocks"] = nlohmann::ordered_json::array();
    for (int i = 0; i < s.layers(); ++i) {
        attn.push_back({{"sequence_mixer_type", "softmax_attention"},
                        {"num_attention_heads", s.dims.heads},
                        {"num_key_value_heads", s.dims.kv_heads},
                        {"add_bias", false},
                        {"attention_multiplier", c.attention_scale(i)}});
        mlp.push_back({{"mlp_type", "MLP"}, {"activation_function", "swiglu"}, {"intermediate_size", 4 * s.width(i)},
                       {"add_bias", false}});
    }
    return j;
}

namespace detail {
template <class V>
V field(const nlohmann::json& j, const std::string& file, const char* key) {
    if (!j.contains(key)) vwt::detail::fail("config '", file, "': missing field '", key, "'");
    try {
        return j.at(key).get<V>();
    } catch (const nlohmann::json::exception&) {
        vwt::detail::fail("config '", file, "': field '", key, "' has the wrong type");
    }
}
template <class V>
V field_or(const nlohmann::json& j, const std::string& file, const char* key, V fallback) {
    return j.contains(key) ? field<V>(j, file, key) : fallback;
}
}  // namespace detail

inline model_config config_from_json(const nlohmann::json& j, const std::string& file, const log_function& log = {}) {
    if (!j.is_object()) vwt::detail::fail("config '", file, "': not a JSON object");
    const auto type = detail::field<std::string>(j, file, "model_type");
    if (type != "width_varying") vwt::detail::fail("config '", file, "': model_type '", type, "', expected 'width_varying'");
    model_dims d;
    d.hidden = detail::field<int>(j, file, "hidden_size");
    d.layers = detail::field<int>(j, file, "num_layers");
    d.vocab = detail::field<int>(j, file, "vocab_size");
    d.context = detail::field<int>(j, file, "max_position_embeddings");
    const auto blocks = detail::field<nlohmann::json>(j, file, "sequence_mixer_blocks");
    if (!blocks.is_array() || blocks.empty()) vwt::detail::fail("config '", file, "': sequence_mixer_blocks is not a non-empty list");
    d.heads = detail::field<int>(blocks[0], file, "num_attention_heads");
    d.kv_heads = detail::field_or<int>(blocks[0], file, "num_key_value_heads", d.heads);
    for (const auto& b : blocks)
        if (detail::field<int>(b, file, "num_attention_heads") != d.heads ||
            detail::field_or<int>(b, file, "num_key_value_heads", d.heads) != d.kv_heads)
            vwt::detail::fail("config '", file, "': heads differ between layers; vwt needs the same heads in every layer");
    const auto widths = detail::field<std::vector<int>>(j, file, "widths");
    model_config c;
    try {
        c.schedule = dynamic_schedule(d, widths);
    } catch (const vwt::error& e) {
        vwt::detail::fail("config '", file, "': ", e.what());
    }
    const auto init = detail::field_or<std::string>(j, file, "init_method", "mup");
    c.param = init == "mup" ? parametrization::mup : parametrization::standard;
    c.m_emb = detail::field_or<double>(j, file, "m_emb", 1.0);
    c.m_residual = detail::field_or<double>(j, file, "m_residual", 1.0);
    c.m_width = detail::field_or<double>(j, file, "m_width", 1.0);
    c.initializer_range = detail::field_or<double>(j, file, "initializer_range", c.initializer_range);
    c.norm_eps = detail::field_or<double>(j, file, "layer_norm_epsilon", 1e-5);
    c.rope_theta = detail::field_or<double>(j, file, "rope_theta", 10000.0);
    const auto expand = detail::field_or<std::string>(j, file, "expand_method", "move_up");
    if (expand == "move_up") c.resize = resize_method::move_up;
    else if (expand == "zero") c.resize = resize_method::zero;
    else vwt::detail::fail("config '", file, "': expand_method '", expand, "' is not supported (move_up, zero)");
    if (detail::field_or<bool>(j, file, "fixed_residual_width", false))
        vwt::detail::fail("config '", file, "': fixed_residual_width is not supported");
    if (!detail::field_or<bool>(j, file, "original_input_width", true) || !detail::field_or<bool>(j, file, "original_output_width", true))
        vwt::detail::fail("config '", file, "': only original_input_width = original_output_width = true is supported");
    if (detail::field_or<bool>(j, file, "tie_word_embeddings", false))
        vwt::detail::fail("config '", file, "': tied embeddings are not supported");
    const auto layout = detail::field_or<std::string>(j, file, "vwt_mlp_layout", "split");
    c.mlp = layout == "interleaved" ? mlp_layout::interleaved : mlp_layout::split;
    c.bos_token_id = detail::field_or<int>(j, file, "bos_token_id", c.bos_token_id);
    c.eos_token_id = detail::field_or<int>(j, file, "eos_token_id", c.eos_token_id);
    c.pad_token_id = detail::field_or<int>(j, file, "pad_token_id", c.pad_token_id);
    // Trust `widths`, but say so when the generator parameters stored beside them disagree.
    if (log && j.contains("base_width") && j.contains("max_layer") && j.contains("expansion_factor") &&
        j.contains("reduction_factor")) {
        try {
            schedule_plan plan{detail::field<int>(j, file, "base_width"),
                               {solver::progression::geometric, detail::field<double>(j, file, "expansion_factor"),
                                detail::field<double>(j, file, "reduction_factor")},
                               {detail::field<int>(j, file, "max_layer"), detail::field_or<bool>(j, file, "duplicate_max_layer", false)},
                               detail::field_or<int>(j, file, "quantize_to", 1)};
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

struct loaded_model {
    model_config config;
    std::vector<float> params;
};

// Reads DIR/config.json and DIR/model.safetensors; every tensor must be present with the shape the
// schedule gives, and no other tensor may be there.
inline loaded_model load_model_dir(const std::filesystem::path& dir, const log_function& log = {}) {
    const auto config_path = (dir / "config.json").string();
    const auto weights_path = (dir / "model.safetensors").string();
    if (!std::filesystem::is_directory(dir)) vwt::detail::fail("model directory '", dir.string(), "' does not exist");
    nlohmann::json j;
    {
        const auto bytes = read_file_bytes(config_path);
        try {
            j = nlohmann::json::parse(bytes.begin(), bytes.end());
        } catch (const nlohmann::json::parse_error& e) {
            vwt::detail::fail("config '", config_path, "': not valid JSON: ", e.what());
        }
    }
    loaded_model m{config_from_json(j, config_path, log), {}};
    const parameter_layout layout(m.config);
    const auto bytes = read_file_bytes(weights_path);
    const safetensors_view st(bytes, weights_path);
    m.params.resize(static_cast<std::size_t>(layout.size()));
    for (const auto& t : layout.tensors()) {
        const auto* e = st.find(t.name);
        if (!e) vwt::detail::fail("safetensors '", weights_path, "': missing tensor '", t.name, "'");
        if (e->shape != t.shape) {
            std::string got, want;
            for (auto s : e->shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
            for (auto s : t.shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
            vwt::detail::fail("safetensors '", weights_path, "': tensor '", t.name, "' has shape [", got,
                              "], the schedule needs [", want, "]");
        }
        st.read_as(*e, m.params.data() + t.offset);
    }
    for (const auto& e : st.tensors())
        if (!layout.find(e.name)) vwt::detail::fail("safetensors '", weights_path, "': unexpected tensor '", e.name, "'");
    return m;
}

// Writes config.json and model.safetensors into DIR (created if needed), each atomically.
inline void save_model_dir(const std::filesystem::path& dir, const model_config& c, std::span<const float> params,
                           dtype type = dtype::f32, const schedule_spec* generator = nullptr) {
    const parameter_layout layout(c);
    if (static_cast<std::int64_t>(params.size()) != layout.size())
        vwt::detail::fail("save_model_dir: ", params.size(), " parameters given, the schedule needs ", layout.size());
    std::filesystem::create_directories(dir);
    std::vector<tensor_to_write> tensors;
    for (const auto& t : layout.tensors())
        tensors.push_back({t.name, t.shape, params.subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.numel()))});
    write_safetensors(dir / "model.safetensors", tensors, type);
    write_file_atomic(dir / "config.json", config_to_json(c, generator).dump(2) + "\n");
}

}  // namespace vwt::io
