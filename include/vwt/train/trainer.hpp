// The training loop: batches of windows, gradient accumulation, clipping, AdamW, validation, and
// resumable checkpoints (model, optimizer moments, step, data position) that survive a crash.
// Generic over the backend policy: parameters, gradients and moments live in its memory.
#pragma once

// A checkpoint is a directory step-NNNNNNNN/ under the output directory, written completely
// (every file atomically) before the file LATEST is atomically replaced to name it; a process
// killed at any moment leaves LATEST naming the previous complete checkpoint.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../io/checkpoint.hpp"
#include "../model/model.hpp"
#include "comm.hpp"
#include "data.hpp"
#include "optimizer.hpp"
#include "step.hpp"

namespace vwt::train {

struct train_options {
    std::int64_t steps = 100;
    int batch = 8;          // sequences per micro-batch (of one process)
    int accumulate = 1;     // micro-batches per optimizer step: batch x accumulate sequences per step,
                            // whatever the number of ranks (data parallelism splits them)
    double clip = 1.0;      // global gradient norm; 0 disables
    lr_schedule lr{lr_decay::cosine, 3e-3, 10, 100, 3e-4};
    adamw_options adam{};
    std::int64_t eval_every = 0;        // 0: only at the end
    std::int64_t checkpoint_every = 0;  // 0: only at the end
    std::filesystem::path out;          // empty: no checkpoints
    std::uint64_t max_shard_bytes = 0;  // > 0: checkpoint weights in shards of at most this many bytes
    std::filesystem::path tokenizer;    // a tokenizer.json copied into every checkpoint (empty: none)
};

struct step_report {
    std::int64_t step = 0;
    double loss = 0, lr = 0, grad_norm = 0, tokens_per_second = 0;
    double validation_loss = -1;  // < 0: not evaluated at this step
    // MoE models: the sum over layers of the routers' auxiliary losses (mean over micro-batches, each
    // computed over its own tokens;
    // the objective adds router_aux_loss_coef times it), and the (token, expert) pairs each
    // expert took, layer i's E at i E, over the step's micro-batches. -1 and empty when dense.
    double aux_loss = -1;
    std::vector<std::int64_t> expert_tokens;
};

// Mean validation loss over every validation window (or over the first `limit`), by the
// inference forward pass (no activations kept): the mean over windows of each window's mean
// next-token cross-entropy. For an MoE model, `expert_tokens` (if given) receives the (token,
// expert) pairs each expert took over those windows, layer i's E at i E.
template <class Model>
double validation_loss(const typename Model::context& ctx, const Model& m, const window_loader& data, std::size_t limit = 0,
                       std::vector<std::int64_t>* expert_tokens = nullptr) {
    using B = typename Model::backend;
    using T = typename B::compute_type;
    const std::size_t n = limit ? std::min(limit, data.validation_windows()) : data.validation_windows();
    if (n == 0) return std::nan("");
    const auto length = static_cast<index_t>(data.sequence_length());
    auto cache = m.make_cache(static_cast<int>(length));
    auto ws = m.make_workspace(ctx, length, length);
    typename B::template buffer<int> targets(length);
    typename B::template buffer<double> losses(length);
    std::vector<double> host_losses(static_cast<std::size_t>(length));
    const auto offsets = ws.expert_offsets();
    std::vector<int> host_offsets(static_cast<std::size_t>(offsets.size()));
    const auto E = static_cast<std::size_t>(m.schedule().dims.moe.experts);
    if (expert_tokens) expert_tokens->assign(static_cast<std::size_t>(m.schedule().layers()) * E, 0);
    double sum = 0;
    std::vector<int> x, y;
    for (std::size_t i = 0; i < n; ++i) {
        data.validation_window(i, x, y);
        cache.clear();
        const sequence_input<B> in{&cache, x};
        const auto logits = m.forward(ctx, ws, std::span<const sequence_input<B>>(&in, 1), logits_mode::all);
        if (expert_tokens && E > 0) {
            B::download(ctx, offsets, std::span<int>(host_offsets));
            add_expert_tokens(std::span<const int>(host_offsets), static_cast<int>(E), std::span<std::int64_t>(*expert_tokens));
        }
        B::upload(ctx, std::span<const int>(y), targets.view());
        m.head_layer().loss(ctx, logits, targets.view(), T(0), losses.view());
        B::download(ctx, vector_view<const double, typename B::memory>(losses.view()), std::span<double>(host_losses));
        double window = 0;
        for (double l : host_losses) window += l;
        sum += window / static_cast<double>(length);
    }
    return sum / static_cast<double>(n);
}

inline std::string checkpoint_name(std::int64_t step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
    return buf;
}

// The checkpoint directory that a run's out/LATEST names; `who` starts the error messages.
inline std::filesystem::path latest_checkpoint(const std::filesystem::path& out, const std::string& who) {
    const auto latest = out / "LATEST";
    if (!std::filesystem::exists(latest)) vwt::detail::fail(who, ": no checkpoint in '", out.string(), "' (no LATEST file)");
    const auto bytes = io::read_file_bytes(latest, 4096);
    std::string name(bytes.begin(), bytes.end());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        vwt::detail::fail(who, ": '", latest.string(), "' does not name a checkpoint directory");
    return out / name;
}

template <class B>
class trainer {
public:
    using T = typename B::compute_type;
    using W = typename B::weight_type;
    using M = typename B::memory;
    using context = typename B::context;

    // `comm` (kept by reference, default: this process alone) combines gradients across ranks. With
    // N ranks, each step's batch x accumulate windows (the same windows, in the same order, as one
    // process would take) are dealt out round-robin, window j to rank j mod N, and each rank runs
    // its share in equal micro-batches of at most `batch`; the gradient is the mean over all of them.
    // Every rank holds the same parameters; rank 0 writes the checkpoints.
    trainer(const context& ctx, model_config c, std::span<const W> params, window_loader data, train_options o,
            communicator<B>* comm = nullptr)
        : ctx_(ctx),
          model_(std::move(c), params, ctx),
          data_(std::move(data)),
          o_(std::move(o)),
          comm_(comm ? comm : &single_),
          grads_(model_.layout().size()),
          grad_views_(model_.bind(grads_.view())),
          opt_(ctx, model_.config(), model_.layout(), o_.adam),
          norm_sum_(1) {
        if (o_.batch < 1 || o_.accumulate < 1) vwt::detail::fail("trainer: batch and accumulate must be >= 1");
        const int ranks = comm_->size();
        const std::int64_t global = static_cast<std::int64_t>(o_.batch) * o_.accumulate;
        if (global % ranks != 0)
            vwt::detail::fail("trainer: the ", global, " sequences of a step (batch ", o_.batch, " x accumulate ", o_.accumulate,
                              ") do not divide among ", ranks, " ranks");
        // This rank's share in equal micro-batches: the largest size <= batch that divides it.
        const auto share = static_cast<int>(global / ranks);
        micro_ = std::min(o_.batch, share);
        while (share % micro_ != 0) --micro_;
        workspace_ = std::make_unique<step_workspace<B>>(ctx, model_, micro_, static_cast<index_t>(data_.sequence_length()));
        // The gradient's parts in the order the backward finishes them: the embedding (part 0), the
        // head's ln_f and lm_head (part 1), layer i (part 2 + i); each contiguous in the layout.
        gradient_parts_.assign(static_cast<std::size_t>(model_.schedule().layers() + 2), {0, 0});
        for (const auto& t : model_.layout().tensors()) {
            auto& [begin, end] = gradient_parts_[static_cast<std::size_t>(t.layer >= 0 ? 2 + t.layer : t.role == tensor_role::embedding ? 0 : 1)];
            if (end == 0) begin = end = t.offset;
            if (t.offset != end) vwt::detail::fail("trainer: the tensors of a gradient part are not contiguous (", t.name, ")");
            end += t.numel();
        }
    }

    // Sequences per micro-batch on this rank, and micro-batches per step on all ranks together.
    int micro_batch() const { return micro_; }
    int micro_batches() const { return o_.batch * o_.accumulate / micro_; }

    std::int64_t step() const { return step_; }
    const model_config& config() const { return model_.config(); }
    const vwt::model<B>& model() const { return model_; }
    // The parameters, copied to the host.
    std::vector<W> parameters() const {
        std::vector<W> host(static_cast<std::size_t>(model_.layout().size()));
        B::download(ctx_, model_.parameters(), std::span<W>(host));
        return host;
    }

    // Runs until o.steps; calls `report` after every step. Stops with a vwt::error on a
    // non-finite loss, leaving the last checkpoint as it was.
    void run(const std::function<void(const step_report&)>& report = {}) {
        std::vector<int> tokens, targets, x, y;
        const auto grad = grads_.view();
        const int ranks = comm_->size(), rank = comm_->rank(), global = o_.batch * o_.accumulate;
        const auto& moe = model_.schedule().dims.moe;
        std::vector<double> totals;  // this rank's sums, then every rank's: loss, aux loss, tokens per expert
        while (step_ < o_.steps) {
            const auto t0 = std::chrono::steady_clock::now();
            B::fill(ctx_, grad.as_matrix(1, grad.size()), T(0));
            step_report r;
            if (moe.enabled()) r.expert_tokens.assign(static_cast<std::size_t>(model_.schedule().layers() * moe.experts), 0);
            totals.assign(2 + r.expert_tokens.size(), 0.0);
            std::size_t window = 0;
            int in_batch = 0, micro_left = global / ranks / micro_;
            tokens.clear();
            targets.clear();
            // With several ranks, each part of the gradient is all-reduced as soon as the step's last
            // micro-batch has finished it, overlapping the rest of the backward.
            const std::function<void(int)> reduce_part = [&](int part) {
                const auto [begin, end] = gradient_parts_[static_cast<std::size_t>(part + 2)];
                comm_->start_all_reduce_sum(ctx_, grad.subview(begin, end - begin));
                comm_->progress();
            };
            for (int j = 0; j < global; ++j) {
                data_.next(x, y);  // every rank draws every window, and keeps its own
                window = x.size();
                if (j % ranks != rank) continue;
                tokens.insert(tokens.end(), x.begin(), x.end());
                targets.insert(targets.end(), y.begin(), y.end());
                if (++in_batch < micro_) continue;
                const bool last_micro = --micro_left == 0;
                // a gaussian resize draws anew for every micro-batch of every step
                const auto noise = (static_cast<std::uint64_t>(step_) << 32) | static_cast<std::uint64_t>(j);
                totals[0] += loss_and_gradient(ctx_, model_, token_batch{tokens, targets, micro_, noise}, *workspace_, grad_views_,
                                               ranks > 1 && last_micro ? reduce_part : std::function<void(int)>{});
                if (moe.enabled()) add_moe_statistics(totals);
                tokens.clear();
                targets.clear();
                in_batch = 0;
            }
            comm_->finish_all_reduces();
            comm_->all_reduce_sum(std::span<double>(totals));
            const double micro_batches = this->micro_batches();
            B::scale(ctx_, grad, static_cast<T>(1.0 / micro_batches));
            const double loss = totals[0] / micro_batches;
            if (moe.enabled()) {
                r.aux_loss = totals[1] / micro_batches;
                for (std::size_t i = 0; i < r.expert_tokens.size(); ++i) r.expert_tokens[i] = static_cast<std::int64_t>(totals[2 + i]);
            }
            if (!std::isfinite(loss))
                vwt::detail::fail("training: loss became ", loss, " at step ", step_ + 1,
                                  "; stopped, the last checkpoint is kept (lower the learning rate?)");
            r.step = ++step_;
            r.loss = loss;
            r.grad_norm = clip_by_global_norm<B>(ctx_, grad, o_.clip, norm_sum_.view());
            r.lr = o_.lr.at(step_);
            opt_.step(ctx_, model_.parameters(), vector_view<const T, M>(grad), r.lr);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            r.tokens_per_second = static_cast<double>(global) * static_cast<double>(window) / seconds;  // all ranks together
            const bool last = step_ == o_.steps;
            // Validation and checkpoints on rank 0 (every rank holds the same parameters).
            if (rank == 0 && ((o_.eval_every > 0 && step_ % o_.eval_every == 0) || last)) r.validation_loss = validation_loss(ctx_, model_, data_);
            if (!o_.out.empty() && rank == 0 && ((o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0) || last))
                save_checkpoint();
            if (report) report(r);
        }
    }

    void save_checkpoint() const {
        namespace fs = std::filesystem;
        // Written whole beside its final name, then put in its place: an earlier run's checkpoint
        // of the same step, which LATEST may name, stays complete until the new one replaces it.
        const fs::path final_dir = o_.out / checkpoint_name(step_);
        std::string partial(".");
        partial.append(checkpoint_name(step_)).append(".partial");
        const fs::path dir = o_.out / partial;
        fs::remove_all(dir);  // left by an earlier crash
        const auto p = parameters();
        io::save_model_dir(dir, model_.config(), std::vector<float>(p.begin(), p.end()), io::dtype::f32, nullptr, o_.max_shard_bytes);
        const auto m = host_copy(opt_.first_moment()), v = host_copy(opt_.second_moment());
        const io::tensor_to_write moments[] = {{"adamw.m", {static_cast<std::int64_t>(m.size())}, m},
                                               {"adamw.v", {static_cast<std::int64_t>(v.size())}, v}};
        io::write_safetensors(dir / "optimizer.safetensors", moments, io::dtype::f32);
        nlohmann::ordered_json state = {{"step", step_}, {"optimizer_steps", opt_.steps()}, {"data_position", data_.position()}};
        io::write_file_atomic(dir / "trainer_state.json", state.dump(2) + "\n");
        if (!o_.tokenizer.empty()) fs::copy_file(o_.tokenizer, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
        io::replace_directory(dir, final_dir);
        io::write_file_atomic(o_.out / "LATEST", checkpoint_name(step_) + "\n");
    }

    // Restores parameters, optimizer and data position from out/LATEST.
    void resume() {
        namespace fs = std::filesystem;
        const fs::path dir = latest_checkpoint(o_.out, "resume");
        auto loaded = io::load_model_dir(dir);
        if (loaded.config.schedule != model_.config().schedule)
            vwt::detail::fail("resume: checkpoint '", dir.string(), "' has another schedule than this run");
        const auto state_path = (dir / "trainer_state.json").string();
        const auto state_bytes = io::read_file_bytes(state_path, io::max_config_bytes);
        const auto state = io::parse_json(std::span(reinterpret_cast<const char*>(state_bytes.data()), state_bytes.size()),
                                          "training state '" + state_path + "'");
        const io::detail::config_fields fields(state, state_path);
        // Bounded so that a corrupt file is an error, not a hang or an overflow: no run takes 2^50
        // steps, and the data position counts windows served (2^62 is far beyond any corpus).
        const auto step = fields.integer("step", 0, std::int64_t{1} << 50);
        const auto optimizer_steps = fields.integer("optimizer_steps", 0, step);
        const auto position = fields.integer("data_position", 0, std::int64_t{1} << 62);
        const auto moments_path = (dir / "optimizer.safetensors").string();
        const auto moments_bytes = io::read_file_bytes(moments_path);
        const io::safetensors_view st(moments_bytes, moments_path);
        const auto* m = st.find("adamw.m");
        const auto* v = st.find("adamw.v");
        const auto n = model_.layout().size();
        if (!m || !v || m->numel() != n || v->numel() != n || !io::is_float(m->type) ||
            !io::is_float(v->type))
            vwt::detail::fail("resume: '", moments_path, "' does not hold this model's optimizer state");
        std::vector<typename B::state_type> mv(static_cast<std::size_t>(n)), vv(static_cast<std::size_t>(n));
        st.read_as(*m, mv.data());
        st.read_as(*v, vv.data());
        opt_.restore(ctx_, mv, vv, optimizer_steps);
        data_.seek(static_cast<std::uint64_t>(position));
        step_ = step;
        const std::vector<W> params(loaded.params.begin(), loaded.params.end());
        B::upload(ctx_, std::span<const W>(params), model_.parameters());
    }

private:
    // Adds the last micro-batch's auxiliary losses (summed over layers) to totals[1] and its
    // tokens per expert to totals[2...].
    void add_moe_statistics(std::vector<double>& totals) {
        for (double a : workspace_->host_aux_losses()) totals[1] += a;
        add_expert_tokens(std::span<const int>(workspace_->host_expert_offsets()), model_.schedule().dims.moe.experts,
                          std::span<double>(totals).subspan(2));
    }

    template <class U>
    std::vector<float> host_copy(vector_view<const U, M> v) const {
        std::vector<U> host(static_cast<std::size_t>(v.size()));
        B::download(ctx_, v, std::span<U>(host));
        return std::vector<float>(host.begin(), host.end());
    }

    context ctx_;
    vwt::model<B> model_;
    window_loader data_;
    train_options o_;
    single_process<B> single_;
    communicator<B>* comm_;
    typename B::template buffer<T> grads_;
    model_tensors<T, M> grad_views_;
    adamw<B> opt_;
    typename B::template buffer<double> norm_sum_;
    std::unique_ptr<step_workspace<B>> workspace_;
    int micro_ = 1;  // sequences per micro-batch on this rank
    std::vector<std::pair<std::int64_t, std::int64_t>> gradient_parts_;  // [begin, end) in the gradient buffer
    std::int64_t step_ = 0;
};

}  // namespace vwt::train
