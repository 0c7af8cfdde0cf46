// Everything besides the widths that fixes a model's function: parametrisation (muP multipliers
// or standard), norm epsilon, RoPE theta, the resize method, the MLP weight layout, special ids.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "../backend/policy.hpp"
#include "../schedule/schedule.hpp"

namespace vwt {

enum class parametrization {
    mup,       // the paper: m_emb, m_residual, m_width, attention scale 1/d
    standard,  // Llama-style: multipliers 1, attention scale 1/sqrt(d)
};

// How a layer wider than the stream before it grows the stream (the authors' expand_method). A
// narrower layer always truncates.
enum class resize_method {
    move_up,      // the paper: grown coordinates come back from the last layer that had them
    zero,         // grown coordinates start at zero
    interpolate,  // the whole vector linearly interpolated to the new width (torch's F.interpolate, mode linear)
    linear,       // a learned linear map of the whole vector, one per widening (nn.Linear, no bias)
    gaussian,     // grown coordinates drawn per token from N(mean, std) of its current values
};

constexpr const char* resize_method_name(resize_method r) {
    switch (r) {
        case resize_method::move_up: return "move_up";
        case resize_method::zero: return "zero";
        case resize_method::interpolate: return "interpolate";
        case resize_method::linear: return "linear";
        case resize_method::gaussian: return "gaussian";
    }
    return "";
}

inline constexpr resize_method all_resize_methods[] = {resize_method::move_up, resize_method::zero, resize_method::interpolate,
                                                       resize_method::linear, resize_method::gaussian};

// The method of an expand_method name; nothing for a name vwt does not implement.
inline std::optional<resize_method> resize_method_named(std::string_view name) {
    for (auto r : all_resize_methods)
        if (name == resize_method_name(r)) return r;
    return std::nullopt;
}


struct model_config {
    dynamic_schedule schedule{};
    parametrization param = parametrization::mup;
    double m_emb = 12.0;
    double m_residual = 0.22;
    double m_width = 8.0;
    double initializer_range = 0.1;
    double norm_eps = 1e-5;
    double rope_theta = 10000.0;
    resize_method resize = resize_method::move_up;
    bool interpolate_align_corners = false;  // resize_method::interpolate: F.interpolate's align_corners
    // resize_method::gaussian: the seed of its noise (detail/gaussian_noise.hpp); the caller's.
    std::uint64_t resize_seed = 0;
    // How c_fc's 8w output rows split into the SwiGLU up (u) and gate (g) halves: split (rows
    // [0, 4w) u, [4w, 8w) g, the lm_engine revision the authors use) or interleaved (u, g alternate).
    swiglu_layout mlp = swiglu_layout::split;
    // Per-layer attention score multipliers as a checkpoint states them (the authors'
    // `attention_multiplier`); empty: derived from the parametrisation (1/d or 1/sqrt(d)).
    std::vector<double> attention_multipliers{};
    // MoE models: the weight of the routers' auxiliary load-balancing loss in training (the
    // authors' router_aux_loss_coef; moe_1b3b: 0.01).
    double router_aux_loss_coef = 0.01;
    int bos_token_id = -1;  // special ids; -1: the model has none
    int eos_token_id = -1;
    int pad_token_id = -1;

    // The paper's dense configs: m_emb 12, m_residual 0.22, m_width 8, init range 0.1, 1/d.
    static model_config mup(dynamic_schedule s) {
        model_config c;
        c.schedule = std::move(s);
        return c;
    }
    // Multipliers 1 and 1/sqrt(d): with a uniform schedule this is a Llama-style model.
    static model_config standard(dynamic_schedule s) {
        model_config c;
        c.schedule = std::move(s);
        c.param = parametrization::standard;
        c.m_emb = c.m_residual = c.m_width = 1.0;
        c.initializer_range = 0.02;
        return c;
    }

    double attention_scale(int layer) const {
        if (!attention_multipliers.empty()) return attention_multipliers.at(static_cast<std::size_t>(layer));
        const double d = schedule.head_dim(layer);
        return param == parametrization::mup ? 1.0 / d : 1.0 / std::sqrt(d);
    }
};

}  // namespace vwt
