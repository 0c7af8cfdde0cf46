// Per-layer statistics of a model's residual stream and MLP activations over held-out text (the
// paper's representation analysis): how many directions the stream uses at each layer's width
// (participation ratio, effective rank), how much each layer turns the stream (cosines), its scale
// (RMS, largest coordinate: massive activations), and how the MLP's units share the work (ever
// active, active per token, entropy of the activation mass). Definitions: docs/analysis.md.
#pragma once

// The forward is the training step's (train::forward_keeping): the same blocks, asked to keep what
// backward needs, which includes each MLP's fused c_fc output; the stream is read before and after
// each block, the MLP's output after it. Host-accessible memory only (the CPU policy): the statistics read the buffers
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

namespace detail {
// -sum p log p of the shares p_k = v_k / sum v (zeros skipped; 0 when the sum is 0).
inline double entropy_of_shares(const Eigen::VectorXd& v) {
    const double total = v.sum();
    double h = 0;
    if (total > 0)
        for (const double x : v)
            if (x > 0) h -= x / total * std::log(x / total);
    return h;
}
}  // namespace detail

// Running sums for one layer, fed a batch of tokens at a time.
class layer_accumulator {
public:
    layer_accumulator(int layer, int width, int units)
        : layer_(layer), width_(width), sum_(Eigen::VectorXd::Zero(width)), sum_outer_(Eigen::MatrixXd::Zero(width, width)),
          ever_(static_cast<std::size_t>(units), 0), mass_(Eigen::VectorXd::Zero(units)) {}

    // `rows` tokens, row r of each at r * stride: the whole stream after the previous layer
    // (`previous`; the embedding's before the first), the stream as this layer reads it (`in`), the
    // whole stream after it (`out`), and the MLP's fused c_fc output (`fused`: u and g, laid out
    // as `layout`; null for an MoE layer).
    template <class T>
    void add(index_t rows, index_t stride, const T* previous, const T* in, const T* out, const T* fused, index_t fused_stride,
             swiglu_layout layout) {
        using rows_of = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
        const Eigen::MatrixXd x = rows_of(out, rows, width_, Eigen::OuterStride<>(stride)).template cast<double>();
        tokens_ += rows;
        square_ += x.squaredNorm();
        max_abs_ = std::max(max_abs_, x.cwiseAbs().maxCoeff());
        sum_ += x.colwise().sum().transpose();
        sum_outer_.selfadjointView<Eigen::Lower>().rankUpdate(x.transpose());
        const auto units = static_cast<index_t>(ever_.size());
        const bool interleaved = layout == swiglu_layout::interleaved;
        for (index_t r = 0; r < rows; ++r) {
            cosine_previous_ += cosine(previous + r * stride, out + r * stride, stride);
            cosine_layer_ += cosine(in + r * stride, out + r * stride, width_);
            if (!fused) continue;
            const T* f = fused + r * fused_stride;
            index_t active = 0;
            for (index_t j = 0; j < units; ++j) {
                const double u = static_cast<double>(interleaved ? f[2 * j] : f[j]);
                const double gate = static_cast<double>(interleaved ? f[2 * j + 1] : f[units + j]);
                mass_[j] += std::abs(u * gate / (1 + std::exp(-gate)));
                if (gate > 0) {
                    ever_[static_cast<std::size_t>(j)] = 1;
                    ++active;
                }
            }
            active_share_ += static_cast<double>(active) / static_cast<double>(units);
        }
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
        s.effective_rank = total > 0 ? std::exp(detail::entropy_of_shares(lambda.cwiseSqrt())) : 0;
        s.cosine_previous = cosine_previous_ / n;
        s.cosine_layer = cosine_layer_ / n;
        if (!ever_.empty()) {
            const auto units = static_cast<double>(ever_.size());
            s.mlp_ever_active = static_cast<double>(std::count(ever_.begin(), ever_.end(), 1)) / units;
            s.mlp_active_fraction = active_share_ / n;
            s.mlp_entropy = units > 1 ? detail::entropy_of_shares(mass_) / std::log(units) : 0;
        }
        return s;
    }

private:
    template <class T>
    static double cosine(const T* a, const T* b, index_t n) {
        double ab = 0, aa = 0, bb = 0;
        for (index_t i = 0; i < n; ++i) {
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
    std::vector<char> ever_;     // per MLP unit (empty for an MoE layer)
    Eigen::VectorXd mass_;
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

    std::vector<layer_accumulator> acc;
    m.for_each_block([&](const auto& b) {
        using mlp_saved = typename std::remove_cvref_t<decltype(b)>::mlp_type::saved;
        const bool dense = requires(const mlp_saved& s) { s.fused; };
        acc.emplace_back(b.layer(), b.stream_width(), dense ? 4 * b.width() : 0);  // a fixed-width stream: h columns
    });
    std::vector<T> previous(static_cast<std::size_t>(rows * W)), before(static_cast<std::size_t>(rows * W));
    std::vector<int> ids(static_cast<std::size_t>(rows));
    const auto x = ws.x().all();
    const auto copy_stream = [&](std::vector<T>& to) {
        for (index_t r = 0; r < rows; ++r) std::copy(x.row(r), x.row(r) + W, to.begin() + static_cast<std::ptrdiff_t>(r * W));
    };
    for (std::size_t first = 0; first < windows.size(); first += static_cast<std::size_t>(sequences)) {
        const std::size_t count = std::min<std::size_t>(static_cast<std::size_t>(sequences), windows.size() - first);
        for (std::size_t q = 0; q < static_cast<std::size_t>(sequences); ++q) {  // a short last batch repeats its first window (not counted)
            const auto& window = windows[first + (q < count ? q : 0)];
            std::copy(window.begin(), window.end(), ids.begin() + static_cast<std::ptrdiff_t>(q * static_cast<std::size_t>(length)));
        }
        for (int t : ids)
            if (t < 0 || t >= m.vocab()) vwt::detail::fail("analyze: token ", t, " is outside the vocabulary [0, ", m.vocab(), ")");
        B::upload(ctx, std::span<const int>(ids), ws.ids());
        B::upload(ctx, ws.host_positions(), ws.positions());
        const auto counted = static_cast<index_t>(count) * length;
        train::forward_keeping(
            ctx, m, ws, ws.ids(), ws.positions(), 0,
            [&](const auto& b) {
                // before the first layer: the embedding's stream as the layer reads it (after its resize)
                if (b.layer() == 0) copy_stream(previous);
                copy_stream(before);
            },
            [&](const auto& b, const auto& kept) {
                const T* fused = nullptr;
                index_t fused_stride = 0;
                if constexpr (requires { kept.mlp.fused; }) fused = kept.mlp.fused.row(0), fused_stride = kept.mlp.fused.stride();
                acc[static_cast<std::size_t>(b.layer())].add(counted, W, previous.data(), before.data(), x.row(0), fused, fused_stride,
                                                             m.config().mlp);
                copy_stream(previous);
            });
    }
    std::vector<layer_statistics> out;
    for (const auto& a : acc) out.push_back(a.finish());
    return out;
}

}  // namespace vwt::analysis
