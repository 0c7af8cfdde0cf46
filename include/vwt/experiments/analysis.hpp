// Per-layer statistics of a model's residual stream and MLP activations over held-out text (the
// paper's representation analysis): how many directions the stream uses at each layer's width
// (participation ratio, effective rank), how much each layer turns the stream (cosines), its scale
// (RMS, largest coordinate: massive activations), and how the MLP's units share the work (ever
// active, active per token, entropy of the activation mass). Definitions: docs/analysis.md.
#pragma once

// The forward is the training step's (train/step.hpp): the same blocks, asked to keep what
// backward needs, which includes each MLP's fused input; the stream and the MLP input are read
// after each block. Host-accessible memory only (the CPU policy): the statistics read the buffers
// in place.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <Eigen/Dense>

#include "../train/step.hpp"

namespace vwt::analysis {

struct layer_statistics {
    int layer = 0;  // 0-based
    int width = 0;  // w_i: the columns the layer reads and writes, over which the stream statistics run
    double rms = 0;                  // sqrt(mean x^2) of the stream after the layer, over its width
    double max_abs = 0;              // the largest |x| there
    double participation_ratio = 0;  // (sum lambda)^2 / sum lambda^2, lambda the covariance's eigenvalues
    double effective_rank = 0;       // exp(entropy of the normalised singular values of the centred stream)
    double cosine_previous = 0;      // mean over tokens: the whole stream after this layer vs after the previous one
    double cosine_layer = 0;         // mean over tokens: the layer's columns after it vs before it
    // Dense SwiGLU MLPs (NaN for MoE layers): unit j is active on a token when its gate g_j > 0
    // (silu(g) > 0).
    double mlp_ever_active = std::numeric_limits<double>::quiet_NaN();      // units active on at least one token
    double mlp_active_fraction = std::numeric_limits<double>::quiet_NaN();  // mean over tokens of the active units' share
    double mlp_entropy = std::numeric_limits<double>::quiet_NaN();  // entropy of the units' shares of sum |u silu(g)|, / log(units)
};

// Running sums for one layer, fed row by row.
class layer_accumulator {
public:
    layer_accumulator(int layer, int width, int units)
        : layer_(layer), width_(width), sum_(Eigen::VectorXd::Zero(width)), sum_outer_(Eigen::MatrixXd::Zero(width, width)),
          ever_(static_cast<std::size_t>(units), 0), mass_(static_cast<std::size_t>(units), 0.0), dense_(units > 0) {}

    // One token: the whole stream after the previous layer (`previous`; the embedding's before the
    // first), the stream as this layer reads it (`in`), the whole stream after it (`out`), and the
    // MLP's u and g (empty for an MoE layer).
    template <class T>
    void add(std::span<const T> previous, std::span<const T> in, std::span<const T> out, std::span<const T> u, std::span<const T> g) {
        ++tokens_;
        Eigen::VectorXd x(width_);
        for (int c = 0; c < width_; ++c) {
            const double v = static_cast<double>(out[static_cast<std::size_t>(c)]);
            x[c] = v;
            square_ += v * v;
            max_abs_ = std::max(max_abs_, std::abs(v));
        }
        sum_ += x;
        sum_outer_.selfadjointView<Eigen::Lower>().rankUpdate(x);
        cosine_previous_ += cosine(previous, out);
        cosine_layer_ += cosine(in.first(static_cast<std::size_t>(width_)), out.first(static_cast<std::size_t>(width_)));
        if (u.empty()) return;
        std::size_t active = 0;
        for (std::size_t j = 0; j < u.size(); ++j) {
            const double gate = static_cast<double>(g[j]);
            const double a = std::abs(static_cast<double>(u[j]) * gate / (1 + std::exp(-gate)));
            mass_[j] += a;
            if (gate > 0) {
                ever_[j] = 1;
                ++active;
            }
        }
        active_share_ += static_cast<double>(active) / static_cast<double>(u.size());
    }

    layer_statistics finish() const {
        layer_statistics s;
        s.layer = layer_;
        s.width = width_;
        const double n = static_cast<double>(tokens_);
        if (tokens_ == 0) return s;
        s.rms = std::sqrt(square_ / (n * width_));
        s.max_abs = max_abs_;
        const Eigen::VectorXd mean = sum_ / n;
        Eigen::MatrixXd covariance = sum_outer_.selfadjointView<Eigen::Lower>();
        covariance = covariance / n - mean * mean.transpose();
        const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(covariance, Eigen::EigenvaluesOnly);
        const Eigen::VectorXd lambda = eig.eigenvalues().cwiseMax(0.0);
        const double total = lambda.sum();
        s.participation_ratio = total > 0 ? total * total / lambda.squaredNorm() : 0;
        const Eigen::VectorXd sigma = lambda.cwiseSqrt();
        double entropy = 0;
        for (const double v : sigma)
            if (v > 0) entropy -= v / sigma.sum() * std::log(v / sigma.sum());
        s.effective_rank = sigma.sum() > 0 ? std::exp(entropy) : 0;
        s.cosine_previous = cosine_previous_ / n;
        s.cosine_layer = cosine_layer_ / n;
        if (dense_) {
            double ever = 0, mass = 0, h = 0;
            for (std::size_t j = 0; j < mass_.size(); ++j) ever += ever_[j], mass += mass_[j];
            for (const double m : mass_)
                if (m > 0) h -= m / mass * std::log(m / mass);
            s.mlp_ever_active = ever / static_cast<double>(mass_.size());
            s.mlp_active_fraction = active_share_ / n;
            s.mlp_entropy = mass_.size() > 1 && mass > 0 ? h / std::log(static_cast<double>(mass_.size())) : 0;
        }
        return s;
    }

private:
    template <class T>
    static double cosine(std::span<const T> a, std::span<const T> b) {
        double ab = 0, aa = 0, bb = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
            ab += x * y, aa += x * x, bb += y * y;
        }
        return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0;
    }

    int layer_, width_;
    std::int64_t tokens_ = 0;
    double square_ = 0, max_abs_ = 0, cosine_previous_ = 0, cosine_layer_ = 0, active_share_ = 0;
    Eigen::VectorXd sum_;
    Eigen::MatrixXd sum_outer_;  // lower triangle
    std::vector<char> ever_;
    std::vector<double> mass_;
    bool dense_;
};

// Each layer's statistics over `windows` (each a sequence of tokens, all of one length), run
// `batch` windows at a time.
template <class Model>
    requires host_accessible_memory<typename Model::backend::memory>
std::vector<layer_statistics> analyze(const typename Model::context& ctx, const Model& m, const std::vector<std::vector<int>>& windows,
                                      int batch) {
    using B = typename Model::backend;
    using T = typename B::compute_type;
    if (windows.empty()) vwt::detail::fail("analyze: no windows of text");
    if (batch < 1) vwt::detail::fail("analyze: batch must be at least 1, got ", batch);
    const auto length = static_cast<index_t>(windows.front().size());
    for (const auto& w : windows)
        if (static_cast<index_t>(w.size()) != length || w.empty()) vwt::detail::fail("analyze: the windows must be non-empty and of one length");
    const int sequences = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(batch), windows.size()));
    train::step_workspace<B> ws(ctx, m, sequences, length);
    const index_t rows = ws.rows(), W = ws.x().residual_width();
    const auto inter_of = [](int width) { return 4 * width; };

    std::vector<layer_accumulator> acc;
    m.for_each_block([&](const auto& b) {
        using mlp_saved = typename std::remove_cvref_t<decltype(b)>::mlp_type::saved;
        const bool dense = requires(const mlp_saved& s) { s.fused; };
        acc.emplace_back(b.layer(), b.width(), dense ? inter_of(b.width()) : 0);
    });
    const auto swiglu = m.config().mlp;
    std::vector<T> previous(static_cast<std::size_t>(rows * W)), before(static_cast<std::size_t>(rows * W));
    std::vector<int> ids(static_cast<std::size_t>(rows));
    const auto x = ws.x();
    const auto seqs = ws.sequence_list();
    const auto copy_stream = [&](std::vector<T>& to) {
        for (index_t r = 0; r < rows; ++r) std::copy(x.all().row(r), x.all().row(r) + W, to.begin() + static_cast<std::ptrdiff_t>(r * W));
    };
    for (std::size_t first = 0; first < windows.size(); first += static_cast<std::size_t>(sequences)) {
        const std::size_t count = std::min<std::size_t>(static_cast<std::size_t>(sequences), windows.size() - first);
        for (std::size_t q = 0; q < static_cast<std::size_t>(sequences); ++q)  // a short last batch repeats its first window (not counted)
            std::copy(windows[first + (q < count ? q : 0)].begin(), windows[first + (q < count ? q : 0)].end(),
                      ids.begin() + static_cast<std::ptrdiff_t>(q * static_cast<std::size_t>(length)));
        for (int t : ids)
            if (t < 0 || t >= m.vocab()) vwt::detail::fail("analyze: token ", t, " is outside the vocabulary [0, ", m.vocab(), ")");
        B::upload(ctx, std::span<const int>(ids), ws.ids());
        B::upload(ctx, ws.host_positions(), ws.positions());
        const vector_view<const int, typename B::memory> id_view = ws.ids(), positions = ws.positions();
        m.embedding_layer().forward(ctx, id_view, x);
        copy_stream(previous);
        const auto counted = static_cast<index_t>(count) * length;
        m.for_each_block([&](const auto& b) {
            const auto kept = b.carve_saved(ws.saved_memory(b.layer()), rows);
            m.resize().template before_layer<B>(ctx, x, b.layer());
            copy_stream(before);
            const auto kv_of = [&](std::size_t i) {
                const auto& q = seqs[i];
                return kv_rows<T, typename B::memory>{kept.attn.k.rows_range(q.begin, q.begin + q.rows),
                                                      kept.attn.v.rows_range(q.begin, q.begin + q.rows)};
            };
            b.forward(ctx, x, seqs, positions, kv_of, ws.scratch(), &kept);
            auto& a = acc[static_cast<std::size_t>(b.layer())];
            const auto units = static_cast<std::size_t>(inter_of(b.width()));
            for (index_t r = 0; r < counted; ++r) {
                const std::span<const T> prev(previous.data() + r * W, static_cast<std::size_t>(W)),
                    in(before.data() + r * W, static_cast<std::size_t>(W)), out(x.all().row(r), static_cast<std::size_t>(W));
                std::span<const T> u, g;
                std::vector<T> u_split, g_split;
                if constexpr (requires { kept.mlp.fused; }) {
                    const T* f = kept.mlp.fused.row(r);
                    if (swiglu == swiglu_layout::split) {
                        u = std::span<const T>(f, units), g = std::span<const T>(f + units, units);
                    } else {
                        u_split.resize(units), g_split.resize(units);
                        for (std::size_t j = 0; j < units; ++j) u_split[j] = f[2 * j], g_split[j] = f[2 * j + 1];
                        u = u_split, g = g_split;
                    }
                }
                a.add(prev, in, out, u, g);
            }
            copy_stream(previous);
        });
    }
    std::vector<layer_statistics> out;
    for (const auto& a : acc) out.push_back(a.finish());
    return out;
}

}  // namespace vwt::analysis
