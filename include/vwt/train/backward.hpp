// Training forward (one sequence, activations kept) and its backward pass: the loss and the
// gradient of every parameter, into one buffer laid out like the parameters (llm.c style).
#pragma once

// Each op's backward sits beside its forward in the order the forward runs. The math is written
// with Eigen maps over the contiguous buffers; the CPU backend is the only policy so far.

#include <cmath>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "../model_config.hpp"
#include "../parameters.hpp"
#include "../residual_view.hpp"

namespace vwt::train {

template <class T>
using mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using cmap = Eigen::Map<const mat<T>>;
template <class T>
using mmap = Eigen::Map<mat<T>>;

namespace detail {

template <class T>
struct rope_table {
    mat<T> cos, sin;  // [T x d/2]
    rope_table(int tokens, int d, double theta) : cos(tokens, d / 2), sin(tokens, d / 2) {
        for (int t = 0; t < tokens; ++t)
            for (int j = 0; j < d / 2; ++j) {
                const double a = t * std::pow(theta, -2.0 * j / d);
                cos(t, j) = static_cast<T>(std::cos(a));
                sin(t, j) = static_cast<T>(std::sin(a));
            }
    }
    // Rotates head vectors (columns [c, c + d)) of every row; sign -1 applies the inverse rotation.
    void apply(mat<T>& x, index_t c, int d, T sign) const {
        const int h = d / 2;
        for (index_t t = 0; t < x.rows(); ++t)
            for (int j = 0; j < h; ++j) {
                const T a = x(t, c + j), b = x(t, c + j + h), co = cos(t, j), si = sign * sin(t, j);
                x(t, c + j) = a * co - b * si;
                x(t, c + j + h) = b * co + a * si;
            }
    }
};

template <class T>
void rmsnorm_forward(const mat<T>& x, const T* g, T eps, mat<T>& y, std::vector<T>& inv) {
    const index_t n = x.cols();
    y.resize(x.rows(), n);
    inv.resize(static_cast<std::size_t>(x.rows()));
    const Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> gain(g, n);
    for (index_t r = 0; r < x.rows(); ++r) {
        inv[static_cast<std::size_t>(r)] = T(1) / std::sqrt(x.row(r).squaredNorm() / n + eps);
        y.row(r) = (x.row(r).array() * inv[static_cast<std::size_t>(r)] * gain).matrix();
    }
}

// dy -> dx (added into dx), dg (added into dg).
template <class T>
void rmsnorm_backward(const mat<T>& x, const T* g, const std::vector<T>& inv, const mat<T>& dy, mat<T>& dx, T* dg) {
    const index_t n = x.cols();
    const Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> gain(g, n);
    Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> dgain(dg, n);
    for (index_t r = 0; r < x.rows(); ++r) {
        const T s = inv[static_cast<std::size_t>(r)];
        const auto dyg = (dy.row(r).array() * gain).eval();
        dgain += dy.row(r).array() * x.row(r).array() * s;
        const T dot = (dyg * x.row(r).array()).sum();
        dx.row(r).array() += s * dyg - x.row(r).array() * (s * s * s * dot / n);
    }
}

template <class T>
struct layer_tape {
    mat<T> x_in, a, qkv, o, x_mid, b, fused, act;
    std::vector<T> inv1, inv2;
    std::vector<mat<T>> probs;  // per head [T x T]
};

}  // namespace detail

// Mean next-token cross-entropy of `targets` given `tokens` (same length), and d loss / d params
// added into `grad` (sized like the parameters). One sequence at positions 0..T-1.
template <class T>
T loss_and_gradient(const model_config& c, const parameter_layout& layout, std::span<const T> params,
                    std::span<const int> tokens, std::span<const int> targets, std::span<T> grad) {
    const auto& s = c.schedule;
    const int Tn = static_cast<int>(tokens.size());
    if (Tn == 0 || targets.size() != tokens.size()) vwt::detail::fail("loss_and_gradient: tokens and targets must be non-empty and of equal length");
    if (static_cast<std::int64_t>(grad.size()) != layout.size() || static_cast<std::int64_t>(params.size()) != layout.size())
        vwt::detail::fail("loss_and_gradient: parameter or gradient buffer of the wrong size");
    const int H = s.dims.heads, Hkv = s.dims.kv_heads, G = H / Hkv, V = s.dims.vocab;
    const index_t W = s.residual_width, h = s.dims.hidden;
    const T eps = static_cast<T>(c.norm_eps), res = static_cast<T>(c.m_residual);
    const auto P = [&](const std::string& name) { return params.data() + layout.at(name).offset; };
    const auto D = [&](const std::string& name) { return grad.data() + layout.at(name).offset; };

    // forward
    mat<T> x = mat<T>::Zero(Tn, W);
    const cmap<T> wte(P("transformer.wte.weight"), V, h);
    for (int t = 0; t < Tn; ++t) {
        if (tokens[t] < 0 || tokens[t] >= V || targets[t] < 0 || targets[t] >= V)
            vwt::detail::fail("loss_and_gradient: token or target id outside [0, ", V, ")");
        x.row(t).head(h) = wte.row(tokens[t]) * static_cast<T>(c.m_emb);
    }
    std::vector<detail::layer_tape<T>> tape(static_cast<std::size_t>(s.layers()));
    int stream = static_cast<int>(h);
    std::vector<int> zeroed_from(static_cast<std::size_t>(s.layers()), -1);
    for (int i = 0; i < s.layers(); ++i) {
        auto& L = tape[static_cast<std::size_t>(i)];
        const int w = s.width(i), d = w / H;
        const std::string pre = "transformer.h." + std::to_string(i) + ".";
        if (c.resize == resize_method::zero && w > stream) {
            x.middleCols(stream, w - stream).setZero();
            zeroed_from[static_cast<std::size_t>(i)] = stream;
        }
        stream = w;
        const detail::rope_table<T> rope(Tn, d, c.rope_theta);
        L.x_in = x.leftCols(w);
        detail::rmsnorm_forward<T>(L.x_in, P(pre + "ln_1.weight"), eps, L.a, L.inv1);
        const cmap<T> w_attn(P(pre + "sequence_mixer.c_attn.weight"), (H + 2 * Hkv) * d, w);
        L.qkv = L.a * w_attn.transpose();
        for (int g = 0; g < Hkv; ++g)
            for (int k = 0; k <= G; ++k) rope.apply(L.qkv, (g * (G + 2) + k) * d, d, T(1));
        L.o = mat<T>::Zero(Tn, H * d);
        L.probs.assign(static_cast<std::size_t>(H), mat<T>());
        const T scale = static_cast<T>(c.attention_scale(i));
        for (int hh = 0; hh < H; ++hh) {
            const int g = hh / G;
            const auto q = L.qkv.middleCols((g * (G + 2) + hh % G) * d, d);
            const auto k = L.qkv.middleCols((g * (G + 2) + G) * d, d);
            const auto v = L.qkv.middleCols((g * (G + 2) + G + 1) * d, d);
            mat<T> sc = (q * k.transpose()) * scale;
            for (int r = 0; r < Tn; ++r) {
                const T m = sc.row(r).head(r + 1).maxCoeff();
                sc.row(r).head(r + 1) = (sc.row(r).head(r + 1).array() - m).exp().matrix();
                sc.row(r).head(r + 1) /= sc.row(r).head(r + 1).sum();
                sc.row(r).tail(Tn - r - 1).setZero();
            }
            L.o.middleCols(hh * d, d) = sc * v;
            L.probs[static_cast<std::size_t>(hh)] = std::move(sc);
        }
        const cmap<T> w_proj(P(pre + "sequence_mixer.c_proj.weight"), w, H * d);
        x.leftCols(w) += res * (L.o * w_proj.transpose());
        L.x_mid = x.leftCols(w);
        detail::rmsnorm_forward<T>(L.x_mid, P(pre + "ln_2.weight"), eps, L.b, L.inv2);
        const cmap<T> w_fc(P(pre + "mlp_block.c_fc.weight"), 8 * w, w);
        L.fused = L.b * w_fc.transpose();
        L.act.resize(Tn, 4 * w);
        for (int r = 0; r < Tn; ++r)
            for (int j = 0; j < 4 * w; ++j) {
                const T u = c.mlp == mlp_layout::split ? L.fused(r, j) : L.fused(r, 2 * j);
                const T gg = c.mlp == mlp_layout::split ? L.fused(r, 4 * w + j) : L.fused(r, 2 * j + 1);
                L.act(r, j) = u * gg / (T(1) + std::exp(-gg));
            }
        const cmap<T> w_mlp(P(pre + "mlp_block.c_proj.weight"), w, 4 * w);
        x.leftCols(w) += res * (L.act * w_mlp.transpose());
    }
    const int wl = s.width(s.layers() - 1);
    const mat<T> x_last = x.leftCols(wl);
    mat<T> y;
    std::vector<T> inv_f;
    detail::rmsnorm_forward<T>(x_last, P("transformer.ln_f.weight"), eps, y, inv_f);
    mat<T> yh(Tn, h);
    yh.leftCols(std::min<index_t>(wl, h)) = y.leftCols(std::min<index_t>(wl, h));
    if (wl < h) {
        if (c.resize == resize_method::move_up) yh.rightCols(h - wl) = x.middleCols(wl, h - wl);
        else yh.rightCols(h - wl).setZero();
    }
    const cmap<T> w_head(P("lm_head.weight"), V, h);
    const T inv_width = static_cast<T>(1.0 / c.m_width);
    mat<T> logits = (yh * w_head.transpose()) * inv_width;
    T loss = 0;
    mat<T> dlogits(Tn, V);
    for (int t = 0; t < Tn; ++t) {
        const T m = logits.row(t).maxCoeff();
        const auto e = (logits.row(t).array() - m).exp().eval();
        const T z = e.sum();
        loss += std::log(z) + m - logits(t, targets[t]);
        dlogits.row(t) = (e / z).matrix();
        dlogits(t, targets[t]) -= T(1);
    }
    loss /= Tn;
    dlogits /= static_cast<T>(Tn);

    // backward
    mmap<T>(D("lm_head.weight"), V, h) += (dlogits.transpose() * yh) * inv_width;
    const mat<T> dyh = (dlogits * w_head) * inv_width;
    mat<T> dx = mat<T>::Zero(Tn, W);
    if (wl < h && c.resize == resize_method::move_up) dx.middleCols(wl, h - wl) += dyh.rightCols(h - wl);
    mat<T> dy = mat<T>::Zero(Tn, wl);
    dy.leftCols(std::min<index_t>(wl, h)) = dyh.leftCols(std::min<index_t>(wl, h));
    {
        mat<T> dxl = mat<T>::Zero(Tn, wl);
        detail::rmsnorm_backward<T>(x_last, P("transformer.ln_f.weight"), inv_f, dy, dxl, D("transformer.ln_f.weight"));
        dx.leftCols(wl) += dxl;
    }
    for (int i = s.layers() - 1; i >= 0; --i) {
        auto& L = tape[static_cast<std::size_t>(i)];
        const int w = s.width(i), d = w / H;
        const std::string pre = "transformer.h." + std::to_string(i) + ".";
        const detail::rope_table<T> rope(Tn, d, c.rope_theta);
        // MLP: x += res * act W_mlp^T
        const mat<T> dout = dx.leftCols(w) * res;
        const cmap<T> w_mlp(P(pre + "mlp_block.c_proj.weight"), w, 4 * w);
        mmap<T>(D(pre + "mlp_block.c_proj.weight"), w, 4 * w) += dout.transpose() * L.act;
        const mat<T> dact = dout * w_mlp;
        mat<T> dfused(Tn, 8 * w);
        for (int r = 0; r < Tn; ++r)
            for (int j = 0; j < 4 * w; ++j) {
                const index_t iu = c.mlp == mlp_layout::split ? j : 2 * j;
                const index_t ig = c.mlp == mlp_layout::split ? 4 * w + j : 2 * j + 1;
                const T u = L.fused(r, iu), gg = L.fused(r, ig);
                const T sig = T(1) / (T(1) + std::exp(-gg));
                dfused(r, iu) = dact(r, j) * gg * sig;
                dfused(r, ig) = dact(r, j) * u * sig * (T(1) + gg * (T(1) - sig));
            }
        const cmap<T> w_fc(P(pre + "mlp_block.c_fc.weight"), 8 * w, w);
        mmap<T>(D(pre + "mlp_block.c_fc.weight"), 8 * w, w) += dfused.transpose() * L.b;
        const mat<T> db = dfused * w_fc;
        {
            mat<T> dxm = mat<T>::Zero(Tn, w);
            detail::rmsnorm_backward<T>(L.x_mid, P(pre + "ln_2.weight"), L.inv2, db, dxm, D(pre + "ln_2.weight"));
            dx.leftCols(w) += dxm;
        }
        // attention: x += res * o W_proj^T
        const mat<T> dattn = dx.leftCols(w) * res;
        const cmap<T> w_proj(P(pre + "sequence_mixer.c_proj.weight"), w, H * d);
        mmap<T>(D(pre + "sequence_mixer.c_proj.weight"), w, H * d) += dattn.transpose() * L.o;
        const mat<T> d_o = dattn * w_proj;
        mat<T> dqkv = mat<T>::Zero(Tn, (H + 2 * Hkv) * d);
        const T scale = static_cast<T>(c.attention_scale(i));
        for (int hh = 0; hh < H; ++hh) {
            const int g = hh / G;
            const index_t qc = (g * (G + 2) + hh % G) * d, kc = (g * (G + 2) + G) * d, vc = kc + d;
            const auto& p = L.probs[static_cast<std::size_t>(hh)];
            const auto doh = d_o.middleCols(hh * d, d);
            dqkv.middleCols(vc, d) += p.transpose() * doh;
            const mat<T> dp = doh * L.qkv.middleCols(vc, d).transpose();
            mat<T> ds = (p.array() * (dp.array().colwise() - (dp.array() * p.array()).rowwise().sum())).matrix() * scale;
            dqkv.middleCols(qc, d) += ds * L.qkv.middleCols(kc, d);
            dqkv.middleCols(kc, d) += ds.transpose() * L.qkv.middleCols(qc, d);
        }
        for (int g = 0; g < Hkv; ++g)
            for (int k = 0; k <= G; ++k) rope.apply(dqkv, (g * (G + 2) + k) * d, d, T(-1));
        const cmap<T> w_attn(P(pre + "sequence_mixer.c_attn.weight"), (H + 2 * Hkv) * d, w);
        mmap<T>(D(pre + "sequence_mixer.c_attn.weight"), (H + 2 * Hkv) * d, w) += dqkv.transpose() * L.a;
        const mat<T> da = dqkv * w_attn;
        {
            mat<T> dxi = mat<T>::Zero(Tn, w);
            detail::rmsnorm_backward<T>(L.x_in, P(pre + "ln_1.weight"), L.inv1, da, dxi, D(pre + "ln_1.weight"));
            dx.leftCols(w) += dxi;
        }
        if (const int z = zeroed_from[static_cast<std::size_t>(i)]; z >= 0) dx.middleCols(z, w - z).setZero();
    }
    mmap<T> dwte(D("transformer.wte.weight"), V, h);
    for (int t = 0; t < Tn; ++t) dwte.row(tokens[t]) += dx.row(t).head(h) * static_cast<T>(c.m_emb);
    return loss;
}

}  // namespace vwt::train
