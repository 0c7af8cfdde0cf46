// AdamW over the contiguous parameter buffer with the authors' muP groups, learning-rate
// schedules (constant, cosine, lm_engine's power), and gradient clipping by global norm.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "../parameters.hpp"

namespace vwt::train {

struct adamw_options {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-10;
    double weight_decay = 0.1;  // decoupled; applied to every matrix, never to norm gains
};

// Per-tensor learning-rate multiplier and whether it decays: muP trains the hidden matrices
// (c_attn, both c_proj, c_fc) at lr / m_width; embeddings, head and norms at lr.
struct tensor_group {
    double lr_scale = 1.0;
    bool decay = true;
};

inline tensor_group group_of(const model_config& c, const tensor_info& t) {
    tensor_group g;
    g.decay = t.role != tensor_role::norm;
    const bool hidden = t.role == tensor_role::attn_in || t.role == tensor_role::attn_out ||
                        t.role == tensor_role::mlp_in || t.role == tensor_role::mlp_out;
    if (c.param == parametrization::mup && hidden) g.lr_scale = 1.0 / c.m_width;
    return g;
}

template <class T>
class adamw {
public:
    adamw(const model_config& c, const parameter_layout& layout, adamw_options o = {})
        : o_(o), m_(static_cast<std::size_t>(layout.size())), v_(static_cast<std::size_t>(layout.size())) {
        for (const auto& t : layout.tensors()) groups_.push_back({t.offset, t.numel(), group_of(c, t)});
    }

    std::int64_t steps() const { return step_; }
    std::span<const T> first_moment() const { return m_; }
    std::span<const T> second_moment() const { return v_; }
    // Restores the state saved from first_moment(), second_moment() and steps().
    void restore(std::span<const T> m, std::span<const T> v, std::int64_t steps) {
        if (m.size() != m_.size() || v.size() != v_.size()) vwt::detail::fail("adamw: optimizer state of the wrong size");
        m_.assign(m.begin(), m.end());
        v_.assign(v.begin(), v.end());
        step_ = steps;
    }

    // One step at learning rate lr (torch.optim.AdamW's update, per-tensor lr and decay).
    void step(std::span<T> params, std::span<const T> grad, double lr) {
        if (params.size() != m_.size() || grad.size() != m_.size()) vwt::detail::fail("adamw: buffers of the wrong size");
        ++step_;
        const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(step_));
        const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(step_));
        for (const auto& g : groups_) {
            const double glr = lr * g.group.lr_scale;
            const T decay = static_cast<T>(g.group.decay ? 1 - glr * o_.weight_decay : 1.0);
            const T step_size = static_cast<T>(glr / bc1), root_bc2 = static_cast<T>(std::sqrt(bc2));
            for (std::int64_t i = g.offset; i < g.offset + g.size; ++i) {
                const auto k = static_cast<std::size_t>(i);
                m_[k] = static_cast<T>(o_.beta1) * m_[k] + static_cast<T>(1 - o_.beta1) * grad[k];
                v_[k] = static_cast<T>(o_.beta2) * v_[k] + static_cast<T>(1 - o_.beta2) * grad[k] * grad[k];
                params[k] = params[k] * decay - step_size * m_[k] / (std::sqrt(v_[k]) / root_bc2 + static_cast<T>(o_.eps));
            }
        }
    }

private:
    struct span_group {
        std::int64_t offset, size;
        tensor_group group;
    };
    adamw_options o_;
    std::vector<span_group> groups_;
    std::vector<T> m_, v_;
    std::int64_t step_ = 0;
};

// Scales `grad` so that its global L2 norm is at most max_norm; returns the norm before clipping.
template <class T>
double clip_by_global_norm(std::span<T> grad, double max_norm) {
    double sq = 0;
    for (T g : grad) sq += static_cast<double>(g) * g;
    const double norm = std::sqrt(sq);
    if (max_norm > 0 && norm > max_norm) {
        const T scale = static_cast<T>(max_norm / (norm + 1e-6));
        for (T& g : grad) g *= scale;
    }
    return norm;
}

enum class lr_decay { constant, cosine, power };

// Linear warmup over warmup_steps, then: constant; cosine from the peak to min_lr at total_steps;
// or lm_engine's power decay min(lr, a * tokens_seen^b) with tokens_seen = step * tokens_per_step.
// During warmup the rate rises linearly to the value the decay has at the end of warmup.
struct lr_schedule {
    lr_decay decay = lr_decay::power;
    double lr = 0.01;
    std::int64_t warmup_steps = 0;
    std::int64_t total_steps = 1;
    double min_lr = 0.0;                 // cosine
    double a = 512, b = -0.566;          // power
    double tokens_per_step = 524288;     // power: the configs' c

    double after_warmup(std::int64_t step) const {
        switch (decay) {
            case lr_decay::constant: return lr;
            case lr_decay::cosine: {
                const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
                const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
                return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(3.14159265358979323846 * progress));
            }
            case lr_decay::power:
                return std::min(lr, a * std::pow(static_cast<double>(std::max<std::int64_t>(step, 1)) * tokens_per_step, b));
        }
        return lr;
    }
    // The rate of step `step` (1-based: the first update is step 1).
    double at(std::int64_t step) const {
        if (step < warmup_steps) return after_warmup(warmup_steps) * static_cast<double>(step) / static_cast<double>(warmup_steps);
        return after_warmup(step);
    }
};

}  // namespace vwt::train
