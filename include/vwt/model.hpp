// The model: embedding, a schedule's blocks and the final norm + head over one residual buffer.
// static_model<Backend, S> holds the blocks of a compile-time schedule as a std::tuple of
// fixed-width blocks; model<Backend> holds the same blocks, built at run time, in a vector.
#pragma once

#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "layers/block.hpp"
#include "parameters.hpp"

namespace vwt {

// One sequence of a forward call: the tokens to append and the cache they are appended to.
template <class T>
struct sequence_input {
    kv_cache<T>* cache = nullptr;
    std::span<const int> tokens;
};

enum class logits_mode {
    last,  // one row per sequence: its last token (generation)
    all,   // one row per input token (scoring, parity checks)
};

namespace detail {

inline block_hyper hyper_of(const model_config& c, int layer) {
    return {layer, c.schedule.dims.heads, c.schedule.dims.kv_heads, c.attention_scale(layer), c.m_residual,
            c.norm_eps, c.rope_theta, c.mlp};
}

template <class Backend, class Width>
block<Backend, Width> make_block(const model_config& c, const parameter_layout& l,
                                 const typename Backend::scalar* p, int i, Width w) {
    const std::string pre = "transformer.h." + std::to_string(i) + ".";
    const auto at = [&](const char* name) { return p + l.at(pre + name).offset; };
    return block<Backend, Width>(w, hyper_of(c, i),
                                 {at("ln_1.weight"), at("sequence_mixer.c_attn.weight"),
                                  at("sequence_mixer.c_proj.weight"), at("ln_2.weight"),
                                  at("mlp_block.c_fc.weight"), at("mlp_block.c_proj.weight")});
}

// What both model kinds share: the weights, the embedding, the resize rule, the head.
// Derived provides for_each_block(f), calling f(block) in layer order.
template <class Backend, class Derived>
class model_core {
public:
    using T = typename Backend::scalar;
    using backend = Backend;
    using context = typename Backend::context_type;

    const model_config& config() const { return config_; }
    const dynamic_schedule& schedule() const { return config_.schedule; }
    const parameter_layout& layout() const { return layout_; }
    std::span<const T> parameters() const { return params_; }
    int vocab() const { return config_.schedule.dims.vocab; }

    kv_cache<T> make_cache(int capacity) const { return kv_cache<T>(config_.schedule, capacity); }

    // Appends each sequence's tokens to its cache and returns the logits, row-major
    // [rows x vocab]: one row per sequence (logits_mode::last) or per token (logits_mode::all).
    // Thread-safe: the model is read-only; sequences of concurrent calls must not share a cache.
    std::vector<T> forward(const context& ctx, std::span<const sequence_input<T>> inputs,
                           logits_mode mode = logits_mode::last) const {
        const auto& s = config_.schedule;
        if (inputs.empty()) detail::fail("forward: no sequences given");
        std::vector<batch_sequence<T>> seqs;
        std::vector<int> positions, ids;
        index_t rows = 0;
        for (std::size_t q = 0; q < inputs.size(); ++q) {
            const auto& in = inputs[q];
            if (!in.cache) detail::fail("forward: sequence ", q, " has no KV cache");
            if (in.tokens.empty()) detail::fail("forward: sequence ", q, " has no tokens");
            if (in.cache->length() + static_cast<index_t>(in.tokens.size()) > in.cache->capacity())
                detail::fail("forward: sequence ", q, " would hold ", in.cache->length() + in.tokens.size(),
                             " tokens, beyond its KV cache capacity ", in.cache->capacity(), " (model context ",
                             s.dims.context, ")");
            for (std::size_t i = 0; i < in.tokens.size(); ++i) {
                const int t = in.tokens[i];
                if (t < 0 || t >= s.dims.vocab)
                    detail::fail("forward: token id ", t, " at position ", i, " of sequence ", q,
                                 " is outside the vocabulary [0, ", s.dims.vocab, ")");
                ids.push_back(t);
                positions.push_back(in.cache->length() + static_cast<int>(i));
            }
            for (std::size_t p = 0; p < q; ++p)
                if (inputs[p].cache == in.cache) detail::fail("forward: sequences ", p, " and ", q, " share a KV cache");
            seqs.push_back({in.cache, rows, static_cast<index_t>(in.tokens.size())});
            rows += static_cast<index_t>(in.tokens.size());
        }

        const index_t W = s.residual_width, h = s.dims.hidden;
        aligned_vector<T> buffer(static_cast<std::size_t>(rows * W));
        residual_view<T> x(buffer.data(), rows, W);
        Backend::embed(ctx, tensor(embedding_), ids.data(), x.all(), static_cast<T>(config_.m_emb));

        block_scratch<T> scratch;
        scratch.reserve(rows, s);
        int stream_width = static_cast<int>(h);
        static_cast<const Derived&>(*this).for_each_block([&](const auto& b) {
            if (config_.resize == resize_method::zero && b.width() > stream_width)
                Backend::fill(x.all().cols_range(stream_width, b.width()), T(0));
            b.forward(ctx, x, std::span<const batch_sequence<T>>(seqs), std::span<const int>(positions), scratch);
            stream_width = b.width();
        });
        for (auto& q : seqs) q.cache->commit(static_cast<int>(q.rows));

        // Rows that get logits, gathered; final norm over the last layer's width; head reads h.
        std::vector<index_t> out_rows;
        for (const auto& q : seqs) {
            if (mode == logits_mode::all)
                for (index_t r = 0; r < q.rows; ++r) out_rows.push_back(q.row_begin + r);
            else
                out_rows.push_back(q.row_begin + q.rows - 1);
        }
        const index_t n = static_cast<index_t>(out_rows.size());
        const index_t w_last = s.width(s.layers() - 1);
        aligned_vector<T> gathered(static_cast<std::size_t>(n * W)), normed(static_cast<std::size_t>(n * W));
        const matrix_view<T> g{gathered.data(), n, W, W}, y{normed.data(), n, W, W};
        for (index_t r = 0; r < n; ++r) std::copy(x.all().row(out_rows[r]), x.all().row(out_rows[r]) + W, g.row(r));
        Backend::rmsnorm(ctx, g.first_cols(w_last), params_.data() + final_norm_.offset, y.first_cols(w_last),
                         static_cast<T>(config_.norm_eps));
        // The resize to the head's width h is move_up for every model, zero-resize ones included
        // (the authors: `expand_method if expand_method != "zero" else "move_up"`).
        if (w_last < h) Backend::copy(g.cols_range(w_last, h), y.cols_range(w_last, h));
        std::vector<T> logits(static_cast<std::size_t>(n * s.dims.vocab));
        Backend::matmul_nt(ctx, y.first_cols(h), tensor(head_), matrix_view<T>{logits.data(), n, s.dims.vocab, s.dims.vocab},
                           static_cast<T>(1.0 / config_.m_width));
        return logits;
    }

protected:
    model_core(model_config c, std::span<const T> params)
        : config_(std::move(c)), layout_(config_), params_(params.begin(), params.end()) {
        if (static_cast<std::int64_t>(params_.size()) != layout_.size())
            detail::fail("model: ", params_.size(), " parameters given, the schedule needs ", layout_.size());
        embedding_ = layout_.at("transformer.wte.weight");
        final_norm_ = layout_.at("transformer.ln_f.weight");
        head_ = layout_.at("lm_head.weight");
    }
    model_core(const model_core&) = delete;
    model_core& operator=(const model_core&) = delete;
    model_core(model_core&&) noexcept = default;

    matrix_view<const T> tensor(const tensor_info& t) const {
        return {params_.data() + t.offset, t.shape[0], t.shape[1], t.shape[1]};
    }

    model_config config_;
    parameter_layout layout_;
    aligned_vector<T> params_;  // one contiguous buffer; blocks point into it
    tensor_info embedding_, final_norm_, head_;
};

}  // namespace detail

// A model whose schedule is known only at run time (e.g. read from a checkpoint).
template <class Backend>
class model : public detail::model_core<Backend, model<Backend>> {
    using core = detail::model_core<Backend, model<Backend>>;

public:
    using T = typename Backend::scalar;

    model(model_config c, std::span<const T> params) : core(std::move(c), params) {
        for (int i = 0; i < this->schedule().layers(); ++i)
            blocks_.push_back(detail::make_block<Backend>(this->config_, this->layout_, this->params_.data(), i,
                                                          dynamic_width{this->schedule().width(i)}));
    }
    model(model&&) noexcept = default;

    template <class F>
    void for_each_block(F&& f) const {
        for (const auto& b : blocks_) f(b);
    }

private:
    std::vector<block<Backend, dynamic_width>> blocks_;
};

// A model of a compile-time schedule S: its blocks are a std::tuple of fixed-width blocks, and
// the schedule's invariants are checked by the compiler.
template <class Backend, auto S>
class static_model : public detail::model_core<Backend, static_model<Backend, S>> {
    using core = detail::model_core<Backend, static_model<Backend, S>>;
    static constexpr std::size_t L = decltype(S)::static_layers;
    static_assert(L != dynamic, "static_model needs a fixed-size vwt::schedule<L>");

    template <std::size_t... I>
    static auto block_types(std::index_sequence<I...>) -> std::tuple<block<Backend, fixed_width<S.widths[I]>>...>;
    using blocks_t = decltype(block_types(std::make_index_sequence<L>{}));

    template <std::size_t... I>
    blocks_t make_blocks(std::index_sequence<I...>) const {
        static_assert(((S.widths[I] % S.dims.heads == 0) && ...), "every width must be divisible by the heads");
        static_assert((((S.widths[I] / S.dims.heads) % 2 == 0) && ...), "every head dim must be even (RoPE pairs)");
        return blocks_t{detail::make_block<Backend>(this->config_, this->layout_, this->params_.data(),
                                                    static_cast<int>(I), fixed_width<S.widths[I]>{})...};
    }

public:
    using T = typename Backend::scalar;

    static_model(model_config c, std::span<const T> params)
        : core(check(std::move(c)), params), blocks_(make_blocks(std::make_index_sequence<L>{})) {}
    static_model(static_model&&) noexcept = default;

    template <class F>
    void for_each_block(F&& f) const {
        std::apply([&](const auto&... b) { (f(b), ...); }, blocks_);
    }

private:
    static model_config check(model_config c) {
        if (c.schedule != dynamic_schedule(S))
            detail::fail("model config widths do not match the compiled schedule");
        return c;
    }
    blocks_t blocks_;
};

}  // namespace vwt
