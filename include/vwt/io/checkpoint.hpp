// A model directory: config.json (HF style, the authors' field names plus an explicit `widths`
// list) and model.safetensors (F32, F16 or BF16, the authors' state-dict names).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../params/layout.hpp"
#include "config.hpp"
#include "json.hpp"
#include "safetensors.hpp"

namespace vwt::io {

struct loaded_model {
    model_config config;
    std::vector<float> params;
};

// Reads DIR/config.json and DIR/model.safetensors. The config is checked against vwt's limits and
// the weights file's header against the config (every tensor present, with the shape the schedule
// gives and a float dtype, and nothing else) before the parameters are allocated.
inline loaded_model load_model_dir(const std::filesystem::path& dir, const log_function& log = {}) {
    const auto config_path = (dir / "config.json").string();
    const auto weights_path = (dir / "model.safetensors").string();
    if (!std::filesystem::is_directory(dir)) vwt::detail::fail("model directory '", dir.string(), "' does not exist");
    const auto config_bytes = read_file_bytes(config_path, max_config_bytes);
    const auto j = parse_json(std::span(reinterpret_cast<const char*>(config_bytes.data()), config_bytes.size()),
                              "config '" + config_path + "'");
    loaded_model m{config_from_json(j, config_path, log), {}};
    const parameter_layout layout(m.config);
    const auto bytes = read_file_bytes(weights_path);
    const safetensors_view st(bytes, weights_path);
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
        if (!is_float(e->type))
            vwt::detail::fail("safetensors '", weights_path, "': tensor '", t.name, "' has dtype ", info(e->type).name,
                              "; F32, F16, BF16 or F64 expected");
    }
    for (const auto& e : st.tensors())
        if (!layout.find(e.name)) vwt::detail::fail("safetensors '", weights_path, "': unexpected tensor '", e.name, "'");
    m.params.resize(static_cast<std::size_t>(layout.size()));
    for (const auto& t : layout.tensors()) st.read_as(*st.find(t.name), m.params.data() + t.offset);
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
