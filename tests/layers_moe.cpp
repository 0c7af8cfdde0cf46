// The MoE MLP (layers/moe.hpp) against a brute-force mixture of experts written here from
// semantics.md section 6 (per token: router logits, the top k with ties to the lower expert, a
// softmax over them, each chosen expert's SwiGLU, the weighted sum added times m_residual), on the
// reference policy in double and the CPU policy in float; its backward against central finite
// differences of sum(d_layer * layer) on the reference policy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <vwt/layers/moe.hpp>
#include <vwt/vwt.hpp>

namespace {

using vwt::index_t;

std::vector<double> normal_values(std::size_t n, std::uint32_t seed, double scale = 1.0) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, scale);
    std::vector<double> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}

struct problem {
    index_t rows = 9, w = 16, inter = 12;
    int experts = 5, k = 2;
    double residual = 0.7;
    vwt::swiglu_layout layout = vwt::swiglu_layout::split;
    std::vector<double> normed, layer, gate, c_fc, c_proj;
    explicit problem(std::uint32_t seed) {
        normed = normal_values(std::size_t(rows * w), seed);
        layer = normal_values(std::size_t(rows * w), seed + 1);
        gate = normal_values(std::size_t(experts * w), seed + 2, 0.5);
        c_fc = normal_values(std::size_t(experts * 2 * inter * w), seed + 3, 0.3);
        c_proj = normal_values(std::size_t(experts * w * inter), seed + 4, 0.3);
    }
};

// layer + residual * sum_s weight_s * expert_s(normed), token by token.
std::vector<double> brute_force_forward(const problem& p) {
    std::vector<double> y = p.layer;
    for (index_t r = 0; r < p.rows; ++r) {
        const double* x = &p.normed[std::size_t(r * p.w)];
        std::vector<double> z(std::size_t(p.experts));
        for (int e = 0; e < p.experts; ++e)
            for (index_t c = 0; c < p.w; ++c) z[std::size_t(e)] += p.gate[std::size_t(e * p.w + c)] * x[c];
        std::vector<int> idx(std::size_t(p.experts));
        for (int e = 0; e < p.experts; ++e) idx[std::size_t(e)] = e;
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return z[std::size_t(a)] > z[std::size_t(b)]; });
        double sum = 0;
        for (int s = 0; s < p.k; ++s) sum += std::exp(z[std::size_t(idx[std::size_t(s)])] - z[std::size_t(idx[0])]);
        for (int s = 0; s < p.k; ++s) {
            const int e = idx[std::size_t(s)];
            const double weight = std::exp(z[std::size_t(e)] - z[std::size_t(idx[0])]) / sum;
            std::vector<double> fused(std::size_t(2 * p.inter)), act(std::size_t(p.inter));
            for (index_t i = 0; i < 2 * p.inter; ++i)
                for (index_t c = 0; c < p.w; ++c) fused[std::size_t(i)] += p.c_fc[std::size_t((e * 2 * p.inter + i) * p.w + c)] * x[c];
            for (index_t j = 0; j < p.inter; ++j) {
                const bool split = p.layout == vwt::swiglu_layout::split;
                const double u = fused[std::size_t(split ? j : 2 * j)], g = fused[std::size_t(split ? p.inter + j : 2 * j + 1)];
                act[std::size_t(j)] = u * g / (1 + std::exp(-g));
            }
            for (index_t c = 0; c < p.w; ++c) {
                double o = 0;
                for (index_t j = 0; j < p.inter; ++j) o += p.c_proj[std::size_t((e * p.w + c) * p.inter + j)] * act[std::size_t(j)];
                y[std::size_t(r * p.w + c)] += p.residual * weight * o;
            }
        }
    }
    return y;
}

// The router's auxiliary loss over the problem's tokens (semantics.md section 6): E sum_e f_e p_e
// + 0.1 mean_tokens lse(z)^2, f the fraction of top-k assignments to e, p the mean over tokens of
// softmax(z) over all experts.
double brute_force_aux(const problem& p) {
    std::vector<double> f(std::size_t(p.experts)), prob(std::size_t(p.experts));
    double z_loss = 0;
    for (index_t r = 0; r < p.rows; ++r) {
        std::vector<double> z(std::size_t(p.experts));
        for (int e = 0; e < p.experts; ++e)
            for (index_t c = 0; c < p.w; ++c) z[std::size_t(e)] += p.gate[std::size_t(e * p.w + c)] * p.normed[std::size_t(r * p.w + c)];
        std::vector<int> idx(std::size_t(p.experts));
        for (int e = 0; e < p.experts; ++e) idx[std::size_t(e)] = e;
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return z[std::size_t(a)] > z[std::size_t(b)]; });
        for (int s = 0; s < p.k; ++s) f[std::size_t(idx[std::size_t(s)])] += 1.0 / double(p.rows * p.k);
        double sum = 0;
        for (double v : z) sum += std::exp(v);
        for (int e = 0; e < p.experts; ++e) prob[std::size_t(e)] += std::exp(z[std::size_t(e)]) / sum / double(p.rows);
        z_loss += std::log(sum) * std::log(sum) / double(p.rows);
    }
    double balance = 0;
    for (int e = 0; e < p.experts; ++e) balance += f[std::size_t(e)] * prob[std::size_t(e)];
    return p.experts * balance + 0.1 * z_loss;
}

template <class B, class U = typename B::compute_type>
typename B::template buffer<U> upload(const typename B::context& ctx, const std::vector<double>& host) {
    typename B::template buffer<U> b(static_cast<index_t>(host.size()));
    std::vector<U> cast(host.begin(), host.end());
    B::upload(ctx, std::span<const U>(cast), b.view());
    return b;
}
template <class B, class U>
std::vector<double> download(const typename B::context& ctx, const typename B::template buffer<U>& b) {
    std::vector<U> host(static_cast<std::size_t>(b.size()));
    B::download(ctx, vwt::vector_view<const U, typename B::memory>(b.view()), std::span<U>(host));
    return {host.begin(), host.end()};
}

// The layer on policy B: the layer after forward, and (backward) the gradients of
// sum(d_layer * layer_after) for normed, gate, c_fc, c_proj.
template <class B>
struct run {
    using T = typename B::compute_type;
    using layer_type = vwt::moe_mlp<B, vwt::dynamic_width>;
    typename B::context ctx{};
    const problem& p;
    vwt::dynamic_width width;
    vwt::moe_shape shape;
    typename B::template buffer<T> normed, layer, gate, c_fc, c_proj, memory;
    typename B::template buffer<int> pairs, offsets;
    typename B::template buffer<double> aux{1};
    double aux_coef = 0;
    explicit run(const problem& pr, bool backward)
        : p(pr),
          width(int(pr.w), 2),
          shape{pr.experts, pr.k, pr.inter},
          normed(upload<B>(ctx, pr.normed)),
          layer(upload<B>(ctx, pr.layer)),
          gate(upload<B>(ctx, pr.gate)),
          c_fc(upload<B>(ctx, pr.c_fc)),
          c_proj(upload<B>(ctx, pr.c_proj)),
          memory(shape.scratch_elements(pr.rows, pr.w, backward)),
          pairs(shape.scratch_ints(pr.rows)),
          offsets(pr.experts + 1) {}
    // The layers' scratch as a workspace carves it, holding only the MoE views.
    vwt::layer_scratch<B> scratch() {
        vwt::layer_scratch<B> s;
        s.moe = memory.view(), s.moe_pairs = pairs.view(), s.expert_offsets = offsets.view(), s.moe_aux = aux.view();
        return s;
    }
    layer_type mlp() const {
        return {{gate.view().as_matrix(p.experts, p.w), c_fc.view().as_matrix(p.experts * 2 * p.inter, p.w),
                 c_proj.view().as_matrix(p.experts * p.w, p.inter)},
                width, shape, p.layout, T(p.residual), 0, T(aux_coef)};
    }
    std::vector<double> forward() {
        mlp().forward(ctx, normed.view().as_matrix(p.rows, p.w).as_const(), layer.view().as_matrix(p.rows, p.w), scratch());
        return download<B, T>(ctx, layer);
    }
};

}  // namespace

TEMPLATE_TEST_CASE("moe mlp: forward equals a brute-force mixture of experts", "[moe]", vwt::reference::backend<double>,
                   vwt::cpu::backend<float>) {
    for (const auto layout : {vwt::swiglu_layout::split, vwt::swiglu_layout::interleaved})
        for (const int k : {1, 2, 5}) {
            problem p(100 + std::uint32_t(k));
            p.k = k;
            p.layout = layout;
            INFO("k " << k << (layout == vwt::swiglu_layout::split ? " split" : " interleaved"));
            const auto got = run<TestType>(p, false).forward(), want = brute_force_forward(p);
            const double tol = std::is_same_v<typename TestType::compute_type, float> ? 2e-5 : 1e-12;
            for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
        }
}

TEST_CASE("moe mlp: backward equals central finite differences of the forward and the auxiliary loss (router included)") {
    using B = vwt::reference::backend<double>;
    problem p(7);
    p.k = 2;
    const double aux_coef = 0.4;
    const auto d_layer = normal_values(std::size_t(p.rows * p.w), 99);
    const auto objective = [&](const problem& q) {
        const auto y = brute_force_forward(q);
        double sum = 0;
        for (std::size_t i = 0; i < y.size(); ++i) sum += d_layer[i] * y[i];
        return sum + aux_coef * brute_force_aux(q);
    };
    run<B> r(p, true);
    r.aux_coef = aux_coef;
    auto d_normed = upload<B>(r.ctx, std::vector<double>(p.normed.size(), 5.0));  // backward overwrites it
    auto g_gate = upload<B>(r.ctx, std::vector<double>(p.gate.size(), 0.0)), g_fc = upload<B>(r.ctx, std::vector<double>(p.c_fc.size(), 0.0));
    auto g_proj = upload<B>(r.ctx, std::vector<double>(p.c_proj.size(), 0.0));
    auto dl = upload<B>(r.ctx, d_layer);
    r.mlp().backward(r.ctx, r.normed.view().as_matrix(p.rows, p.w).as_const(), dl.view().as_matrix(p.rows, p.w).as_const(), {},
                     r.scratch(), d_normed.view().as_matrix(p.rows, p.w),
                     {g_gate.view().as_matrix(p.experts, p.w), g_fc.view().as_matrix(p.experts * 2 * p.inter, p.w),
                      g_proj.view().as_matrix(p.experts * p.w, p.inter)});
    CHECK(download<B, double>(r.ctx, r.aux)[0] == Approx(brute_force_aux(p)).epsilon(1e-12));
    const auto check = [&](std::vector<double> problem::*field, const std::vector<double>& grad, const char* name) {
        INFO(name);
        REQUIRE(grad.size() == (p.*field).size());
        for (std::size_t i = 0; i < grad.size(); ++i) {
            problem up = p, down = p;
            (up.*field)[i] += 1e-6;
            (down.*field)[i] -= 1e-6;
            CHECK(grad[i] == Approx((objective(up) - objective(down)) / 2e-6).margin(1e-6));
        }
    };
    check(&problem::normed, download<B, double>(r.ctx, d_normed), "d_normed");
    check(&problem::gate, download<B, double>(r.ctx, g_gate), "gate");
    check(&problem::c_fc, download<B, double>(r.ctx, g_fc), "c_fc");
    check(&problem::c_proj, download<B, double>(r.ctx, g_proj), "c_proj");
}
