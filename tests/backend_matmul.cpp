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
    vwt::matrix_view<float> view() { return {data.data(), rows, cols, stride}; }
    double at(vwt::index_t r, vwt::index_t c) const { return data[static_cast<std::size_t>(r * stride + c)]; }
};

// |got - want| within a relative tolerance scaled by the sum of |terms| (fp32 accumulation).
void check(const strided& got, const std::vector<double>& want, const std::vector<double>& magnitude) {
    for (vwt::index_t r = 0; r < got.rows; ++r)
        for (vwt::index_t c = 0; c < got.cols; ++c) {
            const auto i = static_cast<std::size_t>(r * got.cols + c);
            INFO("row " << r << " col " << c);
            REQUIRE(std::abs(got.at(r, c) - want[i]) <= 1e-5 * magnitude[i] + 1e-6);
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
                        std::vector<double> want(static_cast<std::size_t>(m * n)), mag(want.size());
                        for (vwt::index_t r = 0; r < m; ++r)
                            for (vwt::index_t c = 0; c < n; ++c) {
                                double s = 0, a = 0;
                                for (vwt::index_t j = 0; j < k; ++j) s += x.at(r, j) * w.at(c, j), a += std::abs(x.at(r, j) * w.at(c, j));
                                const auto i = static_cast<std::size_t>(r * n + c);
                                want[i] = alpha * s + (beta == 0.0f ? 0.0 : beta * y.at(r, c));
                                mag[i] = a + (beta == 0.0f ? 0.0 : std::abs(y.at(r, c)));
                            }
                        B::matmul_nt({threads}, x.view(), w.view(), y.view(), alpha, beta);
                        check(y, want, mag);
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
                std::vector<double> want(static_cast<std::size_t>(m * n)), mag(want.size());
                for (vwt::index_t r = 0; r < m; ++r)
                    for (vwt::index_t c = 0; c < n; ++c) {
                        double s = 0, a = 0;
                        for (vwt::index_t j = 0; j < k; ++j) s += x.at(r, j) * w.at(j, c), a += std::abs(x.at(r, j) * w.at(j, c));
                        const auto i = static_cast<std::size_t>(r * n + c);
                        want[i] = s + y.at(r, c), mag[i] = a + std::abs(y.at(r, c));
                    }
                B::matmul_nn({threads}, x.view(), w.view(), y.view(), 1.0f, 1.0f);
                check(y, want, mag);

                // tn: g [n x k] = a^T . b with a [m x n], b [m x k], beta 0 (the weight gradient)
                strided a(m, n, rng), b(m, k, rng), g(n, k, rng);
                std::vector<double> want_g(static_cast<std::size_t>(n * k)), mag_g(want_g.size());
                for (vwt::index_t r = 0; r < n; ++r)
                    for (vwt::index_t c = 0; c < k; ++c) {
                        double s = 0, t = 0;
                        for (vwt::index_t j = 0; j < m; ++j) s += a.at(j, r) * b.at(j, c), t += std::abs(a.at(j, r) * b.at(j, c));
                        const auto i = static_cast<std::size_t>(r * k + c);
                        want_g[i] = s, mag_g[i] = t;
                    }
                B::matmul_tn({threads}, a.view(), b.view(), g.view());
                check(g, want_g, mag_g);
            }
}
