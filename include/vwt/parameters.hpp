// All of a model's parameters in one contiguous buffer, with a per-tensor layout (name, shape,
// offset) under the authors' state-dict names; and the muP / standard random initialisation.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "error.hpp"
#include "model_config.hpp"

namespace vwt {

enum class tensor_role {
    embedding,   // transformer.wte
    norm,        // ln_1, ln_2, ln_f gains
    attn_in,     // c_attn
    attn_out,    // sequence_mixer.c_proj
    mlp_in,      // c_fc
    mlp_out,     // mlp_block.c_proj
    head,        // lm_head
};

struct tensor_info {
    std::string name;
    std::vector<std::int64_t> shape;
    std::int64_t offset = 0;  // in elements, into the parameter buffer
    tensor_role role{};
    int layer = -1;           // -1 for embedding, final norm and head

    std::int64_t numel() const {
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        return n;
    }
};

class parameter_layout {
public:
    explicit parameter_layout(const model_config& c) {
        const auto& s = c.schedule;
        const auto& d = s.dims;
        if (d.moe.enabled()) detail::fail("MoE layers are not implemented by the model yet (schedule has ",
                                          d.moe.experts, " experts)");
        add("transformer.wte.weight", {d.vocab, d.hidden}, tensor_role::embedding, -1);
        for (int i = 0; i < s.layers(); ++i) {
            const std::int64_t w = s.width(i), hd = s.head_dim(i);
            const std::string p = "transformer.h." + std::to_string(i) + ".";
            add(p + "ln_1.weight", {w}, tensor_role::norm, i);
            add(p + "sequence_mixer.c_attn.weight", {(d.heads + 2 * d.kv_heads) * hd, w}, tensor_role::attn_in, i);
            add(p + "sequence_mixer.c_proj.weight", {w, d.heads * hd}, tensor_role::attn_out, i);
            add(p + "ln_2.weight", {w}, tensor_role::norm, i);
            add(p + "mlp_block.c_fc.weight", {8 * w, w}, tensor_role::mlp_in, i);
            add(p + "mlp_block.c_proj.weight", {w, 4 * w}, tensor_role::mlp_out, i);
        }
        add("transformer.ln_f.weight", {s.width(s.layers() - 1)}, tensor_role::norm, -1);
        add("lm_head.weight", {d.vocab, d.hidden}, tensor_role::head, -1);
    }

    const std::vector<tensor_info>& tensors() const { return tensors_; }
    std::int64_t size() const { return size_; }
    const tensor_info* find(const std::string& name) const {
        const auto it = by_name_.find(name);
        return it == by_name_.end() ? nullptr : &tensors_[it->second];
    }
    const tensor_info& at(const std::string& name) const {
        const auto* t = find(name);
        if (!t) detail::fail("no tensor named '", name, "' in the model");
        return *t;
    }

private:
    void add(std::string name, std::vector<std::int64_t> shape, tensor_role role, int layer) {
        tensor_info t{std::move(name), std::move(shape), size_, role, layer};
        size_ += t.numel();
        by_name_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }
    std::vector<tensor_info> tensors_;
    std::unordered_map<std::string, std::size_t> by_name_;
    std::int64_t size_ = 0;
};

// The standard deviation each tensor is drawn with (semantics.md section 3).
// muP: sigma_i = range * sqrt(h / w_i); c_attn, c_fc: sigma_i / sqrt(m_width); both c_proj:
// sigma_i / sqrt(m_width) / sqrt(2L); wte, lm_head: range. Standard: range, c_proj / sqrt(2L).
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
        case tensor_role::mlp_in: return sigma / width_div;
        case tensor_role::attn_out:
        case tensor_role::mlp_out: return sigma / width_div / std::sqrt(2.0 * L);
    }
    return 0.0;
}

// Random initialisation from a caller-owned seed: normal(0, init_std) per tensor, norm gains 1.
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
            std::normal_distribution<double> normal(0.0, init_std(c, t));
            for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(normal(rng));
        }
        ++index;
    }
}

}  // namespace vwt
