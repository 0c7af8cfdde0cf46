// muP / standard random initialisation of a parameter buffer on the host, drawn from a seed the
// caller owns (semantics.md section 3).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "layout.hpp"

namespace vwt {

// The standard deviation each tensor is drawn with (semantics.md section 3).
// muP: sigma_i = range * sqrt(h / w_i); c_attn, c_fc, the MoE router: sigma_i / sqrt(m_width); both c_proj:
// sigma_i / sqrt(m_width) / sqrt(2L); wte, lm_head: range. Standard: range, c_proj / sqrt(2L).
// A fixed-width stream's c_attn and c_fc read h columns, not w_i: the authors undo the fan-in
// correction there (x sqrt(w_i / h)), so they are drawn with range / sqrt(m_width).
// The learned linear resize is an nn.Linear the authors' muP init does not touch: PyTorch's default,
// uniform on +-1/sqrt(fan_in) (std 1/sqrt(3 fan_in)), drawn uniform by initialize_parameters.
inline double init_std(const model_config& c, const tensor_info& t) {
    const double L = c.schedule.layers();
    const bool mup = c.param == parametrization::mup;
    const double sigma = t.layer >= 0 && mup
                             ? c.initializer_range * std::sqrt(static_cast<double>(c.schedule.dims.hidden) /
                                                               c.schedule.width(t.layer))
                             : c.initializer_range;
    const double width_div = mup ? std::sqrt(c.m_width) : 1.0;
    switch (t.role) {
        case tensor_role::embedding:
        case tensor_role::head: return c.initializer_range;
        case tensor_role::norm: return 0.0;
        case tensor_role::attn_in:
        case tensor_role::mlp_in:
            if (mup && c.schedule.dims.stream.fixed_width)
                return sigma * std::sqrt(static_cast<double>(c.schedule.width(t.layer)) / c.schedule.dims.hidden) / width_div;
            return sigma / width_div;
        case tensor_role::router: return sigma / width_div;
        case tensor_role::resize: return 1.0 / std::sqrt(3.0 * static_cast<double>(t.shape.back()));
        case tensor_role::attn_out:
        case tensor_role::mlp_out: return sigma / width_div / std::sqrt(2.0 * L);
    }
    return 0.0;
}

// Random initialisation from a caller-owned seed: normal(0, init_std) per tensor (the learned
// resize: uniform, see init_std), norm gains 1.
// Each tensor draws from its own generator seeded by (seed, tensor index), so the result does not
// depend on the order tensors are visited in.
template <class T>
void initialize_parameters(const model_config& c, const parameter_layout& layout, std::uint64_t seed,
                           std::vector<T>& params) {
    params.assign(static_cast<std::size_t>(layout.size()), T(0));
    std::size_t index = 0;
    for (const auto& t : layout.tensors()) {
        T* p = params.data() + t.offset;
        if (t.role == tensor_role::norm) {
            std::fill(p, p + t.numel(), T(1));
        } else {
            std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                              static_cast<std::uint32_t>(index)};
            std::mt19937_64 rng(seq);
            if (t.role == tensor_role::resize) {
                const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape.back()));
                std::uniform_real_distribution<double> uniform(-bound, bound);
                for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(uniform(rng));
            } else {
                std::normal_distribution<double> normal(0.0, init_std(c, t));
                for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(normal(rng));
            }
        }
        ++index;
    }
}

}  // namespace vwt
