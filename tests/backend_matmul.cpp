// The CPU backend's three matrix products against a brute-force double-precision sum: shapes on
// both sides of the k-panel split of matmul_nt (k <= 768 is one Eigen product, longer k a sum of
// panels), row-strided views, alpha and beta (beta 0 must not read the output), 1 and 2 threads.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <vwt/vwt.hpp>

#include "support.hpp"

namespace {

using B = vwt::cpu::backend<float>;

// A [rows x cols] block inside a wider buffer (stride cols + pad, 5 unless told), filled with N(0, 1).
struct strided {
    vwt::index_t rows, cols, stride;
    std::vector<float> data;
    strided(vwt::index_t r, vwt::index_t c, std::mt19937& rng, vwt::index_t pad = 5)
        : rows(r), cols(c), stride(c + pad), data(static_cast<std::size_t>(r * (c + pad))) {
        std::normal_distribution<float> normal;
        for (auto& v : data) v = normal(rng);
    }
    vwt::host_matrix<float> view() { return {data.data(), rows, cols, stride}; }
    double at(vwt::index_t r, vwt::index_t c) const { return data[static_cast<std::size_t>(r * stride + c)]; }
};

// The brute-force product: value = alpha * sum_j lhs(r, j) rhs(j, c) + beta * prior(r, c), in
// double, with the sum of |terms| beside it to scale the tolerance. beta 0 never reads prior.
struct expected {
    std::vector<double> value, magnitude;
};

template <class Lhs, class Rhs>
expected brute_force(vwt::index_t rows, vwt::index_t cols, vwt::index_t depth, Lhs lhs, Rhs rhs, double alpha,
                     double beta, const strided& prior) {
    expected e{std::vector<double>(static_cast<std::size_t>(rows * cols)), std::vector<double>(static_cast<std::size_t>(rows * cols))};
    for (vwt::index_t r = 0; r < rows; ++r)
        for (vwt::index_t c = 0; c < cols; ++c) {
            double sum = 0, size = 0;
            for (vwt::index_t j = 0; j < depth; ++j) sum += lhs(r, j) * rhs(j, c), size += std::abs(lhs(r, j) * rhs(j, c));
            const auto i = static_cast<std::size_t>(r * cols + c);
            e.value[i] = alpha * sum + (beta == 0 ? 0.0 : beta * prior.at(r, c));
            e.magnitude[i] = std::abs(alpha) * size + (beta == 0 ? 0.0 : std::abs(beta * prior.at(r, c)));
        }
    return e;
}

// |got - want| within a relative tolerance scaled by the sum of |terms| (fp32 accumulation).
void check(const strided& got, const expected& want) {
    for (vwt::index_t r = 0; r < got.rows; ++r)
        for (vwt::index_t c = 0; c < got.cols; ++c) {
            const auto i = static_cast<std::size_t>(r * got.cols + c);
            INFO("row " << r << " col " << c);
            REQUIRE(std::abs(got.at(r, c) - want.value[i]) <= 1e-5 * want.magnitude[i] + 1e-6);
        }
}

}  // namespace

TEST_CASE("matmul_nt equals a brute-force sum, across the k-panel split") {
    std::mt19937 rng(7);
    const float alpha = 0.75f;
    for (const vwt::index_t k : {0, 1, 17, 768, 769, 1152, 2000})
        for (const vwt::index_t m : {1, 3, 64})
            for (const vwt::index_t n : {1, 33, 200})
                for (const float beta : {0.0f, 0.5f})
                    for (const int threads : {1, 2}) {
                        INFO("k " << k << " m " << m << " n " << n << " beta " << beta << " threads " << threads);
                        strided x(m, k, rng), w(n, k, rng), y(m, n, rng);
                        if (beta == 0.0f)  // beta 0 clears: NaN already there must not leak through
                            for (auto& v : y.data) v = std::numeric_limits<float>::quiet_NaN();
                        const auto want = brute_force(
                            m, n, k, [&](auto r, auto j) { return x.at(r, j); }, [&](auto j, auto c) { return w.at(c, j); },
                            alpha, beta, y);
                        B::matmul_nt({threads}, x.view(), w.view(), y.view(), alpha, beta);
                        check(y, want);
                    }
}

TEST_CASE("matmul_nn and matmul_tn equal a brute-force sum") {
    std::mt19937 rng(11);
    for (const vwt::index_t k : {5, 900})
        for (const vwt::index_t m : {1, 40})
            for (const int threads : {1, 2}) {
                const vwt::index_t n = 24;
                INFO("k " << k << " m " << m << " threads " << threads);
                // nn: y [m x n] = x [m x k] . w [k x n], accumulated onto y (beta 1)
                strided x(m, k, rng), w(k, n, rng), y(m, n, rng);
                const auto want = brute_force(
                    m, n, k, [&](auto r, auto j) { return x.at(r, j); }, [&](auto j, auto c) { return w.at(j, c); }, 1, 1, y);
                B::matmul_nn({threads}, x.view(), w.view(), y.view(), 1.0f, 1.0f);
                check(y, want);

                // tn: g [n x k] = a^T . b with a [m x n], b [m x k], beta 0 (the weight gradient)
                strided a(m, n, rng), b(m, k, rng), g(n, k, rng);
                const auto want_g = brute_force(
                    n, k, m, [&](auto r, auto j) { return a.at(j, r); }, [&](auto j, auto c) { return b.at(j, c); }, 1, 0, g);
                B::matmul_tn({threads}, a.view(), b.view(), g.view());
                check(g, want_g);
            }
}

using vwt_test::nearest_bf16;

TEST_CASE("bf16 rounds to the nearest bfloat16, ties to even, and keeps NaN and infinities") {
    std::mt19937 rng(3);
    std::uniform_int_distribution<std::uint32_t> bits;
    int checked = 0;
    while (checked < 200000) {
        const float f = std::bit_cast<float>(bits(rng));
        if (!std::isfinite(f)) continue;
        INFO("float " << f);
        REQUIRE(static_cast<double>(static_cast<float>(vwt::bf16(f))) == nearest_bf16(f));
        ++checked;
    }
    // exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (rounds to even 1); 1 + 3 * 2^-8
    // halfway between 1 + 2^-7 and 1 + 2^-6 (rounds to even 1 + 2^-6)
    CHECK(static_cast<float>(vwt::bf16(1.0f + 0x1p-8f)) == 1.0f);
    CHECK(static_cast<float>(vwt::bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    CHECK(std::isnan(static_cast<float>(vwt::bf16(std::numeric_limits<float>::quiet_NaN()))));
    CHECK(std::isnan(static_cast<float>(vwt::bf16(std::bit_cast<float>(0x7f800001u)))));  // a NaN whose payload is in the low bits
    CHECK(static_cast<float>(vwt::bf16(-std::numeric_limits<float>::infinity())) == -std::numeric_limits<float>::infinity());
    CHECK(static_cast<float>(vwt::bf16(std::numeric_limits<float>::max())) == std::numeric_limits<float>::infinity());
}

TEST_CASE("the bf16 products' operand kernels round floats and dequantized q8 weights to the nearest bfloat16") {
    std::mt19937 rng(5);
    std::uniform_int_distribution<std::uint32_t> bits;
    for (const vwt::index_t n : {1, 15, 16, 17, 100, 1024}) {  // whole vectors and tails
        INFO("n " << n);
        std::vector<float> x(static_cast<std::size_t>(n));
        for (auto& v : x) v = std::bit_cast<float>(bits(rng));  // NaNs, infinities and denormals among them
        x[0] = 1.0f + 0x1p-8f;                                   // ties, to even: down here,
        x.back() = 1.0f + 3 * 0x1p-8f;                           // up here (in the scalar tail where n % 16 != 0)
        std::vector<vwt::bf16> got(x.size());
        vwt::cpu::kernels::round_to_bf16(x.data(), n, got.data());
        for (std::size_t i = 0; i < x.size(); ++i) {
            INFO("float bits " << std::bit_cast<std::uint32_t>(x[i]));
            if (std::isnan(x[i])) REQUIRE(std::isnan(static_cast<float>(got[i])));
            else REQUIRE(static_cast<double>(static_cast<float>(got[i])) == nearest_bf16(x[i]));
        }
    }
    std::normal_distribution<float> normal;
    for (const vwt::index_t blocks : {1, 3, 40}) {
        std::vector<vwt::q8_block> w(static_cast<std::size_t>(blocks));
        for (auto& b : w) {
            float part[32];
            for (auto& v : part) v = normal(rng) * 0.01f;
            b = vwt::q8_block::quantize(part);
        }
        std::vector<vwt::bf16> got(static_cast<std::size_t>(blocks * 32));
        vwt::cpu::kernels::round_to_bf16(w.data(), blocks * 32, got.data());
        for (vwt::index_t i = 0; i < blocks * 32; ++i) {
            const auto& b = w[static_cast<std::size_t>(i / 32)];
            REQUIRE(static_cast<double>(static_cast<float>(got[static_cast<std::size_t>(i)])) ==
                    nearest_bf16(b.scale * static_cast<float>(b.q[i % 32])));
        }
    }
}

TEST_CASE("matmul_nt with bf16 weights equals a brute-force sum over the rounded weights") {
    using H = vwt::cpu::backend<float, vwt::bf16>;
    std::mt19937 rng(11);
    const float alpha = 1.25f;
    // m 1..5 cover the streaming kernel (<= 4 rows) and the first Eigen shape; k 769 and 2000 the panel split
    for (const vwt::index_t k : {0, 1, 17, 64, 769, 2000})
        for (const vwt::index_t m : {1, 2, 4, 5, 64})
            for (const vwt::index_t n : {1, 33, 300})
                for (const float beta : {0.0f, 0.5f})
                    for (const int threads : {1, 2}) {
                        INFO("k " << k << " m " << m << " n " << n << " beta " << beta << " threads " << threads);
                        strided x(m, k, rng), wf(n, k, rng), y(m, n, rng);
                        std::vector<vwt::bf16> w(wf.data.size());
                        for (std::size_t i = 0; i < w.size(); ++i) w[i] = vwt::bf16(wf.data[i]);
                        if (beta == 0.0f)
                            for (auto& v : y.data) v = std::numeric_limits<float>::quiet_NaN();
                        const auto want = brute_force(
                            m, n, k, [&](auto r, auto j) { return x.at(r, j); },
                            [&](auto j, auto c) { return nearest_bf16(wf.data[static_cast<std::size_t>(c * wf.stride + j)]); }, alpha,
                            beta, y);
                        // f32 products: the weights widened exactly, x as it is (the default, automatic,
                        // rounds x to bf16 above 4 rows: the next test)
                        H::matmul_nt({threads, vwt::cpu::product_precision::f32}, x.view(),
                                     vwt::host_matrix<const vwt::bf16>{w.data(), n, k, wf.stride}, y.view(), alpha, beta);
                        check(y, want);
                    }
}

TEST_CASE("bf16 products equal a brute-force sum over operands rounded to bf16") {
    using H = vwt::cpu::backend<float, vwt::bf16>;
    using vwt::cpu::product_precision;
    std::mt19937 rng(5);
    const float alpha = 0.75f;
    const auto rounded = [](const strided& s) { return [&s](vwt::index_t r, vwt::index_t c) { return nearest_bf16(static_cast<float>(s.at(r, c))); }; };
    for (const vwt::index_t k : {0, 1, 17, 769})
        for (const vwt::index_t m : {1, 5, 64})
            for (const vwt::index_t n : {1, 33, 300})
                for (const float beta : {0.0f, 0.5f})
                    for (const int threads : {1, 2})
                        for (const auto shapes : {vwt::cpu::product_shapes::fixed, vwt::cpu::product_shapes::varying_rows})
                        for (const vwt::index_t pad : {0, 5}) {  // dense outputs, and rows inside wider ones (oneDNN's other path)
                            INFO("k " << k << " m " << m << " n " << n << " beta " << beta << " threads " << threads << " varying rows "
                                      << (shapes == vwt::cpu::product_shapes::varying_rows) << " output padding " << pad);
                            const vwt::cpu::context bf16_products{threads, product_precision::bf16, shapes};
                            {  // nt, float weights (mixed-precision training's forward)
                                strided x(m, k, rng), w(n, k, rng), y(m, n, rng, pad);
                                const auto rx = rounded(x), rw = rounded(w);
                                const auto want = brute_force(
                                    m, n, k, rx, [&](auto j, auto c) { return rw(c, j); }, alpha, beta, y);
                                B::matmul_nt(bf16_products, x.view(), w.view(), y.view(), alpha, beta);
                                check(y, want);
                            }
                            {  // nt, bf16 weights, automatic: x rounded to bf16 at every row count (the
                               // decode kernel's vdpbf16ps up to 4 rows, bf16 products above)
                                strided x(m, k, rng), wf(n, k, rng), y(m, n, rng, pad);
                                std::vector<vwt::bf16> w(wf.data.size());
                                for (std::size_t i = 0; i < w.size(); ++i) w[i] = vwt::bf16(wf.data[i]);
                                const auto want = brute_force(m, n, k, rounded(x), [&, rw = rounded(wf)](auto j, auto c) { return rw(c, j); },
                                                              alpha, beta, y);
                                H::matmul_nt({threads, product_precision::automatic, shapes}, x.view(),
                                             vwt::host_matrix<const vwt::bf16>{w.data(), n, k, wf.stride}, y.view(), alpha, beta);
                                check(y, want);
                            }
                            {  // nn: y = x . w, w [k x n] (the input gradient)
                                strided x(m, k, rng), w(k, n, rng), y(m, n, rng, pad);
                                const auto want = brute_force(m, n, k, rounded(x), rounded(w), alpha, beta, y);
                                B::matmul_nn(bf16_products, x.view(), w.view(), y.view(), alpha, beta);
                                check(y, want);
                            }
                            {  // tn: g [n x k] = a^T . b, a [m x n], b [m x k] (the weight gradient)
                                strided a(m, n, rng), b(m, k, rng), g(n, k, rng, pad);
                                const auto ra = rounded(a);
                                const auto want = brute_force(
                                    n, k, m, [&](auto r, auto j) { return ra(j, r); }, rounded(b), alpha, beta, g);
                                B::matmul_tn(bf16_products, a.view(), b.view(), g.view(), alpha, beta);
                                check(g, want);
                            }
                        }
}

TEST_CASE("bf16 products keep one oneDNN primitive per shape in the context's cache") {
    std::mt19937 rng(9);
    const vwt::cpu::context ctx{2, vwt::cpu::product_precision::bf16};
    const vwt::cpu::context copy = ctx;  // copies share the cache
    strided x(48, 40, rng), w(24, 40, rng), y(48, 24, rng, 0), wide(24, 40, rng);
    B::matmul_nt(ctx, x.view(), w.view(), y.view());
    const auto after_one = ctx.cache->size();
    B::matmul_nt(copy, x.view(), wide.view(), y.view());  // same shape and strides, other data
    B::matmul_nt(ctx, x.view(), w.view(), y.view());
    CHECK(ctx.cache->size() == after_one);
#if defined(VWT_WITH_ONEDNN)
    if (!vwt::cpu::kernels::bf16_products_pay()) {  // float products outrun bf16 ones here: emulated in float
        WARN("float products outrun bf16 ones on this CPU (Intel without AMX): no oneDNN bf16 primitives to check");
        CHECK(after_one == 0);
        return;
    }
    CHECK(after_one == 1);  // an entry even where the CPU has no bf16 matmul (it records that)
    B::matmul_nt(ctx, x.view(), w.view(), y.view(), 0.5f);  // alpha is part of the primitive
    CHECK(ctx.cache->size() == 2);
    // An output inside wider rows is multiplied densely (alpha 1, beta 0), then added in.
    strided inside(48, 24, rng);
    B::matmul_nt(ctx, x.view(), w.view(), inside.view(), 0.5f, 1.0f);
    CHECK(ctx.cache->size() == 2);
    // With varying rows, one primitive serves every token count (an MoE layer's expert groups).
    const vwt::cpu::context groups{2, vwt::cpu::product_precision::bf16, vwt::cpu::product_shapes::varying_rows, ctx.cache};
    strided g(48, 24, rng), b(48, 40, rng), t(24, 40, rng);
    for (const vwt::index_t rows : {48, 30, 7, 48}) {
        B::matmul_nt(groups, x.view().rows_range(0, rows).as_const(), w.view(), y.view().rows_range(0, rows));
        B::matmul_tn(groups, g.view().rows_range(0, rows).as_const(), b.view().rows_range(0, rows).as_const(), t.view());
    }
    CHECK(ctx.cache->size() == 4);
#else
    CHECK(after_one == 0);  // without oneDNN the products are emulated in float: nothing to keep
#endif
}

#if defined(VWT_WITH_ONEDNN)
// oneDNN's bf16 matmul and the SwiGLU products, called directly: the CPU policy runs them only where
// bf16 products outrun float ones (kernels::bf16_products_pay), so on other CPUs only this test does.
TEST_CASE("oneDNN's bf16 products, called directly, equal brute-force sums over operands rounded to bf16") {
    std::mt19937 rng(13);
    vwt::cpu::product_cache cache;
    const auto rounded = [](const strided& s) { return [&s](vwt::index_t r, vwt::index_t c) { return nearest_bf16(static_cast<float>(s.at(r, c))); }; };
    const auto as_bf16 = [](const strided& s) {
        std::vector<vwt::bf16> b;
        for (const float v : s.data) b.push_back(vwt::bf16(v));
        return b;
    };
    for (const vwt::index_t k : {17, 300})
        for (const vwt::index_t m : {5, 64})
            for (const vwt::index_t n : {33, 130})
                for (const int threads : {1, 2}) {
                    INFO("k " << k << " m " << m << " n " << n << " threads " << threads);
                    // y = 0.75 x . w^T + 0.5 y: float x rounded by the call, bf16 w, y inside wider rows
                    strided x(m, k, rng), w(n, k, rng), y(m, n, rng);
                    const auto w16 = as_bf16(w);
                    const auto want = brute_force(m, n, k, rounded(x), [&, rw = rounded(w)](auto j, auto c) { return rw(c, j); }, 0.75, 0.5, y);
                    if (!vwt::cpu::onednn::gemm_bf16(cache, threads, 'N', 'T', m, n, k, 0.75f, x.data.data(), x.stride, w16.data(), w.stride, 0.5f,
                                                     y.data.data(), y.stride)) {
                        WARN("oneDNN has no bf16 matmul on this CPU: nothing to check");
                        return;
                    }
                    check(y, want);
                    // act = bf16((x . u^T) * silu(x . g^T)), silu_g = silu(x . g^T)
                    strided u(n, k, rng), g(n, k, rng);
                    const auto u16 = as_bf16(u), g16 = as_bf16(g);
                    std::vector<float> silu_g(static_cast<std::size_t>(m * n));
                    std::vector<vwt::bf16> act(silu_g.size());
                    REQUIRE(vwt::cpu::onednn::swiglu_products_bf16(cache, threads, m, n, k, x.data.data(), x.stride, u16.data(), g16.data(),
                                                                   u.stride, silu_g.data(), act.data()));
                    const auto rx = rounded(x), ru = rounded(u), rg = rounded(g);
                    for (vwt::index_t r = 0; r < m; ++r)
                        for (vwt::index_t j = 0; j < n; ++j) {
                            double up = 0, gate = 0, up_size = 0, gate_size = 0;
                            for (vwt::index_t c = 0; c < k; ++c) {
                                up += rx(r, c) * ru(j, c), gate += rx(r, c) * rg(j, c);
                                up_size += std::abs(rx(r, c) * ru(j, c)), gate_size += std::abs(rx(r, c) * rg(j, c));
                            }
                            const double silu = gate / (1 + std::exp(-gate)), a = up * silu;
                            const auto i = static_cast<std::size_t>(r * n + j);
                            INFO("row " << r << " col " << j);
                            REQUIRE(std::abs(silu_g[i] - silu) <= 1e-5 * gate_size + 1e-6);
                            // the float sums' error, then one rounding to bf16 (half a step: 2^-8 relative)
                            REQUIRE(std::abs(static_cast<double>(static_cast<float>(act[i])) - a) <=
                                    std::ldexp(std::abs(a), -8) + 1e-5 * (up_size * std::abs(silu) + gate_size * std::abs(up)) + 1e-6);
                        }
                }
}
#endif

TEST_CASE("SwiGLU into bf16 rounds the float SwiGLU to the nearest bf16, ties to even, NaN kept (denormals flushed with AVX512_BF16)") {
    // u chosen so that u * silu(g) lands on bf16 ties and beside them; 37 columns: the 16-column
    // kernel twice and a scalar tail, in both layouts
    std::vector<float> u, g;
    for (int i = 0; i < 37; ++i) {
        g.push_back(i % 5 == 0 ? 1024.0f : i % 7 == 0 ? -1024.0f : 0.37f * static_cast<float>(i) - 6);  // silu(1024) = 1024: exact ties
        u.push_back(std::bit_cast<float>(0x3f808000u + static_cast<std::uint32_t>(i % 3) * 0x10000u + static_cast<std::uint32_t>(i % 2)));
    }
    u[3] = std::numeric_limits<float>::quiet_NaN(), g[20] = std::numeric_limits<float>::quiet_NaN(), g[21] = std::numeric_limits<float>::infinity();
    u[8] = 1e-30f, g[8] = 1e-10f, u[9] = -1e-30f, g[9] = 1e-10f;  // u * silu(g) = +-5e-41, denormal floats
    u[34] = 1e-30f, g[34] = 1e-10f;                                 // ... in the scalar tail
    std::vector<float> pairs;
    for (std::size_t i = 0; i < u.size(); ++i) pairs.push_back(u[i]), pairs.push_back(g[i]);
    for (const bool split : {true, false}) {
        INFO((split ? "split" : "interleaved"));
        const float* pu = split ? u.data() : pairs.data();
        const float* pg = split ? g.data() : pairs.data() + 1;
        std::vector<float> wide(u.size());
        std::vector<vwt::bf16> narrow(u.size());
        vwt::cpu::kernels::swiglu(pu, pg, split ? 1 : 2, 37, wide.data());
        vwt::cpu::kernels::swiglu(pu, pg, split ? 1 : 2, 37, narrow.data());
        for (std::size_t i = 0; i < u.size(); ++i) {
            INFO("column " << i << " float " << wide[i]);
            const double exact = static_cast<double>(u[i]) * g[i] / (1 + std::exp(-static_cast<double>(g[i])));
            if (std::isnan(exact))
                CHECK(std::isnan(wide[i]));
            else if (std::isinf(exact))
                CHECK(wide[i] == exact);
            else
                CHECK(std::abs(wide[i] - exact) <= 3e-7 * std::abs(exact) + 1e-30);
#if defined(__AVX512F__)
            const bool vector_column = i < 32;  // the 16-column kernel's (the last 5 run the scalar tail)
#else
            const bool vector_column = false;
#endif
            if (std::fpclassify(wide[i]) == FP_SUBNORMAL && vector_column && vwt::cpu::kernels::has_avx512_bf16())  // vcvtneps2bf16 flushes it
                CHECK(narrow[i].bits == (std::signbit(wide[i]) ? 0x8000 : 0));
            else
                CHECK(narrow[i].bits == vwt::bf16(wide[i]).bits);
        }
    }
}

TEST_CASE("sum_squares equals a compensated sum in long double, the same for 1 and 2 threads; scale multiplies every item") {
    // 3 whole blocks of the optimizer's vector ops and a tail of 77 (not a multiple of 8), items
    // from 1e-4 to 1e3 in magnitude, and a short vector inside one block
    for (const vwt::index_t n : {vwt::index_t{13}, 3 * B::vector_block + 77}) {
        INFO("n " << n);
        std::mt19937 rng(9);
        std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
        std::uniform_int_distribution<int> exponent(-4, 3);
        std::vector<float> x(static_cast<std::size_t>(n));
        for (auto& v : x) v = mantissa(rng) * std::pow(10.0f, static_cast<float>(exponent(rng)));
        long double want = 0, carry = 0;  // Kahan
        for (const float v : x) {
            const long double term = static_cast<long double>(v) * v - carry, sum = want + term;
            carry = (sum - want) - term;
            want = sum;
        }
        double got[2] = {};
        for (const int threads : {1, 2})
            B::sum_squares({threads}, vwt::host_vector<const float>(x.data(), n), vwt::host_vector<double>(&got[threads - 1], 1));
        CHECK(got[0] == got[1]);
        CHECK(std::abs(got[0] - static_cast<double>(want)) <= 1e-14 * static_cast<double>(want));
        auto y = x;
        B::scale({2}, vwt::host_vector<float>(y.data(), n), 0.375f);
        for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == x[i] * 0.375f);
    }
}

TEST_CASE("SwiGLU's backward kernel equals its derivatives in double, for gates from -120 to 120, in both layouts") {
    // du = d g s, dg = d u s (1 + g (1 - s)), s = 1 / (1 + e^-g): d/du and d/dg of u g s (semantics
    // section 2's SwiGLU). 37 columns: the 16-column kernel twice and a scalar tail of 5.
    const int n = 37;
    std::vector<float> u, g, d;
    for (int i = 0; i < n; ++i) {
        g.push_back(-120.0f + 6.6f * static_cast<float>(i));
        u.push_back(0.3f + 0.05f * static_cast<float>(i % 11) - (i % 2 ? 0.9f : 0.0f));
        d.push_back(0.7f - 0.11f * static_cast<float>(i % 9));
    }
    g[17] = 0.0f, g[18] = -1.2785f, g[19] = 1e-3f, g[20] = -3.5f, g[34] = -1.2785f, g[35] = 2.0f;  // 18, 34: 1 + g (1 - s) near 0
    d[21] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> pairs;
    for (int i = 0; i < n; ++i) pairs.push_back(u[i]), pairs.push_back(g[i]);
    for (const bool split : {true, false}) {
        INFO((split ? "split" : "interleaved"));
        std::vector<float> grads(2 * n, -7.0f);
        const float* pu = split ? u.data() : pairs.data();
        const float* pg = split ? g.data() : pairs.data() + 1;
        float* du = grads.data();
        float* dg = split ? grads.data() + n : grads.data() + 1;
        vwt::cpu::kernels::swiglu_backward(pu, pg, split ? 1 : 2, d.data(), n, du, dg);
        const int step = split ? 1 : 2;
        for (int i = 0; i < n; ++i) {
            INFO("column " << i << ": u " << u[i] << ", g " << g[i] << ", d " << d[i]);
            const double U = u[i], G = g[i], D = d[i], S = 1 / (1 + std::exp(-G));
            const double want_du = D * G * S, want_dg = D * U * S * (1 + G * (1 - S));
            if (std::isnan(D)) {
                CHECK(std::isnan(du[i * step]));
                CHECK(std::isnan(dg[i * step]));
                continue;
            }
            CHECK(std::abs(du[i * step] - want_du) <= 1e-6 * std::abs(want_du) + 1e-30);
            // 1 + g (1 - s) cancels near g = -1.28: its error is relative to 1 + |g|
            CHECK(std::abs(dg[i * step] - want_dg) <= 1e-6 * std::abs(D * U * S) * (1 + std::abs(G)) + 1e-30);
        }
    }
}

TEST_CASE("swiglu_matmul_nt equals SwiGLU in double, then a brute-force product (operands rounded to bf16 where its products are)") {
    using H = vwt::cpu::backend<float, vwt::bf16>;
    using vwt::cpu::product_precision;
    std::mt19937 rng(21);
    const float alpha = 0.75f, beta = 1.0f;
    for (const auto layout : {vwt::swiglu_layout::split, vwt::swiglu_layout::interleaved})
        for (const vwt::index_t inter : {13, 70})
            for (const vwt::index_t m : {3, 5, 40})
                for (const auto precision : {product_precision::automatic, product_precision::f32})
                    for (const int threads : {1, 2}) {
                        const bool split = layout == vwt::swiglu_layout::split;
                        INFO("inter " << inter << " m " << m << (split ? " split" : " interleaved") << " f32 products "
                                      << (precision == product_precision::f32) << " threads " << threads);
                        strided fused(m, 2 * inter, rng, 0), wf(33, inter, rng), y(m, 33, rng, 7);
                        for (vwt::index_t r = 0; r < m; ++r)  // gates from -100 to 100: e^-g from underflow to overflow
                            for (vwt::index_t j = 0; j < inter; ++j) {
                                float& g = fused.data[static_cast<std::size_t>(r * fused.stride + (split ? inter + j : 2 * j + 1))];
                                g = (r + j) % 9 == 0 ? (j % 2 ? 100.0f : -100.0f) * static_cast<float>(r + 1) / static_cast<float>(m) : 6 * g;
                            }
                        std::vector<vwt::bf16> w(wf.data.size());
                        for (std::size_t i = 0; i < w.size(); ++i) w[i] = vwt::bf16(wf.data[i]);
                        const bool rounded = precision == product_precision::automatic;  // (bf16 weights: every row count)
                        const auto act = [&](vwt::index_t r, vwt::index_t j) {
                            const double u = fused.at(r, split ? j : 2 * j), g = fused.at(r, split ? inter + j : 2 * j + 1);
                            const double a = u * g / (1 + std::exp(-g));
                            return rounded ? nearest_bf16(static_cast<float>(a)) : a;
                        };
                        const auto weight = [&](vwt::index_t j, vwt::index_t c) { return nearest_bf16(wf.data[static_cast<std::size_t>(c * wf.stride + j)]); };
                        const auto want = brute_force(m, 33, inter, act, weight, alpha, beta, y);
                        std::vector<float> scratch(static_cast<std::size_t>(m * inter));
                        H::swiglu_matmul_nt({threads, precision}, fused.view().as_const(), vwt::host_matrix<float>{scratch.data(), m, inter, inter},
                                            inter, layout, vwt::host_matrix<const vwt::bf16>{w.data(), 33, inter, wf.stride}, y.view(), alpha, beta);
                        // float SwiGLU is within an ulp or two of the double one; rounded to bf16, an
                        // activation next to a rounding boundary may land one bf16 step away
                        for (vwt::index_t r = 0; r < m; ++r)
                            for (vwt::index_t c = 0; c < 33; ++c) {
                                double largest = 0;
                                for (vwt::index_t j = 0; j < inter; ++j) largest = std::max(largest, std::abs(act(r, j) * weight(j, c)));
                                const auto i = static_cast<std::size_t>(r * 33 + c);
                                INFO("row " << r << " col " << c);
                                REQUIRE(std::abs(y.at(r, c) - want.value[i]) <= 1e-5 * want.magnitude[i] + (rounded ? 0.008 * alpha * largest : 0) + 1e-6);
                            }
                    }
}

// A float matrix stored as W (bf16, or q8 blocks of its rows: cols a multiple of 32), and the value
// a product multiplies by: the stored weight (a q8 weight dequantized in float, scale * q), rounded
// to bf16 where the product's operands are.
template <class W>
struct stored_weights {
    vwt::index_t rows, cols, stride;  // stride in stored items
    std::vector<W> items;
    explicit stored_weights(const strided& f) : rows(f.rows), cols(f.cols) {
        if constexpr (std::is_same_v<W, vwt::bf16>) {
            stride = f.stride;
            for (const float v : f.data) items.push_back(vwt::bf16(v));
        } else {
            stride = f.cols / 32 + 1;  // one spare block per row
            items.resize(static_cast<std::size_t>(rows * stride));
            for (vwt::index_t r = 0; r < rows; ++r)
                for (vwt::index_t b = 0; b < cols / 32; ++b)
                    items[static_cast<std::size_t>(r * stride + b)] = W::quantize(&f.data[static_cast<std::size_t>(r * f.stride + 32 * b)]);
        }
    }
    double at(vwt::index_t r, vwt::index_t c, bool rounded) const {
        if constexpr (std::is_same_v<W, vwt::bf16>) {
            return static_cast<float>(items[static_cast<std::size_t>(r * stride + c)]);
        } else {
            const W& b = items[static_cast<std::size_t>(r * stride + c / 32)];
            const float d = b.scale * static_cast<float>(b.q[c % 32]);
            return rounded ? nearest_bf16(d) : static_cast<double>(d);
        }
    }
    vwt::host_matrix<const W> view() const { return {items.data(), rows, cols / vwt::elements_per_item<W>, stride}; }
};

template <class W>
void check_swiglu_mlp(std::initializer_list<vwt::index_t> inters, std::initializer_list<vwt::index_t> widths) {
    using H = vwt::cpu::backend<float, W>;
    using vwt::cpu::product_precision;
    STATIC_REQUIRE(vwt::runs_swiglu_mlp<H>);  // the MLP layer's test for it: every CPU policy has it
    std::mt19937 rng(23);
    const float alpha = 0.75f, beta = 1.0f;
    const vwt::index_t out = 33;
    for (const auto layout : {vwt::swiglu_layout::split, vwt::swiglu_layout::interleaved})
        for (const vwt::index_t inter : inters)
            for (const vwt::index_t w : widths)
                for (const vwt::index_t m : {3, 5, 40})
                    for (const auto precision : {product_precision::automatic, product_precision::f32})
                        for (const int threads : {1, 2}) {
                            // (q8 decode's products quantize their activations too: matmul_nt's test)
                            if (std::is_same_v<W, vwt::q8_block> && precision == product_precision::automatic && m <= H::gemv_rows) continue;
                            const bool split = layout == vwt::swiglu_layout::split;
                            INFO("inter " << inter << " w " << w << " m " << m << (split ? " split" : " interleaved") << " f32 products "
                                          << (precision == product_precision::f32) << " threads " << threads);
                            strided x(m, w, rng), fc_values(2 * inter, w, rng, 3), proj_values(out, inter, rng, 2), y(m, out, rng, 7);
                            const stored_weights<W> fc(fc_values), proj(proj_values);
                            // (decode's products round their activations to bf16 against bf16 weights too)
                            const bool rounded = precision == product_precision::automatic && (std::is_same_v<W, vwt::bf16> || m > H::gemv_rows);
                            // u and g in double, with the sums of |terms| that bound their float error
                            std::vector<double> act(static_cast<std::size_t>(m * inter)), slack(act.size());
                            for (vwt::index_t r = 0; r < m; ++r)
                                for (vwt::index_t j = 0; j < inter; ++j) {
                                    double u = 0, g = 0, u_size = 0, g_size = 0;
                                    for (vwt::index_t c = 0; c < w; ++c) {
                                        const double xv = rounded ? nearest_bf16(static_cast<float>(x.at(r, c))) : x.at(r, c);
                                        const double wu = fc.at(split ? j : 2 * j, c, rounded);
                                        const double wg = fc.at(split ? inter + j : 2 * j + 1, c, rounded);
                                        u += xv * wu, g += xv * wg, u_size += std::abs(xv * wu), g_size += std::abs(xv * wg);
                                    }
                                    const double silu = g / (1 + std::exp(-g)), a = u * silu;
                                    const auto i = static_cast<std::size_t>(r * inter + j);
                                    act[i] = rounded ? nearest_bf16(static_cast<float>(a)) : a;
                                    slack[i] = 1e-5 * (u_size * std::abs(silu) + 1.1 * g_size * std::abs(u)) + 1e-6 * std::abs(a);
                                }
                            const auto weight = [&](vwt::index_t j, vwt::index_t c) { return proj.at(c, j, rounded); };
                            const auto want = brute_force(
                                m, out, inter, [&](vwt::index_t r, vwt::index_t j) { return act[static_cast<std::size_t>(r * inter + j)]; },
                                weight, alpha, beta, y);
                            std::vector<float> fused(static_cast<std::size_t>(m * 2 * inter)), scratch(static_cast<std::size_t>(m * inter));
                            H::swiglu_mlp({threads, precision}, x.view().as_const(), fc.view(),
                                          vwt::host_matrix<float>{fused.data(), m, 2 * inter, 2 * inter},
                                          vwt::host_matrix<float>{scratch.data(), m, inter, inter}, inter, layout, proj.view(), y.view(), alpha,
                                          beta);
                            // an activation next to a bf16 rounding boundary may land one step away
                            for (vwt::index_t r = 0; r < m; ++r)
                                for (vwt::index_t c = 0; c < out; ++c) {
                                    double largest = 0, carried = 0;
                                    for (vwt::index_t j = 0; j < inter; ++j) {
                                        const auto i = static_cast<std::size_t>(r * inter + j);
                                        largest = std::max(largest, std::abs(act[i] * weight(j, c)));
                                        carried += slack[i] * std::abs(weight(j, c));
                                    }
                                    const auto i = static_cast<std::size_t>(r * out + c);
                                    INFO("row " << r << " col " << c);
                                    REQUIRE(std::abs(y.at(r, c) - want.value[i]) <=
                                            1e-5 * want.magnitude[i] + alpha * carried + (rounded ? 0.008 * alpha * largest : 0) + 1e-6);
                                }
                        }
}

TEST_CASE("swiglu_mlp equals brute-force products around SwiGLU in double (operands rounded to bf16 where its products are)") {
    STATIC_REQUIRE(vwt::runs_swiglu_mlp<B>);
    SECTION("bf16 weights") { check_swiglu_mlp<vwt::bf16>({13, 70}, {8, 40}); }
    SECTION("q8 weights, dequantized") { check_swiglu_mlp<vwt::q8_block>({32, 64}, {32, 96}); }
}

// RMSNorm in double over the gain as stored (a bf16 value, or scale * q of a q8 block) on rows of n
// columns, against the policy's rmsnorm: up to its stack's width the gain is widened once per call,
// beyond it a panel at a time for each row.
template <class W>
void check_rmsnorm_gain(std::initializer_list<vwt::index_t> widths) {
    using H = vwt::cpu::backend<float, W>;
    std::mt19937 rng(29);
    for (const vwt::index_t n : widths)
        for (const vwt::index_t rows : {1, 7})
            for (const int threads : {1, 2}) {
                INFO("n " << n << " rows " << rows << " threads " << threads);
                const stored_weights<W> gain(strided(1, n, rng, 0));
                strided x(rows, n, rng), y(rows, n, rng, 3);
                const float eps = 1e-5f;
                H::rmsnorm({threads}, x.view().as_const(), vwt::vector_view<const W, vwt::host_memory>(gain.items.data(), gain.view().cols()),
                           y.view(), eps);
                for (vwt::index_t r = 0; r < rows; ++r) {
                    double squares = 0;
                    for (vwt::index_t c = 0; c < n; ++c) squares += x.at(r, c) * x.at(r, c);
                    const double inv = 1 / std::sqrt(squares / static_cast<double>(n) + eps);
                    for (vwt::index_t c = 0; c < n; ++c) {
                        const double want = x.at(r, c) * inv * gain.at(0, c, false);
                        INFO("row " << r << " col " << c);
                        REQUIRE(std::abs(y.at(r, c) - want) <= 1e-5 * std::abs(want) + 1e-6);
                    }
                }
            }
}

TEST_CASE("rmsnorm with a bf16 or q8 gain equals RMSNorm in double over the stored gain") {
    using H = vwt::cpu::backend<float, vwt::bf16>;
    STATIC_REQUIRE(H::rmsnorm_stack_cols == 4096);  // the widths below straddle it
    SECTION("bf16 gain") { check_rmsnorm_gain<vwt::bf16>({40, 4096, 4100}); }
    SECTION("q8 gain") { check_rmsnorm_gain<vwt::q8_block>({64, 4096, 4160}); }
}

TEST_CASE("bf16 products need float compute") {
    using D = vwt::cpu::backend<double>;
    std::vector<double> x(8 * 4, 1.0), w(3 * 4, 1.0), y(8 * 3);
    CHECK_THROWS_WITH(D::matmul_nt({1, vwt::cpu::product_precision::bf16}, vwt::host_matrix<const double>{x.data(), 8, 4, 4},
                                   vwt::host_matrix<const double>{w.data(), 3, 4, 4}, vwt::host_matrix<double>{y.data(), 8, 3, 3}),
                      Catch::Contains("bf16 products need float compute"));
}

TEST_CASE("q8 blocks: scale max|x| / 127, weights rounded to the nearest step, exact extremes") {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (int trial = 0; trial < 2000; ++trial) {
        float x[32];
        const float spread = std::ldexp(1.0f, trial % 40 - 20);
        for (auto& v : x) v = spread * normal(rng);
        if (trial % 7 == 0) x[trial % 32] = 0;
        const auto b = vwt::q8_block::quantize(x);
        double amax = 0;
        for (float v : x) amax = std::max(amax, std::abs(static_cast<double>(v)));
        REQUIRE(b.scale == static_cast<float>(amax) / 127.0f);
        for (int i = 0; i < 32; ++i) {
            INFO("trial " << trial << " weight " << i);
            // nearest multiple of the scale, computed in double
            const double want = std::nearbyint(static_cast<double>(x[i]) / b.scale);
            REQUIRE(std::abs(static_cast<double>(b.q[i]) - want) <= (std::abs(std::abs(x[i] / b.scale - want) - 0.5) < 1e-4 ? 1 : 0));
            REQUIRE(std::abs(b[i] - x[i]) <= 0.5001 * b.scale);
            if (std::abs(x[i]) == static_cast<float>(amax)) REQUIRE(std::abs(b.q[i]) == 127);
        }
    }
    float zeros[32] = {};
    const auto z = vwt::q8_block::quantize(zeros);
    CHECK(z.scale == 0.0f);
    CHECK(z[5] == 0.0f);
    float bad[32] = {};
    bad[3] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(vwt::q8_block::quantize(bad), Catch::Matchers::Contains("non-finite"));
    CHECK_THROWS_WITH(vwt::convert_elements<vwt::q8_block>(std::vector<float>(40)), Catch::Matchers::Contains("not a whole number of blocks"));
}

TEST_CASE("q8 decode quantizes activations by the weights' rule, a non-finite block to a NaN scale") {
    std::mt19937 rng(9);
    std::normal_distribution<float> normal;
    constexpr int blocks = 12;
    std::vector<float> x(blocks * 32);
    for (int trial = 0; trial < 200; ++trial) {
        for (auto& v : x) v = std::ldexp(normal(rng), trial % 30 - 15);
        for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;                   // block 1: zeros
        x[2 * 32 + 5] = std::numeric_limits<float>::quiet_NaN();          // block 2: a NaN
        x[3 * 32 + 31] = -std::numeric_limits<float>::infinity();         // block 3: an infinity
        std::vector<vwt::q8_block> got(blocks);
        vwt::cpu::kernels::quantize_row(x.data(), blocks * 32, got.data());
        for (int b = 0; b < blocks; ++b) {
            INFO("trial " << trial << " block " << b);
            if (b == 2 || b == 3) {
                CHECK(std::isnan(got[b].scale));
                continue;
            }
            const auto want = vwt::q8_block::quantize(&x[static_cast<std::size_t>(b * 32)]);
            REQUIRE(got[b].scale == want.scale);
            for (int i = 0; i < 32; ++i) REQUIRE(got[b].q[i] == want.q[i]);
        }
    }
}

TEST_CASE("matmul_nt with q8 weights equals a brute-force sum over the dequantized weights") {
    using Q = vwt::cpu::backend<float, vwt::q8_block>;
    std::mt19937 rng(13);
    const float alpha = 0.5f;
    for (const vwt::index_t k : {32, 96, 800, 1600})  // whole blocks; 800 and 1600 cross the panel split
        for (const vwt::index_t m : {1, 3, 4, 5, 64})
            for (const vwt::index_t n : {1, 33, 300})
                for (const float beta : {0.0f, 0.5f})
                    for (const int threads : {1, 2}) {
                        INFO("k " << k << " m " << m << " n " << n << " beta " << beta << " threads " << threads);
                        strided x(m, k, rng), y(m, n, rng);
                        const vwt::index_t blocks = k / 32, stride = blocks + 2;  // rows of blocks inside a wider buffer
                        std::vector<float> wf(static_cast<std::size_t>(n * k));
                        std::normal_distribution<float> normal;
                        for (auto& v : wf) v = normal(rng);
                        std::vector<vwt::q8_block> w(static_cast<std::size_t>(n * stride));
                        for (vwt::index_t r = 0; r < n; ++r)
                            for (vwt::index_t b = 0; b < blocks; ++b)
                                w[static_cast<std::size_t>(r * stride + b)] = vwt::q8_block::quantize(&wf[static_cast<std::size_t>(r * k + b * 32)]);
                        if (beta == 0.0f)
                            for (auto& v : y.data) v = std::numeric_limits<float>::quiet_NaN();
                        const auto dequantized = [&](vwt::index_t j, vwt::index_t c) {
                            const auto& b = w[static_cast<std::size_t>(c * stride + j / 32)];
                            return static_cast<double>(b.scale) * b.q[j % 32];
                        };
                        const strided prior = y;
                        const auto want = brute_force(m, n, k, [&](auto r, auto j) { return x.at(r, j); }, dequantized, alpha, beta, y);
                        const vwt::host_matrix<const vwt::q8_block> wq{w.data(), n, blocks, stride};
                        Q::matmul_nt({threads, vwt::cpu::product_precision::f32}, x.view(), wq, y.view(), alpha, beta);
                        check(y, want);
                        // the default: above 4 rows both operands rounded to bf16 (the dequantized
                        // weight, a float, rounded), float sums; up to 4 rows (decode) each row of x
                        // quantized to q8 blocks by the weights' rule (checked above), exact products
                        y = prior;
                        const bool rounds = m > Q::gemv_rows;
                        std::vector<vwt::q8_block> xq(static_cast<std::size_t>(m * blocks));
                        for (vwt::index_t r = 0; r < m; ++r)
                            for (vwt::index_t b = 0; b < blocks; ++b) {
                                float part[32];
                                for (int i = 0; i < 32; ++i) part[i] = static_cast<float>(x.at(r, b * 32 + i));
                                xq[static_cast<std::size_t>(r * blocks + b)] = vwt::q8_block::quantize(part);
                            }
                        const auto want_default = brute_force(
                            m, n, k,
                            [&](auto r, auto j) {
                                const auto& b = xq[static_cast<std::size_t>(r * blocks + j / 32)];
                                return rounds ? nearest_bf16(static_cast<float>(x.at(r, j))) : static_cast<double>(b.scale) * b.q[j % 32];
                            },
                            [&](auto j, auto c) {
                                const auto& b = w[static_cast<std::size_t>(c * stride + j / 32)];
                                const float d = b.scale * static_cast<float>(b.q[j % 32]);
                                return rounds ? nearest_bf16(d) : static_cast<double>(d);
                            },
                            alpha, beta, y);
                        Q::matmul_nt({threads}, x.view(), wq, y.view(), alpha, beta);
                        check(y, want_default);
                    }
}

// What the kernels ask CPUID for (the vendor and the family, which decide how far ahead of use
// decode asks for weights; AVX512_BF16), against Linux's own reading of CPUID in /proc/cpuinfo.
TEST_CASE("cpu features: the vendor, the family and AVX512_BF16 agree with /proc/cpuinfo") {
    std::ifstream cpuinfo("/proc/cpuinfo");
    if (!cpuinfo) {
        WARN("no /proc/cpuinfo here: nothing to compare the CPUID answers with");
        return;
    }
    std::string line, vendor;
    int family = -1;
    std::set<std::string> flags;
    bool flags_seen = false;
    while (std::getline(cpuinfo, line)) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::istringstream value(line.substr(colon + 1));
        if (vendor.empty() && line.rfind("vendor_id", 0) == 0) value >> vendor;
        if (family < 0 && line.rfind("cpu family", 0) == 0) value >> family;
        if (!flags_seen && line.rfind("flags", 0) == 0) {
            for (std::string flag; value >> flag;) flags.insert(flag);
            flags_seen = true;
        }
    }
    INFO("vendor_id " << vendor << ", cpu family " << family);
    CHECK(vwt::cpu::kernels::is_intel_cpu() == (vendor == "GenuineIntel"));
    if (family >= 0) CHECK(vwt::cpu::kernels::cpu_family() == family);
    // the distance follows the vendor and the family: 2 KiB on Intel's cores, 4 KiB on other
    // vendors' from family 26 (AMD's Zen 5) on
    const std::size_t distance = vendor == "GenuineIntel" ? 2048 : family >= 26 ? 4096 : 0;
    CHECK(vwt::cpu::kernels::detail::prefetch_distance() == distance);
    if (flags_seen) CHECK(vwt::cpu::kernels::has_avx512_bf16() == (flags.count("avx512_bf16") > 0));
}
