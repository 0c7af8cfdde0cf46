// The model: the embedding, a schedule's blocks and the head over one residual buffer, with its
// parameters in the backend policy's memory. static_model<B, S> holds the blocks of a compile-time
// schedule as a std::tuple of fixed-width blocks; model<B> holds the same blocks, built at run
// time, in a vector. Both run the same block code.
#pragma once

#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "../infer/kv_cache.hpp"
#include "../infer/workspace.hpp"
#include "../layers/block.hpp"
#include "../layers/embedding.hpp"
#include "../layers/head.hpp"
#include "../layers/moe.hpp"
#include "../layers/resize.hpp"
#include "../params/layout.hpp"
#include "config.hpp"

namespace vwt {

// One sequence of a forward call: the tokens to append and the cache they are appended to.
template <class B>
struct sequence_input {
    kv_cache<B>* cache = nullptr;
    std::span<const int> tokens;
};

enum class logits_mode {
    last,  // one row per sequence: its last token (generation)
    all,   // one row per input token (scoring, parity checks)
};

// One block's tensors, dense (SwiGLU MLP) or MoE.
template <class E, memory_space M>
using any_block_tensors = std::variant<block_tensors<E, M, swiglu_tensors<E, M>>, block_tensors<E, M, moe_tensors<E, M>>>;

// Every tensor of a model over one element type: bound from a buffer laid out like the
// parameters (the parameters themselves, or gradients).
template <class E, memory_space M>
struct model_tensors {
    embedding_tensors<E, M> embedding;
    std::vector<any_block_tensors<E, M>> blocks;
    head_tensors<E, M> head;
    // The learned resize into each layer (resize_method::linear, where the layer widens the
    // stream): [w_i x stream before it]; empty elsewhere.
    std::vector<matrix_view<E, M>> resizes;

    // Block b's tensors, as its type takes them.
    template <class Block>
    const typename Block::template tensors<E>& of(const Block& b) const {
        return std::get<typename Block::template tensors<E>>(blocks.at(static_cast<std::size_t>(b.layer())));
    }
};

// Parameters that live in memory the model does not own (weights used in place from a mapped
// file): `values` stays valid while `owner` is held, and the model holds it.
template <class W>
struct borrowed_parameters {
    std::span<W> values;
    std::shared_ptr<void> owner;
};

namespace detail {

// What both model kinds share: the parameters, the embedding, the resize rule, the head.
// Derived provides for_each_block(f) and for_each_block_reversed(f), calling f(block).
template <class B, class Derived>
class model_core {
public:
    using backend = B;
    using T = typename B::compute_type;
    using W = typename B::weight_type;
    using M = typename B::memory;
    using context = typename B::context;

    const model_config& config() const { return config_; }
    const dynamic_schedule& schedule() const { return config_.schedule; }
    const parameter_layout& layout() const { return layout_; }
    int vocab() const { return config_.schedule.dims.vocab; }

    // The parameters in the policy's memory, one contiguous buffer laid out by layout().
    vector_view<const W, M> parameters() const { return params_; }
    // Writable parameters, for an optimizer; the blocks see every change.
    vector_view<W, M> parameters() { return params_; }
    // Whether the parameters are borrowed (used in place) rather than the model's own buffer.
    bool borrows_parameters() const { return owner_ != nullptr; }

    const embedding<B>& embedding_layer() const { return embedding_; }
    const head<B>& head_layer() const { return head_; }
    const residual_resize& resize() const { return resize_; }

    kv_cache<B> make_cache(int capacity, kv_dtype kv = kv_dtype::compute) const { return kv_cache<B>(config_.schedule, capacity, kv); }
    forward_workspace<B> make_workspace(const context& ctx, index_t max_rows, index_t max_context, kv_dtype kv = kv_dtype::compute) const {
        return forward_workspace<B>(ctx, config_, max_rows, max_context, kv);
    }

    // Views of every tensor inside `buffer` (laid out like the parameters): gradients, moments.
    template <class E>
    model_tensors<E, M> bind(vector_view<E, M> buffer) const {
        const tensor_binder<E, M> b(layout_, buffer);
        model_tensors<E, M> t{embedding_tensors<E, M>::bind(b), {}, head_tensors<E, M>::bind(b), {}};
        for (int i = 0; i < schedule().layers(); ++i) {
            t.resizes.push_back(layout_.find(linear_resize_name(i)) ? b.matrix(linear_resize_name(i)) : matrix_view<E, M>{});
            const auto ln_1 = b.vector(layer_prefix(i) + "ln_1.weight"), ln_2 = b.vector(layer_prefix(i) + "ln_2.weight");
            const auto attn = attention_tensors<E, M>::bind(b, i);
            if (schedule().dims.moe.enabled())
                t.blocks.emplace_back(block_tensors<E, M, moe_tensors<E, M>>{ln_1, attn, ln_2, moe_tensors<E, M>::bind(b, i)});
            else
                t.blocks.emplace_back(block_tensors<E, M, swiglu_tensors<E, M>>{ln_1, attn, ln_2, swiglu_tensors<E, M>::bind(b, i)});
        }
        return t;
    }

    // Appends each sequence's tokens to its cache and computes the logits, [rows x vocab] in
    // the workspace: one row per sequence (logits_mode::last) or per token (logits_mode::all).
    // Thread-safe: the model is read-only; concurrent calls need their own workspaces and caches.
    matrix_view<T, M> forward(const context& ctx, forward_workspace<B>& ws, std::span<const sequence_input<B>> inputs,
                              logits_mode mode = logits_mode::last) const {
        const auto& s = config_.schedule;
        if (inputs.empty()) vwt::detail::fail("forward: no sequences given");
        auto& ids = ws.host_ids();
        auto& positions = ws.host_positions();
        auto& seqs = ws.sequences();
        ids.clear();
        positions.clear();
        seqs.clear();
        index_t rows = 0;
        for (std::size_t q = 0; q < inputs.size(); ++q) {
            const auto& in = inputs[q];
            if (!in.cache) vwt::detail::fail("forward: sequence ", q, " has no KV cache");
            if (in.tokens.empty()) vwt::detail::fail("forward: sequence ", q, " has no tokens");
            const index_t past = in.cache->length(), n = static_cast<index_t>(in.tokens.size());
            if (past + n > in.cache->capacity())
                vwt::detail::fail("forward: sequence ", q, " would hold ", past + n, " tokens, beyond its KV cache capacity ",
                                  in.cache->capacity(), " (model context ", s.dims.context, ")");
            if (past + n > ws.max_context())
                vwt::detail::fail("forward: sequence ", q, " would hold ", past + n, " tokens, beyond the workspace's context ",
                                  ws.max_context());
            if (!ws.serves(in.cache->dtype()))
                vwt::detail::fail("forward: sequence ", q, " has a ", kv_dtype_name(in.cache->dtype()),
                                  " KV cache; make the workspace for it (make_workspace(..., kv_dtype::", kv_dtype_name(in.cache->dtype()), "))");
            if (rows + n > ws.max_rows())
                vwt::detail::fail("forward: ", rows + n, " tokens in one call, beyond the workspace's ", ws.max_rows(), " rows");
            for (std::size_t p = 0; p < q; ++p)
                if (inputs[p].cache == in.cache) vwt::detail::fail("forward: sequences ", p, " and ", q, " share a KV cache");
            for (std::size_t i = 0; i < in.tokens.size(); ++i) {
                const int t = in.tokens[i];
                if (t < 0 || t >= s.dims.vocab)
                    vwt::detail::fail("forward: token id ", t, " at position ", i, " of sequence ", q,
                                      " is outside the vocabulary [0, ", s.dims.vocab, ")");
                ids.push_back(t);
                positions.push_back(static_cast<int>(past + static_cast<index_t>(i)));
            }
            seqs.push_back({rows, n, past});
            rows += n;
        }
        const auto id_view = ws.ids(rows), position_view = ws.positions(rows);
        B::upload(ctx, std::span<const int>(ids), id_view);
        B::upload(ctx, std::span<const int>(positions), position_view);

        const auto x = ws.residual(rows);
        embedding_.forward(ctx, id_view, x);
        const std::span<const sequence_rows> seq_span(seqs);
        derived().for_each_block([&](const auto& b) {
            enter_layer(ctx, x, b.layer(), ws.scratch().normed, {position_view, 0});
            b.forward(ctx, x, seq_span, position_view, [&](std::size_t i) { return inputs[i].cache->layer(b.layer()); },
                      ws.scratch());
        });
        for (const auto& in : inputs) in.cache->commit(static_cast<int>(in.tokens.size()));

        // The rows that get logits, gathered (one copy per sequence), then the head.
        index_t n = 0;
        const auto gathered = ws.gathered(mode == logits_mode::all ? rows : static_cast<index_t>(seqs.size()));
        if (mode == logits_mode::all) {
            B::copy(ctx, x.all().as_const(), gathered);
            n = rows;
        } else {
            for (const auto& q : seqs) {
                B::copy(ctx, x.all().rows_range(q.begin + q.rows - 1, q.begin + q.rows).as_const(), gathered.rows_range(n, n + 1));
                ++n;
            }
        }
        const auto logits = ws.logits(n);
        // a gaussian head resize draws by the gathered rows' positions
        auto head_positions = position_view;
        if (!resize_.head_padding().empty() && mode == logits_mode::last) {
            auto& last = ws.host_head_positions();
            last.clear();
            for (const auto& q : seqs) last.push_back(static_cast<int>(q.past + q.rows - 1));
            B::upload(ctx, std::span<const int>(last), ws.head_positions(n));
            head_positions = ws.head_positions(n);
        }
        head_.forward(ctx, gathered.as_const(), ws.head_in(n), logits, head_noise({head_positions, 0}));
        return logits;
    }

    // Before block `layer`: the stream resized to the block's columns (resize()). A projection or
    // a gaussian padding copies the columns it reads into `input` (at least rows x from elements;
    // training keeps them for the backward).
    void enter_layer(const context& ctx, residual_view<T, M> x, int layer, vector_view<T, M> input, resize_noise<M> noise) const {
        if (const auto z = resize_.zeroed_before(layer); !z.empty()) B::fill(ctx, x.all().cols_range(z.begin, z.end), T(0));
        if (const auto p = resize_.projected_before(layer); !p.empty()) {
            const auto in = input.as_matrix(x.rows(), p.from);
            B::copy(ctx, x.all().first_cols(p.from).as_const(), in);
            B::matmul_nt(ctx, in.as_const(), projections_[static_cast<std::size_t>(layer)], x.all().first_cols(p.to));
        }
        if (const auto p = resize_.padded_before(layer); !p.empty()) {
            B::copy(ctx, x.all().first_cols(p.from).as_const(), input.as_matrix(x.rows(), p.from));
            B::gaussian_pad(ctx, x.all().first_cols(p.to), p.from, p.to, noise.counters, noise_key(layer, noise.salt));
        }
    }
    // Its backward: dx, the gradient of the stream after the resize, becomes the gradient before
    // it. A learned projection's gradient is added into `grad`; `input`: what enter_layer kept;
    // `scratch`: at least rows x from elements. Zeroed columns pass no gradient to the older values
    // there; after a projection the columns above its input get none (nothing reads them).
    void enter_layer_backward(const context& ctx, residual_view<T, M> dx, int layer, vector_view<const T, M> input,
                              vector_view<T, M> scratch, matrix_view<T, M> grad, resize_noise<M> noise) const {
        if (const auto p = resize_.padded_before(layer); !p.empty()) {
            B::gaussian_pad_backward(ctx, input.as_matrix(dx.rows(), p.from), dx.all().first_cols(p.to), p.from, p.to, noise.counters,
                                     noise_key(layer, noise.salt));
            B::fill(ctx, dx.all().cols_range(p.to, dx.residual_width()), T(0));
        }
        if (const auto z = resize_.zeroed_before(layer); !z.empty()) B::fill(ctx, dx.all().cols_range(z.begin, z.end), T(0));
        if (const auto p = resize_.projected_before(layer); !p.empty()) {
            const index_t rows = dx.rows();
            const auto d_out = dx.all().first_cols(p.to).as_const();
            const auto d_in = scratch.as_matrix(rows, p.from);
            if (!grad.empty()) B::matmul_tn(ctx, d_out, input.as_matrix(rows, p.from), grad, T(1), T(1));
            B::matmul_nn(ctx, d_out, projections_[static_cast<std::size_t>(layer)], d_in);
            B::fill(ctx, dx.all().cols_range(p.from, dx.residual_width()), T(0));
            B::copy(ctx, d_in.as_const(), dx.all().first_cols(p.from));
        }
    }

    // The head's draw of a gaussian resize (its place: after the last layer).
    typename head<B>::noise head_noise(resize_noise<M> noise) const {
        return {noise.counters, noise_key(config_.schedule.layers(), noise.salt)};
    }

    // The same, returning the logits on the host (allocates a workspace: for scoring and tests;
    // sessions reuse theirs).
    std::vector<T> forward(const context& ctx, std::span<const sequence_input<B>> inputs, logits_mode mode = logits_mode::last) const {
        index_t rows = 0, longest = 1;
        kv_dtype kv = kv_dtype::compute;
        for (const auto& in : inputs) {
            rows += static_cast<index_t>(in.tokens.size());
            if (!in.cache) continue;
            longest = std::max<index_t>(longest, in.cache->length() + static_cast<index_t>(in.tokens.size()));
            if (in.cache->dtype() != kv_dtype::compute) kv = in.cache->dtype();
        }
        forward_workspace<B> ws(ctx, config_, std::max<index_t>(rows, 1), longest, kv);
        const auto logits = forward(ctx, ws, inputs, mode);
        std::vector<T> host(static_cast<std::size_t>(logits.rows() * logits.cols()));
        B::download(ctx, vector_view<const T, M>(ws.logits_vector(logits.rows())), std::span<T>(host));
        return host;
    }

protected:
    // Parameters copied from the host into a buffer of the model's own.
    model_core(model_config c, std::span<const W> host_params, const context& ctx)
        : config_(std::move(c)), layout_(config_), resize_(config_.schedule, config_.resize) {
        check_count(static_cast<std::int64_t>(host_params.size()));
        own_ = typename B::template buffer<W>(layout_.size() / elements_per_item<W>);
        B::upload(ctx, host_params, own_.view());
        params_ = own_.view();
        bind_shared(ctx);
    }
    // Parameters already in a buffer of the policy's memory, which the model takes over.
    model_core(model_config c, typename B::template buffer<W>&& params, const context& ctx)
        : config_(std::move(c)), layout_(config_), own_(std::move(params)), resize_(config_.schedule, config_.resize) {
        check_count(own_.size());
        params_ = own_.view();
        bind_shared(ctx);
    }
    // Parameters used where they are (host-accessible policies only).
    model_core(model_config c, borrowed_parameters<W> params, const context& ctx)
        : config_(std::move(c)), layout_(config_), owner_(std::move(params.owner)), resize_(config_.schedule, config_.resize) {
        static_assert(M::host_accessible, "borrowed parameters live in host memory; this policy's memory is elsewhere");
        check_count(static_cast<std::int64_t>(params.values.size()));
        params_ = vector_view<W, M>(params.values.data(), static_cast<index_t>(params.values.size()));
        bind_shared(ctx);
    }

    std::uint64_t noise_key(int place, std::uint64_t salt) const {
        return vwt::detail::gaussian_noise_key(config_.resize_seed, salt, place);
    }

    void check_count(std::int64_t items) const {
        constexpr index_t per_item = elements_per_item<W>;  // 32 weights per q8 block
        if (items * per_item != layout_.size())
            vwt::detail::fail("model: ", items * per_item, " parameters given, the schedule needs ", layout_.size());
    }
    // `ctx`: where the interpolate resize's matrices are uploaded.
    void bind_shared(const context& ctx) {
        const tensor_binder<const W, M> b(layout_, params_);
        embedding_ = {embedding_tensors<const W, M>::bind(b), T(config_.m_emb)};
        const auto& s = config_.schedule;
        head_.weights = head_tensors<const W, M>::bind(b);
        head_.norm = {head_.weights.norm, T(config_.norm_eps)};
        head_.last_width = final_norm_width(s);
        head_.hidden = unembedding_width(s);
        head_.from_stream = resize_.from_stream_to_head();
        head_.inv_width = T(1.0 / config_.m_width);
        make_projections(ctx, b);
    }
    // The projections of the interpolate (fixed matrices, the model's own) and linear (learned,
    // among the parameters) resizes.
    void make_projections(const context& ctx, const tensor_binder<const W, M>& b) {
        const auto& s = config_.schedule;
        std::vector<residual_resize::projection> wanted;
        for (int i = 0; i < s.layers(); ++i) wanted.push_back(resize_.projected_before(i));
        wanted.push_back(resize_.head_projection());
        projections_.assign(wanted.size(), {});
        if (resize_.method() == resize_method::linear) {
            for (std::size_t i = 0; i < wanted.size(); ++i)
                if (!wanted[i].empty()) projections_[i] = b.matrix(linear_resize_name(i + 1 < wanted.size() ? static_cast<int>(i) : -1));
        } else if (resize_.method() == resize_method::interpolate) {
            std::vector<double> all;
            std::vector<index_t> offsets;
            for (const auto& p : wanted) {
                offsets.push_back(static_cast<index_t>(all.size()));
                if (p.empty()) continue;
                if (p.from % elements_per_item<W> != 0)
                    vwt::detail::fail("model: the interpolate resize from width ", p.from, " is not whole blocks of ", elements_per_item<W>,
                                      " weights (q8 weights need every width to be a multiple of ", elements_per_item<W>, ")");
                const auto m = interpolation_matrix(p.from, p.to, config_.interpolate_align_corners);
                all.insert(all.end(), m.begin(), m.end());
            }
            std::vector<W> host;
            if constexpr (std::is_same_v<W, q8_block>) host = convert_elements<W>(std::vector<float>(all.begin(), all.end()));
            else for (double v : all) host.push_back(W(v));
            interpolation_ = typename B::template buffer<W>(std::max<index_t>(static_cast<index_t>(host.size()), 1));
            if (!host.empty()) B::upload(ctx, std::span<const W>(host), interpolation_.view().subview(0, static_cast<index_t>(host.size())));
            for (std::size_t i = 0; i < wanted.size(); ++i) {
                const auto& p = wanted[i];
                if (p.empty()) continue;
                const index_t items = static_cast<index_t>(p.to) * p.from / elements_per_item<W>;
                projections_[i] = vector_view<const W, M>(interpolation_.view()).subview(offsets[i] / elements_per_item<W>, items)
                                      .as_matrix(p.to, p.from / elements_per_item<W>);
            }
        }
        head_.projection = projections_.back();
        head_.padding = resize_.head_padding();
    }
    model_core(const model_core&) = delete;
    model_core& operator=(const model_core&) = delete;
    model_core(model_core&&) noexcept = default;

    template <class Block>
    Block make_block(int layer, auto width) const {
        const tensor_binder<const W, M> b(layout_, params_);
        return Block(width, hyper_of(config_, layer), Block::template bind<const W>(b, layer));
    }

private:
    const Derived& derived() const { return static_cast<const Derived&>(*this); }

protected:
    model_config config_;
    parameter_layout layout_;
    typename B::template buffer<W> own_;  // the parameters, unless borrowed
    std::shared_ptr<void> owner_;         // what keeps borrowed parameters alive
    vector_view<W, M> params_;
    residual_resize resize_;
    embedding<B> embedding_{};
    head<B> head_{};
    typename B::template buffer<W> interpolation_;           // resize_method::interpolate's matrices
    std::vector<matrix_view<const W, M>> projections_;       // per layer, then the head's: empty where none
};

}  // namespace detail

namespace detail {
// The blocks of a run-time model: dense, or MoE where the policy has the MoE ops.
template <class B>
struct block_lists {
    using type = std::variant<std::vector<block<B, dynamic_width>>>;
};
template <moe_backend_policy B>
struct block_lists<B> {
    using type = std::variant<std::vector<block<B, dynamic_width>>, std::vector<block<B, dynamic_width, moe_mlp>>>;
};
}  // namespace detail

// A model whose schedule is known only at run time (e.g. read from a checkpoint): dense, or an
// MoE model (every MLP a mixture of experts) on a policy with the MoE ops.
template <class B>
class model : public detail::model_core<B, model<B>> {
    using core = detail::model_core<B, model<B>>;

public:
    using block_type = block<B, dynamic_width>;  // a dense model's blocks
    using typename core::context;
    using typename core::W;

    // Parameters copied from the host; taken over in a buffer of the policy's memory; or used where
    // they are (borrowed_parameters, e.g. a mapped checkpoint: see io::load_model).
    model(model_config c, std::span<const W> params, const context& ctx = {}) : core(std::move(c), params, ctx) { make_blocks(); }
    model(model_config c, typename B::template buffer<W>&& params, const context& ctx = {}) : core(std::move(c), std::move(params), ctx) {
        make_blocks();
    }
    model(model_config c, borrowed_parameters<W> params, const context& ctx = {}) : core(std::move(c), std::move(params), ctx) {
        make_blocks();
    }
    model(model&&) noexcept = default;

    template <class F>
    void for_each_block(F&& f) const {
        std::visit([&](const auto& blocks) {
            for (const auto& b : blocks) f(b);
        }, blocks_);
    }
    template <class F>
    void for_each_block_reversed(F&& f) const {
        std::visit([&](const auto& blocks) {
            for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) f(*it);
        }, blocks_);
    }

private:
    using block_lists = typename detail::block_lists<B>::type;

    void make_blocks() {
        const auto& s = this->schedule();
        if (!s.dims.moe.enabled()) return blocks_ = fill<block_type>(), void();
        if constexpr (std::variant_size_v<block_lists> == 2)
            blocks_ = fill<block<B, dynamic_width, moe_mlp>>();
        else
            vwt::detail::fail("model: the schedule's MLPs are mixtures of experts, which this backend policy does not implement");
    }
    template <class Block>
    std::vector<Block> fill() const {
        std::vector<Block> blocks;
        for (int i = 0; i < this->schedule().layers(); ++i)
            blocks.push_back(this->template make_block<Block>(i, dynamic_width(this->schedule().width(i), this->schedule().dims.heads)));
        return blocks;
    }
    block_lists blocks_;
};

// A model of a compile-time schedule S: its blocks are a std::tuple of fixed-width blocks (the
// widths and head dimensions are static extents down to the ops), and the schedule's invariants
// are checked by the compiler.
template <class B, auto S>
class static_model : public detail::model_core<B, static_model<B, S>> {
    using core = detail::model_core<B, static_model<B, S>>;
    static constexpr std::size_t L = decltype(S)::static_layers;
    static_assert(L != dynamic, "static_model needs a fixed-size vwt::schedule<L>");
    static_assert(!S.dims.moe.enabled(), "static_model holds dense schedules; an MoE schedule runs as vwt::model");
    static_assert(!S.dims.stream.fixed_width, "a fixed-width stream (fixed_residual_width) runs as vwt::model");

    template <std::size_t I>
    using width_of = fixed_width<S.widths[I], S.dims.heads>;
    template <std::size_t... I>
    static auto block_types(std::index_sequence<I...>) -> std::tuple<block<B, width_of<I>>...>;
    using blocks_t = decltype(block_types(std::make_index_sequence<L>{}));

    template <std::size_t... I>
    blocks_t make_blocks(std::index_sequence<I...>) const {
        return blocks_t{this->template make_block<block<B, width_of<I>>>(static_cast<int>(I), width_of<I>{})...};
    }

public:
    using typename core::context;
    using typename core::W;

    static_model(model_config c, std::span<const W> params, const context& ctx = {})
        : core(check(std::move(c)), params, ctx), blocks_(make_blocks(std::make_index_sequence<L>{})) {}
    static_model(static_model&&) noexcept = default;

    template <class F>
    void for_each_block(F&& f) const {
        std::apply([&](const auto&... b) { (f(b), ...); }, blocks_);
    }
    template <class F>
    void for_each_block_reversed(F&& f) const {
        reversed(f, std::make_index_sequence<L>{});
    }

private:
    template <class F, std::size_t... I>
    void reversed(F& f, std::index_sequence<I...>) const {
        (f(std::get<L - 1 - I>(blocks_)), ...);
    }
    static model_config check(model_config c) {
        if (c.schedule != dynamic_schedule(S)) vwt::detail::fail("model config widths do not match the compiled schedule");
        return c;
    }
    blocks_t blocks_;
};

}  // namespace vwt
