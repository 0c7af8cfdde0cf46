// One training step's forward and backward through the model's own layers: the same blocks as
// inference, asked to keep what backward needs; the mean next-token loss and the gradient of every
// parameter, added into a buffer laid out like the parameters (llm.c style).
#pragma once

// All sequences of a micro-batch are rows of one [B*T x ...] matrix, so each weight product is one
// large GEMM; attention runs per sequence. Kept per layer: its input and middle residual columns,
// the rotated q, k, v, the attention output and the fused MLP input; normed inputs, the SwiGLU
// output and the attention probabilities are recomputed in the backward.

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "../model/model.hpp"

namespace vwt::train {

// B sequences of T tokens each, row-major [B x T]; targets[i] is the token that follows tokens[i].
struct token_batch {
    std::span<const int> tokens, targets;
    int sequences = 1;
    // The salt of a gaussian resize's draws (the trainer's: one per micro-batch of each step).
    std::uint64_t noise = 0;
    index_t length() const { return static_cast<index_t>(tokens.size()) / sequences; }
};

// The memory of one training step for `sequences` x `length` tokens, in the policy's memory:
// residual and gradient buffers, every layer's kept activations, the layers' scratch, the head's
// input and logits; sized once.
template <class B>
class step_workspace {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;

    template <class Model>
    step_workspace(const typename B::context& ctx, const Model& m, int sequences, index_t length)
        : sequences_(sequences), length_(length), rows_(sequences * length) {
        const auto& s = m.schedule();
        if (sequences < 1 || length < 1) detail::fail("training workspace: sequences and length must be positive");
        if (length > s.dims.context) detail::fail("training workspace: sequences of ", length, " tokens exceed the context of ", s.dims.context);
        const scratch_plan<B> plan(ctx, s, {rows_, length, length, true});
        width_ = s.residual_width;
        head_cols_ = m.head_layer().input_cols();
        vocab_ = s.dims.vocab;
        m.for_each_block([&](const auto& b) {
            saved_offsets_.push_back(activations_);
            activations_ += (b.saved_elements(rows_) + 15) / 16 * 16;
            // what a projecting resize before the block reads (interpolate and linear resizes)
            resize_offsets_.push_back(activations_);
            const auto& r = m.resize();
            activations_ += (rows_ * std::max(r.projected_before(b.layer()).from, r.padded_before(b.layer()).from) + 15) / 16 * 16;
        });
        const index_t residual = rows_ * width_, head = rows_ * head_cols_, logits = rows_ * vocab_;
        memory_ = typename B::template buffer<T>(2 * residual + 2 * head + logits + activations_ + plan.total());
        auto v = memory_.view();
        index_t at = 0;
        const auto take = [&](index_t n) {
            auto part = v.subview(at, n);
            at += n;
            return part;
        };
        x_ = take(residual), dx_ = take(residual), head_in_ = take(head), d_head_in_ = take(head), logits_ = take(logits);
        saved_ = take(activations_);
        integers_ = typename B::template buffer<int>(4 * rows_ + plan.int_total());
        doubles_ = typename B::template buffer<double>(rows_ + plan.double_total());
        scratch_ = plan.carve(take(plan.total()), integers_.view().subview(4 * rows_, plan.int_total()),
                              doubles_.view().subview(rows_, plan.double_total()));
        if (plan.double_total() > 0) host_aux_.resize(static_cast<std::size_t>(plan.double_total()));
        host_offsets_.resize(static_cast<std::size_t>(scratch_.expert_offsets.size()));
        host_losses_.resize(static_cast<std::size_t>(rows_));
        host_positions_.resize(static_cast<std::size_t>(rows_));
        for (index_t r = 0; r < rows_; ++r) host_positions_[static_cast<std::size_t>(r)] = static_cast<int>(r % length);
        std::vector<int> counters(static_cast<std::size_t>(rows_));
        for (index_t r = 0; r < rows_; ++r) counters[static_cast<std::size_t>(r)] = static_cast<int>(r);
        B::upload(ctx, std::span<const int>(counters), integers_.view().subview(3 * rows_, rows_));
        for (int b = 0; b < sequences; ++b) sequences_rows_.push_back({b * length, length, 0});
    }

    int sequences() const { return sequences_; }
    index_t length() const { return length_; }
    index_t rows() const { return rows_; }
    residual_view<T, M> x() const { return residual_view<T, M>(x_.as_matrix(rows_, width_)); }
    residual_view<T, M> dx() const { return residual_view<T, M>(dx_.as_matrix(rows_, width_)); }
    matrix_view<T, M> head_in() const { return head_in_.as_matrix(rows_, head_cols_); }
    matrix_view<T, M> d_head_in() const { return d_head_in_.as_matrix(rows_, head_cols_); }
    matrix_view<T, M> logits() const { return logits_.as_matrix(rows_, vocab_); }
    const layer_scratch<B>& scratch() const { return scratch_; }
    // Layer i's kept activations (carved by the block itself, which knows their shapes).
    vector_view<T, M> saved_memory(int layer) const {
        const auto i = static_cast<std::size_t>(layer);
        return saved_.subview(saved_offsets_[i], resize_offsets_[i] - saved_offsets_[i]);
    }
    // The stream columns a projecting resize before layer i read (empty where none).
    vector_view<T, M> resize_input(int layer) const {
        const auto i = static_cast<std::size_t>(layer);
        const index_t end = i + 1 < saved_offsets_.size() ? saved_offsets_[i + 1] : activations_;
        return saved_.subview(resize_offsets_[i], end - resize_offsets_[i]);
    }
    vector_view<int, M> ids() { return integers_.view().subview(0, rows_); }
    vector_view<int, M> targets() { return integers_.view().subview(rows_, rows_); }
    vector_view<int, M> positions() { return integers_.view().subview(2 * rows_, rows_); }
    // 0, 1, ..., rows - 1: the counters of a gaussian resize's draws (each row its own noise).
    vector_view<const int, M> row_counters() const { return integers_.view().subview(3 * rows_, rows_); }
    vector_view<double, M> losses() { return doubles_.view().subview(0, rows_); }
    // MoE models: every layer's auxiliary loss of the last backward, on the host (empty if dense).
    std::span<double> host_aux_losses() { return host_aux_; }
    // MoE models: every layer's expert offsets of the last step on the host, layer i's E + 1 at
    // i (E + 1); expert e of layer i took offsets[e + 1] - offsets[e] (token, expert) pairs.
    std::span<int> host_expert_offsets() { return host_offsets_; }
    std::span<double> host_losses() { return host_losses_; }
    std::span<const int> host_positions() const { return host_positions_; }
    std::span<const sequence_rows> sequence_list() const { return sequences_rows_; }

private:
    int sequences_;
    index_t length_, rows_, width_ = 0, head_cols_ = 0, vocab_ = 0, activations_ = 0;
    std::vector<index_t> saved_offsets_, resize_offsets_;
    typename B::template buffer<T> memory_;
    typename B::template buffer<int> integers_;
    typename B::template buffer<double> doubles_;  // per-row losses, then the MoE layers' auxiliary losses
    vector_view<T, M> x_, dx_, head_in_, d_head_in_, logits_, saved_;
    layer_scratch<B> scratch_;
    std::vector<double> host_losses_, host_aux_;
    std::vector<int> host_positions_, host_offsets_;
    std::vector<sequence_rows> sequences_rows_;
};

// The forward of a training step over `ids` at `positions` (already in the workspace's memory): the
// embedding, then every block after its residual resize, keeping what backward needs in `ws`; the
// residual stream ends in ws.x(). `noise`: the salt of a gaussian resize's draws. `before_block(block)`
// runs after the block's resize and `after_block(block, kept)` after the block (analysis reads the
// activations there).
struct no_block_hook {
    template <class... A>
    void operator()(const A&...) const {}
};
template <class Model, class BeforeBlock = no_block_hook, class AfterBlock = no_block_hook>
void forward_keeping(const typename Model::context& ctx, const Model& m, step_workspace<typename Model::backend>& ws,
                     vector_view<const int, typename Model::backend::memory> ids,
                     vector_view<const int, typename Model::backend::memory> positions, std::uint64_t noise = 0,
                     BeforeBlock&& before_block = {},
                     AfterBlock&& after_block = {}) {
    using B = typename Model::backend;
    using T = typename B::compute_type;
    const index_t rows = ws.rows();
    const auto x = ws.x();
    const auto seqs = ws.sequence_list();
    m.embedding_layer().forward(ctx, ids, x);
    m.for_each_block([&](const auto& b) {
        const auto kept = b.carve_saved(ws.saved_memory(b.layer()), rows);
        m.enter_layer(ctx, x, b.layer(), ws.resize_input(b.layer()), {ws.row_counters(), noise});
        before_block(b);
        const auto kv_of = [&](std::size_t i) {
            const auto& q = seqs[i];
            return kv_rows<T, typename B::memory>{kept.attn.k.rows_range(q.begin, q.begin + q.rows),
                                                  kept.attn.v.rows_range(q.begin, q.begin + q.rows)};
        };
        b.forward(ctx, x, seqs, positions, kv_of, ws.scratch(), &kept);
        after_block(b, kept);
    });
}

// Adds d(mean loss)/d(params) over the batch's B*T predictions into `grads` (bound from a buffer
// laid out like the parameters) and returns that mean loss. `ctx` sets the threads (or stream).
// An MoE model's objective adds router_aux_loss_coef times the sum of its layers' auxiliary
// losses (semantics.md section 6), whose gradient is added too; the return value stays the mean
// next-token loss; ws.host_aux_losses() and ws.host_expert_offsets() hold each layer's auxiliary
// loss and expert offsets afterwards.
// `ready`, when given, is called as parts of the gradient become final for this batch: with the
// layer index after each block's backward, with -1 after the head's (ln_f and lm_head), with -2
// after the embedding's (a data-parallel trainer starts their all-reduce there).
template <class Model>
double loss_and_gradient(const typename Model::context& ctx, const Model& m, const token_batch& batch,
                         step_workspace<typename Model::backend>& ws,
                         const model_tensors<typename Model::T, typename Model::backend::memory>& grads,
                         const std::function<void(int)>& ready = {}) {
    using B = typename Model::backend;
    using T = typename B::compute_type;
    const int V = m.vocab();
    const index_t rows = ws.rows();
    if (batch.sequences != ws.sequences() || static_cast<index_t>(batch.tokens.size()) != rows ||
        batch.targets.size() != batch.tokens.size())
        vwt::detail::fail("loss_and_gradient: the batch must hold ", ws.sequences(), " non-empty sequences of ", ws.length(),
                          " tokens, with one target per token");
    for (std::size_t i = 0; i < batch.tokens.size(); ++i)
        if (batch.tokens[i] < 0 || batch.tokens[i] >= V || batch.targets[i] < 0 || batch.targets[i] >= V)
            vwt::detail::fail("loss_and_gradient: token or target id outside [0, ", V, ")");
    B::upload(ctx, batch.tokens, ws.ids());
    B::upload(ctx, batch.targets, ws.targets());
    B::upload(ctx, ws.host_positions(), ws.positions());
    const vector_view<const int, typename B::memory> ids = ws.ids(), targets = ws.targets(), positions = ws.positions();
    const auto x = ws.x(), dx = ws.dx();
    const auto seqs = ws.sequence_list();

    const resize_noise<typename B::memory> noise{ws.row_counters(), batch.noise};
    forward_keeping(ctx, m, ws, ids, positions, batch.noise);
    m.head_layer().forward(ctx, x.all().as_const(), ws.head_in(), ws.logits(), m.head_noise(noise));
    m.head_layer().loss(ctx, ws.logits(), targets, T(1.0 / static_cast<double>(rows)), ws.losses());  // logits -> d(loss)/d(logits)
    B::download(ctx, vector_view<const double, typename B::memory>(ws.losses()), ws.host_losses());
    double loss = 0;
    for (double l : ws.host_losses()) loss += l;

    // backward
    m.head_layer().backward(ctx, x.all().as_const(), ws.head_in().as_const(), ws.logits().as_const(), ws.d_head_in(), dx.all(),
                            ws.scratch().norm, grads.head, m.head_noise(noise));
    if (ready) ready(-1);
    m.for_each_block_reversed([&](const auto& b) {
        const auto kept = b.carve_saved(ws.saved_memory(b.layer()), rows);
        b.backward(ctx, dx, seqs, positions, kept, ws.scratch(), grads.of(b));
        m.enter_layer_backward(ctx, dx, b.layer(), ws.resize_input(b.layer()), ws.scratch().d_normed,
                               grads.resizes.at(static_cast<std::size_t>(b.layer())), noise);
        if (ready) ready(b.layer());
    });
    m.embedding_layer().backward(ctx, dx, ids, grads.embedding);
    if (ready) ready(-2);
    if (!ws.host_aux_losses().empty()) {
        B::download(ctx, vector_view<const double, typename B::memory>(ws.scratch().moe_aux), ws.host_aux_losses());
        B::download(ctx, vector_view<const int, typename B::memory>(ws.scratch().expert_offsets), ws.host_expert_offsets());
    }
    return loss / static_cast<double>(rows);
}

}  // namespace vwt::train
