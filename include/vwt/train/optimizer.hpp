// AdamW over the contiguous parameter buffer with the authors' muP groups, learning-rate
// schedules (constant, cosine, lm_engine's power), and gradient clipping by global norm; the
// updates are ops of the backend policy, the schedules plain host arithmetic.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "../backend/policy.hpp"
#include "../params/layout.hpp"

namespace vwt::train {

struct adamw_options {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-10;
    double weight_decay = 0.1;  // decoupled; applied to every matrix, never to norm gains
};

// Per-tensor learning-rate multiplier and whether it decays: muP trains the hidden matrices
// (c_attn, both c_proj, c_fc, the MoE router) at lr / m_width; embeddings, head, norms and the
// learned linear resize (an nn.Linear the authors do not mark as muP) at lr.
struct tensor_group {
    double lr_scale = 1.0;
    bool decay = true;
};

inline tensor_group group_of(const model_config& c, const tensor_info& t) {
    tensor_group g;
    g.decay = t.role != tensor_role::norm;
    const bool hidden = t.role == tensor_role::attn_in || t.role == tensor_role::attn_out || t.role == tensor_role::mlp_in ||
                        t.role == tensor_role::mlp_out || t.role == tensor_role::router;
    if (c.param == parametrization::mup && hidden) g.lr_scale = 1.0 / c.m_width;
    return g;
}

// AdamW over the contiguous parameter buffer, per tensor group, as ops of the policy; the moments
// live in the policy's memory in its state type.
template <class B>
class adamw {
public:
    using T = typename B::compute_type;
    using S = typename B::state_type;
    using M = typename B::memory;

    adamw(const typename B::context& ctx, const model_config& c, const parameter_layout& layout, adamw_options o = {})
        : o_(o), m_(layout.size()), v_(layout.size()) {
        for (const auto& t : layout.tensors()) groups_.push_back({t.offset, t.numel(), group_of(c, t)});
        reset(ctx);
    }

    std::int64_t steps() const { return step_; }
    vector_view<const S, M> first_moment() const { return m_.view(); }
    vector_view<const S, M> second_moment() const { return v_.view(); }
    // Zeroes the moments (a fresh optimizer) or restores those saved from the views above.
    void reset(const typename B::context& ctx) {
        const std::vector<S> zeros(static_cast<std::size_t>(m_.size()), S(0));
        B::upload(ctx, std::span<const S>(zeros), m_.view());
        B::upload(ctx, std::span<const S>(zeros), v_.view());
        step_ = 0;
    }
    void restore(const typename B::context& ctx, std::span<const S> m, std::span<const S> v, std::int64_t steps) {
        if (static_cast<index_t>(m.size()) != m_.size() || static_cast<index_t>(v.size()) != v_.size())
            vwt::detail::fail("adamw: optimizer state of the wrong size");
        B::upload(ctx, m, m_.view());
        B::upload(ctx, v, v_.view());
        step_ = steps;
    }

    // One step at learning rate lr (torch.optim.AdamW's update, per-tensor lr and decay).
    void step(const typename B::context& ctx, vector_view<typename B::weight_type, M> params, vector_view<const T, M> grad, double lr) {
        if (params.size() != m_.size() || grad.size() != m_.size()) vwt::detail::fail("adamw: buffers of the wrong size");
        ++step_;
        const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(step_));
        const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(step_));
        for (const auto& g : groups_) {
            const double glr = lr * g.group.lr_scale;
            const adamw_update u{o_.beta1, o_.beta2, o_.eps, g.group.decay ? 1 - glr * o_.weight_decay : 1.0, glr / bc1, std::sqrt(bc2)};
            B::adamw(ctx, params.subview(g.offset, g.size), grad.subview(g.offset, g.size), m_.view().subview(g.offset, g.size),
                     v_.view().subview(g.offset, g.size), u);
        }
    }

private:
    struct span_group {
        std::int64_t offset, size;
        tensor_group group;
    };
    adamw_options o_;
    std::vector<span_group> groups_;
    typename B::template buffer<S> m_, v_;
    std::int64_t step_ = 0;
};

// Scales `grad` so that its global L2 norm is at most max_norm (0: no clipping); returns the norm
// before clipping. `sum` is a one-element buffer in the policy's memory.
template <class B>
double clip_by_global_norm(const typename B::context& ctx, vector_view<typename B::compute_type, typename B::memory> grad,
                           double max_norm, vector_view<double, typename B::memory> sum) {
    using T = typename B::compute_type;
    B::sum_squares(ctx, vector_view<const T, typename B::memory>(grad), sum);
    double sq = 0;
    B::download(ctx, vector_view<const double, typename B::memory>(sum.first(1)), std::span<double>(&sq, 1));
    const double norm = std::sqrt(sq);
    if (max_norm > 0 && norm > max_norm) B::scale(ctx, grad, static_cast<T>(max_norm / (norm + 1e-6)));
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
