// Human and machine reports of a schedule's costs beside its uniform twin: a text table, a JSON
// object (the keys `vwt info --json` prints) and an SVG picture of both width schedules.
#pragma once

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../accounting.hpp"
#include "../schedule/schedule.hpp"
#include "text.hpp"

namespace vwt::report {

struct schedule_report_input {
    dynamic_schedule model;
    int base_width = 0;           // the solver's base width (0 for explicit widths)
    accounting_options options{};
    std::string name;             // preset name or "custom"
};

namespace detail {
inline std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}
inline std::string millions(double v) { return fixed(v / 1e6, 2) + " M"; }
}  // namespace detail

inline nlohmann::ordered_json schedule_report_json(const schedule_report_input& in) {
    const auto& s = in.model;
    const auto c = compare_with_uniform(s, in.options);
    nlohmann::ordered_json j;
    j["name"] = in.name;
    j["layers"] = s.dims.layers;
    j["hidden_size"] = s.dims.hidden;
    j["heads"] = s.dims.heads;
    j["kv_heads"] = s.dims.kv_heads;
    j["vocab"] = s.dims.vocab;
    j["context"] = s.dims.context;
    if (s.dims.moe.enabled())
        j["moe"] = {{"experts", s.dims.moe.experts},
                    {"experts_per_token", s.dims.moe.experts_per_token},
                    {"intermediate", s.dims.moe.intermediate}};
    j["widths"] = s.widths;
    j["fixed_residual_width"] = s.dims.stream.fixed_width;
    j["embedding_width"] = embedding_width(s);
    j["unembedding_width"] = unembedding_width(s);
    j["base_width"] = in.base_width;
    j["residual_width"] = s.residual_width;
    j["accounting_context"] = in.options.context > 0 ? in.options.context : s.dims.context;
    j["params"] = c.model.params.total();
    j["params_uniform"] = c.uniform.params.total();
    j["params_matched"] = c.model.params.matched;
    j["params_matched_uniform"] = c.uniform.params.matched;
    j["params_active"] = c.model.params.active;
    j["params_active_uniform"] = c.uniform.params.active;
    j["flops_per_token"] = c.model.flops_per_token;
    j["flops_per_token_uniform"] = c.uniform.flops_per_token;
    j["train_flops_per_token"] = c.model.train_flops_per_token;
    j["train_flops_per_token_uniform"] = c.uniform.train_flops_per_token;
    j["kv_dtype_bytes"] = in.options.kv_dtype_bytes;
    j["kv_bytes_per_token"] = c.model.kv_bytes_per_token;
    j["kv_bytes_per_token_uniform"] = c.uniform.kv_bytes_per_token;
    j["weight_dtype_bytes"] = in.options.weight_dtype_bytes;
    j["weight_bytes"] = c.model.weight_bytes;
    j["weight_bytes_uniform"] = c.uniform.weight_bytes;
    j["reduction_percent"] = {
        {"params", reduction_percent(c.model.params.total(), c.uniform.params.total())},
        {"flops_per_token", reduction_percent(c.model.flops_per_token, c.uniform.flops_per_token)},
        {"kv_bytes_per_token", reduction_percent(c.model.kv_bytes_per_token, c.uniform.kv_bytes_per_token)},
        {"weight_bytes", reduction_percent(c.model.weight_bytes, c.uniform.weight_bytes)}};
    auto& layers = j["per_layer"] = nlohmann::ordered_json::array();
    for (int i = 0; i < s.layers(); ++i) {
        const auto lp = layer_param_count(s, i);
        layers.push_back({{"layer", i + 1},
                          {"width", s.width(i)},
                          {"head_dim", s.head_dim(i)},
                          {"attention_params", lp.attention},
                          {"mlp_params", lp.mlp},
                          {"norm_params", lp.norms}});
    }
    return j;
}

inline std::string schedule_report_table(const schedule_report_input& in) {
    const auto& s = in.model;
    const auto c = compare_with_uniform(s, in.options);
    std::ostringstream o;
    o << "schedule " << in.name << ": L " << s.dims.layers << ", h " << s.dims.hidden << ", heads "
      << s.dims.heads << " (kv " << s.dims.kv_heads << "), vocab " << s.dims.vocab << ", context "
      << s.dims.context;
    if (s.dims.moe.enabled())
        o << ", MoE " << s.dims.moe.experts << " experts (top " << s.dims.moe.experts_per_token
          << ", intermediate " << s.dims.moe.intermediate << " at h)";
    if (s.dims.stream.fixed_width) o << ", fixed-width residual stream (h " << s.dims.hidden << " in every block)";
    if (embedding_width(s) != s.dims.hidden) o << ", embedding width " << embedding_width(s);
    if (unembedding_width(s) != s.dims.hidden) o << ", unembedding width " << unembedding_width(s);
    o << "\nbase width " << in.base_width << ", residual width " << s.residual_width << "\n\n";
    char line[256];
    std::snprintf(line, sizeof line, "%5s %6s %8s %14s %14s %10s\n", "layer", "width", "head_dim",
                  "attention", "mlp", "kv/token");
    o << line;
    for (int i = 0; i < s.layers(); ++i) {
        const auto lp = layer_param_count(s, i);
        std::snprintf(line, sizeof line, "%5d %6d %8d %14lld %14lld %10lld\n", i + 1, s.width(i),
                      s.head_dim(i), static_cast<long long>(lp.attention), static_cast<long long>(lp.mlp),
                      static_cast<long long>(2LL * s.width(i) / s.dims.heads * s.dims.kv_heads));
        o << line;
    }
    const auto row = [&](const char* what, double model, double uniform, bool as_millions) {
        const auto fmt = [&](double v) { return as_millions ? detail::millions(v) : detail::fixed(v, 0); };
        std::snprintf(line, sizeof line, "%-28s %18s %18s %9s%%\n", what, fmt(model).c_str(),
                      fmt(uniform).c_str(), detail::fixed(model == uniform ? 0.0 : -reduction_percent(model, uniform), 2).c_str());
        o << line;
    };
    std::snprintf(line, sizeof line, "\n%-28s %18s %18s %10s\n", "", "><former", "uniform", "change");
    o << line;
    const auto& m = c.model.params;
    const auto& u = c.uniform.params;
    row("params: embedding", m.embedding, u.embedding, true);
    row("params: attention", m.attention, u.attention, true);
    row("params: mlp", m.mlp, u.mlp, true);
    row("params: layer norms", m.norms, u.norms, true);
    row("params: final norm", m.final_norm, u.final_norm, false);
    row("params: lm head", m.head, u.head, true);
    row("params: total (built)", m.total(), u.total(), true);
    row("params: matched (authors')", m.matched, u.matched, true);
    if (s.dims.moe.enabled()) row("params: active per token", m.active, u.active, true);
    const int ctx = in.options.context > 0 ? in.options.context : s.dims.context;
    row(("fwd FLOPs/token @" + std::to_string(ctx)).c_str(), c.model.flops_per_token,
        c.uniform.flops_per_token, true);
    row("train FLOPs/token", c.model.train_flops_per_token, c.uniform.train_flops_per_token, true);
    row(("KV bytes/token (" + std::to_string(in.options.kv_dtype_bytes) + " B/value)").c_str(),
        c.model.kv_bytes_per_token, c.uniform.kv_bytes_per_token, false);
    row(("weight bytes (" + std::to_string(in.options.weight_dtype_bytes) + " B/value)").c_str(),
        c.model.weight_bytes, c.uniform.weight_bytes, true);
    return o.str();
}

// Both schedules as centred horizontal bars, layer 1 at the bottom (the input side), as the
// paper draws its ><former.
inline std::string schedule_svg(const dynamic_schedule& s, const std::string& title) {
    const int L = s.layers();
    const double widest = std::max(s.max_width, s.dims.hidden);
    const double panel = 320, bar_h = 14, gap = 4, top = 48, left = 40, label_w = 44;
    const double height = top + L * (bar_h + gap) + 40;
    const double width = left + 2 * (panel + label_w) + 40;
    std::ostringstream o;
    o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << width / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" << xml_text(title)
      << "</text>\n";
    const auto draw = [&](double x0, const char* name, const char* colour, auto width_of) {
        o << "<text x=\"" << x0 + label_w + panel / 2 << "\" y=\"38\" text-anchor=\"middle\">" << xml_text(name)
          << "</text>\n";
        for (int i = 0; i < L; ++i) {
            const double y = top + (L - 1 - i) * (bar_h + gap);
            const double w = width_of(i) / widest * panel;
            o << "<text x=\"" << x0 + label_w - 6 << "\" y=\"" << y + bar_h - 3
              << "\" text-anchor=\"end\">" << i + 1 << "</text>"
              << "<rect x=\"" << x0 + label_w + (panel - w) / 2 << "\" y=\"" << y << "\" width=\"" << w
              << "\" height=\"" << bar_h << "\" fill=\"" << colour << "\"><title>layer " << i + 1
              << ": width " << width_of(i) << "</title></rect>"
              << "<text x=\"" << x0 + label_w + panel / 2 << "\" y=\"" << y + bar_h - 3
              << "\" text-anchor=\"middle\" fill=\"white\">" << width_of(i) << "</text>\n";
        }
    };
    draw(left, "><former", "#c0392b", [&](int i) { return s.width(i); });
    draw(left + panel + label_w + 20, "uniform twin", "#2c3e50", [&](int) { return s.dims.hidden; });
    o << "<text x=\"" << left << "\" y=\"" << height - 12 << "\">layer 1 (input) at the bottom; bar length = width"
      << "</text>\n</svg>\n";
    return o.str();
}

}  // namespace vwt::report
