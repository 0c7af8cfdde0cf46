// Cost accounting of a schedule, all constexpr: parameters by tensor group, forward and training
// FLOPs per token, KV-cache and weight bytes, and the same for the parameter-matched uniform twin.
#pragma once

#include <cstdint>

#include "layers/resize.hpp"
#include "model/config.hpp"
#include "schedule/schedule.hpp"
#include "schedule/solver.hpp"

namespace vwt {

using count_t = std::int64_t;

// Per-layer MoE expert intermediate size: the authors' int(round(w * intermediate / h)).
constexpr int moe_intermediate(const model_dims& d, int width) {
    return static_cast<int>(detail::round_half_even(static_cast<double>(width) * d.moe.intermediate / d.hidden));
}

// The tensors of one layer of width w (head_dim d = w/H) over s stream columns (s = w, or h for a
// fixed-width stream): exactly what a checkpoint holds.
struct layer_params {
    count_t attention = 0;  // c_attn s x (H + 2 Hkv) d, c_proj H d x s
    count_t mlp = 0;        // dense: c_fc s x 8w, c_proj 4w x s; MoE: router + experts
    count_t norms = 0;      // ln_1 and ln_2 gains (s each)
    count_t mlp_active = 0; // the part of mlp one token uses (== mlp when dense)
    constexpr count_t total() const { return attention + mlp + norms; }
};

template <width_schedule S>
constexpr layer_params layer_param_count(const S& s, int layer) {
    const auto& d = s.dims;
    const int width = s.width(layer);
    const count_t w = width, cols = stream_width(s, layer);
    const count_t head_dim = width / d.heads;
    layer_params p{};
    p.attention = cols * (d.heads + 2 * d.kv_heads) * head_dim + d.heads * head_dim * cols;
    if (d.moe.enabled()) {
        const count_t inter = moe_intermediate(d, width);
        const count_t expert = w * 2 * inter + inter * w;
        p.mlp = w * d.moe.experts + d.moe.experts * expert;
        p.mlp_active = w * d.moe.experts + d.moe.experts_per_token * expert;
    } else {
        p.mlp = cols * 8 * w + 4 * w * cols;
        p.mlp_active = p.mlp;
    }
    p.norms = 2 * cols;
    return p;
}

struct param_counts {
    count_t embedding = 0;   // wte: V x h (w_1 without original_input_width)
    count_t attention = 0;   // all layers
    count_t mlp = 0;         // all layers, every expert
    count_t norms = 0;       // all layers' ln_1, ln_2
    count_t final_norm = 0;  // ln_f: w_L (h for a fixed-width stream)
    count_t head = 0;        // lm_head: h x V (untied; see unembedding_width)
    count_t resize = 0;      // the learned linear resizes (resize_method::linear; account(model_config))
    count_t active = 0;      // what one token uses (MoE: only its experts)
    double matched = 0;      // the authors' count, the one the solver matches (no norms, no waste)
    constexpr count_t total() const { return embedding + attention + mlp + norms + final_norm + head + resize; }
};

struct cost_report {
    param_counts params{};
    double flops_per_token = 0;        // forward, at the given context
    double train_flops_per_token = 0;  // forward + backward = 3 x forward
    count_t kv_values_per_token = 0;   // sum_i 2 w_i Hkv / H
    count_t kv_bytes_per_token = 0;
    count_t weight_bytes = 0;
};

// The context the attention FLOPs are counted at and the bytes of one stored value.
struct accounting_options {
    int context = 0;        // 0: the schedule's max context
    int kv_dtype_bytes = 2;
    int weight_dtype_bytes = 2;
};

template <width_schedule S>
constexpr cost_report account(const S& s, accounting_options o = {}) {
    const auto& d = s.dims;
    const double ctx = o.context > 0 ? o.context : d.context;
    cost_report r{};
    auto& p = r.params;
    p.embedding = static_cast<count_t>(d.vocab) * embedding_width(s);
    p.head = static_cast<count_t>(unembedding_width(s)) * d.vocab;
    p.final_norm = final_norm_width(s);
    p.active = p.embedding + p.head + p.final_norm;
    double flops = 2.0 * p.head;
    for (int i = 0; i < s.layers(); ++i) {
        const int w = s.width(i);
        const auto lp = layer_param_count(s, i);
        p.attention += lp.attention;
        p.mlp += lp.mlp;
        p.norms += lp.norms;
        p.active += lp.attention + lp.mlp_active + lp.norms;
        flops += 2.0 * (lp.attention + lp.mlp_active) + 2.0 * 2.0 * ctx * w;
        r.kv_values_per_token += 2 * static_cast<count_t>(w) / d.heads * d.kv_heads;
    }
    struct widths_range {
        const S& s;
        struct iterator {
            const S* s; int i;
            constexpr double operator*() const { return s->width(i); }
            constexpr iterator& operator++() { ++i; return *this; }
            constexpr bool operator!=(const iterator& o) const { return i != o.i; }
        };
        constexpr iterator begin() const { return {&s, 0}; }
        constexpr iterator end() const { return {&s, s.layers()}; }
    };
    p.matched = solver::matched_parameter_count(d, widths_range{s});
    r.flops_per_token = flops;
    r.train_flops_per_token = 3.0 * flops;
    r.kv_bytes_per_token = r.kv_values_per_token * o.kv_dtype_bytes;
    r.weight_bytes = p.total() * o.weight_dtype_bytes;
    return r;
}

// A model's costs: its schedule's, plus what its resize adds -- the learned linear maps'
// parameters, and the products of the interpolate and linear projections (2 from x to per token
// each) in the FLOPs.
inline cost_report account(const model_config& c, accounting_options o = {}) {
    auto r = account(c.schedule, o);
    const residual_resize resize(c.schedule, c.resize);
    std::vector<residual_resize::projection> projections{resize.head_projection()};
    for (int i = 0; i < c.schedule.layers(); ++i) projections.push_back(resize.projected_before(i));
    double flops = 0;
    for (const auto& p : projections) {
        if (p.empty()) continue;
        flops += 2.0 * p.from * p.to;
        if (c.resize == resize_method::linear) r.params.resize += static_cast<count_t>(p.from) * p.to;
    }
    r.params.active += r.params.resize;
    r.flops_per_token += flops;
    r.train_flops_per_token = 3.0 * r.flops_per_token;
    r.weight_bytes = r.params.total() * o.weight_dtype_bytes;
    return r;
}

// The percentage by which `model` is below `reference` (positive: a saving).
constexpr double reduction_percent(double model, double reference) {
    return reference == 0 ? 0.0 : (1.0 - model / reference) * 100.0;
}

struct comparison {
    cost_report model{};
    cost_report uniform{};
};

template <width_schedule S>
constexpr comparison compare_with_uniform(const S& s, accounting_options o = {}) {
    return {account(s, o), account(uniform_twin(s), o)};
}

}  // namespace vwt
