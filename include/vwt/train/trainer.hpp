// The training loop: batches of windows, gradient accumulation, clipping, AdamW, validation, and
// resumable checkpoints (model, optimizer moments, step, data position) that survive a crash.
#pragma once

// A checkpoint is a directory step-NNNNNNNN/ under the output directory, written completely
// (every file atomically) before the file LATEST is atomically replaced to name it; a process
// killed at any moment leaves LATEST naming the previous complete checkpoint.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../io/checkpoint.hpp"
#include "../model.hpp"
#include "backward.hpp"
#include "data.hpp"
#include "optimizer.hpp"
#include "../backend/cpu/backend.hpp"  // VWT_OMP

namespace vwt::train {

struct train_options {
    std::int64_t steps = 100;
    int batch = 8;          // sequences per micro-batch
    int accumulate = 1;     // micro-batches per optimizer step
    double clip = 1.0;      // global gradient norm; 0 disables
    lr_schedule lr{lr_decay::cosine, 3e-3, 10, 100, 3e-4};
    adamw_options adam{};
    int threads = 1;
    std::int64_t eval_every = 0;        // 0: only at the end
    std::int64_t checkpoint_every = 0;  // 0: only at the end
    std::filesystem::path out;          // empty: no checkpoints
};

struct step_report {
    std::int64_t step = 0;
    double loss = 0, lr = 0, grad_norm = 0, tokens_per_second = 0;
    double validation_loss = -1;  // < 0: not evaluated at this step
};

// Mean validation loss over every validation window (or over the first `limit`), by the
// inference forward pass (no activations kept).
template <class T>
double validation_loss(const model_config& c, const parameter_layout& layout, std::span<const T> params,
                       const window_loader& data, std::size_t limit = 0, int threads = 1) {
    (void)layout;
    const std::size_t n = limit ? std::min(limit, data.validation_windows()) : data.validation_windows();
    if (n == 0) return std::nan("");
    const model<cpu::backend<T>> m(c, params);
    const int V = m.vocab();
    double sum = 0;
    std::vector<int> x, y;
    for (std::size_t i = 0; i < n; ++i) {
        data.validation_window(i, x, y);
        auto cache = m.make_cache(static_cast<int>(x.size()));
        const sequence_input<T> in{&cache, x};
        const auto logits = m.forward({threads}, std::span(&in, 1), logits_mode::all);
        for (std::size_t t = 0; t < x.size(); ++t) {
            const T* row = logits.data() + t * static_cast<std::size_t>(V);
            const double mx = *std::max_element(row, row + V);
            double z = 0;
            for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
            sum += (std::log(z) + mx - row[y[t]]) / static_cast<double>(x.size());
        }
    }
    return sum / static_cast<double>(n);
}

inline std::string checkpoint_name(std::int64_t step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
    return buf;
}

template <class T>
class trainer {
public:
    trainer(model_config c, std::span<const T> params, window_loader data, train_options o)
        : c_(std::move(c)), layout_(c_), params_(params.begin(), params.end()), data_(std::move(data)), o_(std::move(o)),
          opt_(c_, layout_, o_.adam) {
        if (static_cast<std::int64_t>(params_.size()) != layout_.size()) vwt::detail::fail("trainer: parameter buffer of the wrong size");
        if (o_.batch < 1 || o_.accumulate < 1 || o_.threads < 1) vwt::detail::fail("trainer: batch, accumulate and threads must be >= 1");
    }

    std::int64_t step() const { return step_; }
    std::span<const T> parameters() const { return params_; }
    const model_config& config() const { return c_; }

    // Runs until o.steps; calls `report` after every step. Stops with a vwt::error on a
    // non-finite loss, leaving the last checkpoint as it was.
    void run(const std::function<void(const step_report&)>& report = {}) {
        using backend = cpu::backend<T>;
        aligned_vector<T> grad(params_.size());
        gradient_workspace<backend> workspace;
        std::vector<int> tokens, targets, x, y;
        while (step_ < o_.steps) {
            const auto t0 = std::chrono::steady_clock::now();
            std::fill(grad.begin(), grad.end(), T(0));
            double loss = 0;
            std::size_t window = 0;
            for (int micro = 0; micro < o_.accumulate; ++micro) {
                tokens.clear();
                targets.clear();
                for (int s = 0; s < o_.batch; ++s) {
                    data_.next(x, y);
                    tokens.insert(tokens.end(), x.begin(), x.end());
                    targets.insert(targets.end(), y.begin(), y.end());
                    window = x.size();
                }
                loss += loss_and_gradient<backend>({o_.threads}, c_, layout_, params_, token_batch{tokens, targets, o_.batch},
                                                   grad, workspace) / o_.accumulate;
            }
            const T inv = static_cast<T>(1.0 / o_.accumulate);
            for (T& g : grad) g *= inv;
            if (!std::isfinite(loss))
                vwt::detail::fail("training: loss became ", loss, " at step ", step_ + 1,
                                  "; stopped, the last checkpoint is kept (lower the learning rate?)");
            step_report r;
            r.step = ++step_;
            r.loss = loss;
            r.grad_norm = clip_by_global_norm<T>(grad, o_.clip);
            r.lr = o_.lr.at(step_);
            opt_.step(params_, grad, r.lr);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            r.tokens_per_second = static_cast<double>(o_.batch) * o_.accumulate * static_cast<double>(window) / seconds;
            const bool last = step_ == o_.steps;
            if ((o_.eval_every > 0 && step_ % o_.eval_every == 0) || last)
                r.validation_loss = validation_loss<T>(c_, layout_, params_, data_, 0, o_.threads);
            if (!o_.out.empty() && ((o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0) || last)) save_checkpoint();
            if (report) report(r);
        }
    }

    void save_checkpoint() const {
        namespace fs = std::filesystem;
        const fs::path dir = o_.out / checkpoint_name(step_);
        fs::remove_all(dir);  // a partial directory left by an earlier crash at this step
        std::vector<float> as_float(params_.begin(), params_.end());
        io::save_model_dir(dir, c_, as_float, io::dtype::f32);
        const std::vector<float> m(opt_.first_moment().begin(), opt_.first_moment().end());
        const std::vector<float> v(opt_.second_moment().begin(), opt_.second_moment().end());
        const io::tensor_to_write moments[] = {{"adamw.m", {static_cast<std::int64_t>(m.size())}, m},
                                               {"adamw.v", {static_cast<std::int64_t>(v.size())}, v}};
        io::write_safetensors(dir / "optimizer.safetensors", moments, io::dtype::f32);
        nlohmann::ordered_json state = {{"step", step_}, {"optimizer_steps", opt_.steps()}, {"data_position", data_.position()}};
        io::write_file_atomic(dir / "trainer_state.json", state.dump(2) + "\n");
        io::write_file_atomic(o_.out / "LATEST", checkpoint_name(step_) + "\n");
    }

    // Restores parameters, optimizer and data position from out/LATEST.
    void resume() {
        namespace fs = std::filesystem;
        const auto latest = o_.out / "LATEST";
        if (!fs::exists(latest)) vwt::detail::fail("resume: no checkpoint in '", o_.out.string(), "' (no LATEST file)");
        const auto bytes = io::read_file_bytes(latest, 4096);
        std::string name(bytes.begin(), bytes.end());
        while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
            vwt::detail::fail("resume: '", latest.string(), "' does not name a checkpoint directory");
        const fs::path dir = o_.out / name;
        auto loaded = io::load_model_dir(dir);
        if (loaded.config.schedule != c_.schedule)
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
        if (!m || !v || m->numel() != layout_.size() || v->numel() != layout_.size() || !io::is_float(m->type) ||
            !io::is_float(v->type))
            vwt::detail::fail("resume: '", moments_path, "' does not hold this model's optimizer state");
        std::vector<T> mv(params_.size()), vv(params_.size());
        st.read_as(*m, mv.data());
        st.read_as(*v, vv.data());
        opt_.restore(mv, vv, optimizer_steps);
        data_.seek(static_cast<std::uint64_t>(position));
        step_ = step;
        params_.assign(loaded.params.begin(), loaded.params.end());
    }

private:
    model_config c_;
    parameter_layout layout_;
    aligned_vector<T> params_;  // aligned, so that a step's rounding does not depend on the heap
    window_loader data_;
    train_options o_;
    adamw<T> opt_;
    std::int64_t step_ = 0;
};

}  // namespace vwt::train
