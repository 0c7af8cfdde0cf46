// The parameter layout: every tensor of a model (name, shape, offset, role, layer) under the
// authors' state-dict names, in one contiguous buffer; and views of one tensor bound by name.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "../accounting.hpp"
#include "../error.hpp"
#include "../layers/resize.hpp"
#include "../model/config.hpp"
#include "../tensor/view.hpp"
#include "../tensor/weight_format.hpp"

namespace vwt {

// The name prefix of layer i's tensors.
inline std::string layer_prefix(int layer) { return "transformer.h." + std::to_string(layer) + "."; }

enum class tensor_role {
    embedding,   // transformer.wte
    norm,        // ln_1, ln_2, ln_f gains
    attn_in,     // c_attn
    attn_out,    // sequence_mixer.c_proj
    mlp_in,      // c_fc (MoE: the experts' c_fc, stacked)
    mlp_out,     // mlp_block.c_proj (MoE: the experts' c_proj, stacked)
    router,      // MoE: mlp_block.gate
    head,        // lm_head
    resize,      // resize_method::linear: transformer.linear_layers.linear_for_layer{i} / linear_for_unembed
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
        add("transformer.wte.weight", {d.vocab, embedding_width(s)}, tensor_role::embedding, -1);
        // resize_method::linear: a learned [to x from] map wherever the stream widens, stored with the
        // layer it feeds (the head's between ln_f and lm_head), so each layer's tensors stay contiguous.
        const residual_resize resize(s, c.resize);
        const bool learned = c.resize == resize_method::linear;
        for (int i = 0; i < s.layers(); ++i) {
            if (const auto p = resize.projected_before(i); learned && !p.empty())
                add(linear_resize_name(i), {p.to, p.from}, tensor_role::resize, i);
            // int64 throughout: every product below fits for widths up to schedule_limits::width.
            // cols: the stream columns the block reads and writes (w, or h for a fixed-width stream).
            const std::int64_t w = s.width(i), cols = stream_width(s, i), hd = s.head_dim(i), heads = d.heads,
                               kv_heads = d.kv_heads;
            const std::string p = layer_prefix(i);
            add(p + "ln_1.weight", {cols}, tensor_role::norm, i);
            add(p + "sequence_mixer.c_attn.weight", {(heads + 2 * kv_heads) * hd, cols}, tensor_role::attn_in, i);
            add(p + "sequence_mixer.c_proj.weight", {cols, heads * hd}, tensor_role::attn_out, i);
            add(p + "ln_2.weight", {cols}, tensor_role::norm, i);
            if (d.moe.enabled()) {  // lm_engine's MoE block: one parameter per projection, experts stacked first
                const std::int64_t E = d.moe.experts, inter = moe_intermediate(d, s.width(i));
                add(p + "mlp_block.gate.weight", {E, w}, tensor_role::router, i);
                add(p + "mlp_block.c_fc.weight", {E, 2 * inter, w}, tensor_role::mlp_in, i);
                add(p + "mlp_block.c_proj.weight", {E, w, inter}, tensor_role::mlp_out, i);
            } else {
                add(p + "mlp_block.c_fc.weight", {8 * w, cols}, tensor_role::mlp_in, i);
                add(p + "mlp_block.c_proj.weight", {cols, 4 * w}, tensor_role::mlp_out, i);
            }
        }
        add("transformer.ln_f.weight", {final_norm_width(s)}, tensor_role::norm, -1);
        if (const auto p = resize.head_projection(); learned && !p.empty())
            add(linear_resize_name(-1), {p.to, p.from}, tensor_role::resize, -1);
        add("lm_head.weight", {d.vocab, unembedding_width(s)}, tensor_role::head, -1);
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

// Whether every row of every tensor is a whole number of W's items (q8: blocks of 32 weights);
// the error names the first tensor that is not.
template <class W>
void check_whole_items(const parameter_layout& layout) {
    constexpr index_t per_item = elements_per_item<W>;
    for (const auto& t : layout.tensors())
        if (t.shape.back() % per_item != 0)
            detail::fail("tensor '", t.name, "': rows of ", t.shape.back(), " weights are not whole blocks of ", per_item,
                         " (q8 weights need every width, and heads times head dim, to be a multiple of ", per_item, ")");
}

// Float parameters laid out by `layout` in the weight format W (float, bf16, q8_block), checking
// first that every tensor's rows are whole items of W.
template <class W>
std::vector<W> convert_parameters(const parameter_layout& layout, std::span<const float> params) {
    if (static_cast<std::int64_t>(params.size()) != layout.size())
        detail::fail("converting parameters: ", params.size(), " given, the layout has ", layout.size());
    check_whole_items<W>(layout);
    return convert_elements<W>(params);
}

// Views of one tensor inside a buffer laid out like the parameters (parameters, gradients,
// optimizer moments share the layout), bound once by name when a layer is built. In a buffer of
// q8 blocks a view counts blocks: a matrix's columns are its rows' blocks.
template <class E, memory_space M>
class tensor_binder {
public:
    static constexpr index_t per_item = elements_per_item<E>;

    tensor_binder(const parameter_layout& layout, vector_view<E, M> buffer) : layout_(layout), buffer_(buffer) {
        if (buffer.size() * per_item != layout.size())
            detail::fail("binding tensors: a buffer of ", buffer.size() * per_item, " weights for a layout of ", layout.size());
    }
    matrix_view<E, M> matrix(const std::string& name) const {
        const auto& t = layout_.at(name);
        if (t.shape.size() != 2) detail::fail("tensor '", name, "' is not a matrix");
        if (t.shape[1] % per_item != 0)
            detail::fail("tensor '", name, "': rows of ", t.shape[1], " weights are not whole blocks of ", per_item,
                         " (q8 weights need every width and head count times head dim to be a multiple of ", per_item, ")");
        return buffer_.subview(t.offset / per_item, t.numel() / per_item).as_matrix(t.shape[0], t.shape[1] / per_item);
    }
    // A tensor stacked on a leading expert axis, [E, r, c], as the matrix [E r x c].
    matrix_view<E, M> stacked_matrix(const std::string& name) const {
        const auto& t = layout_.at(name);
        if (t.shape.size() != 3) detail::fail("tensor '", name, "' is not a stack of matrices");
        if (t.shape[2] % per_item != 0)
            detail::fail("tensor '", name, "': rows of ", t.shape[2], " weights are not whole blocks of ", per_item);
        return buffer_.subview(t.offset / per_item, t.numel() / per_item).as_matrix(t.shape[0] * t.shape[1], t.shape[2] / per_item);
    }
    vector_view<E, M> vector(const std::string& name) const {
        const auto& t = layout_.at(name);
        if (t.numel() % per_item != 0)
            detail::fail("tensor '", name, "': ", t.numel(), " weights are not whole blocks of ", per_item,
                         " (q8 weights need every width to be a multiple of ", per_item, ")");
        return buffer_.subview(t.offset / per_item, t.numel() / per_item);
    }
    const parameter_layout& layout() const { return layout_; }

private:
    const parameter_layout& layout_;
    vector_view<E, M> buffer_;
};

}  // namespace vwt
