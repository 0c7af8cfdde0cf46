// The CPU backend's three matrix products against a brute-force double-precision sum: shapes on
// both sides of the k-panel split of matmul_nt (k <= 768 is one Eigen product, longer k a sum of
// panels), row-strided views, alpha and beta (beta 0 must not read the output), 1 and 2 threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <vwt/vwt.hpp>

namespace {

using B = vwt::cpu::backend<float>;

// A [rows x cols] block inside a wider buffer (stride cols + 5), filled with N(0, 1).
struct strided {
    vwt::index_t rows, cols, stride;
    std::vector<float> data;
    strided(vwt::index_t r, vwt::index_t c, std::mt19937& rng) : rows(r), cols(c), stride(c + 5), data(r * (c + 5)) {
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
