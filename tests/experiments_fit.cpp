// The scaling-curve fit L(x) = a x^-b + c: exact points give back their parameters, and on noisy
// points no (a, b, c) of a dense brute-force grid leaves a smaller sum of squares.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include <vwt/experiments/scaling_fit.hpp>

using vwt::experiments::fit_power_law;

TEST_CASE("exact points on a power law give back a, b and c") {
    for (const auto& [a, b, c] : std::vector<std::tuple<double, double, double>>{{30.0, 0.3, 1.7}, {5.0, 0.8, 2.2}, {400.0, 0.15, 0.0}}) {
        const std::vector<double> x = {1e12, 3e12, 1e13, 4e13, 1.2e14};
        std::vector<double> loss;
        for (double v : x) loss.push_back(a * std::pow(v / 1e12, -b) + c);
        const auto f = fit_power_law(x, loss);
        CHECK(f.b == Approx(b).epsilon(1e-5));
        CHECK(f.c == Approx(c).margin(1e-5));
        for (std::size_t i = 0; i < x.size(); ++i) CHECK(f.loss(x[i]) == Approx(loss[i]).epsilon(1e-7));
        // the inverse: the x at which the curve reaches a loss
        CHECK(f.x_at(loss[2]) == Approx(x[2]).epsilon(1e-5));
        CHECK(std::isinf(f.x_at(c - 0.01)));
    }
}

TEST_CASE("noisy points: the fit is at least as good as a dense brute-force grid") {
    std::mt19937_64 rng(7);
    std::normal_distribution<double> noise(0, 0.01);
    const std::vector<double> x = {2e13, 5e13, 1e14, 3e14};
    std::vector<double> loss;
    for (double v : x) loss.push_back(12.0 * std::pow(v / 1e13, -0.35) + 1.9 + noise(rng));
    const auto f = fit_power_law(x, loss);
    double sse = 0;
    for (std::size_t i = 0; i < x.size(); ++i) sse += std::pow(loss[i] - f.loss(x[i]), 2);
    CHECK(sse == Approx(f.sse).margin(1e-12));
    // brute force over (b, c); for each, a from a grid too (no closed form used here)
    double best = 1e300;
    const double lowest = *std::min_element(loss.begin(), loss.end());
    for (int i = 1; i <= 200; ++i) {
        const double b = 4.0 * i / 200;
        for (int j = 0; j < 200; ++j) {
            const double c = lowest * j / 200;
            for (int k = 0; k <= 200; ++k) {
                const double a = 20.0 * k / 200 * std::pow(1e13 / f.x_scale, -b);  // a over x_scale's units
                double s = 0;
                for (std::size_t p = 0; p < x.size(); ++p) s += std::pow(loss[p] - (a * std::pow(x[p] / f.x_scale, -b) + c), 2);
                best = std::min(best, s);
            }
        }
    }
    CHECK(f.sse <= best + 1e-12);
}

TEST_CASE("the fit rejects what it cannot fit") {
    CHECK_THROWS_WITH(fit_power_law(std::vector<double>{1, 2}, std::vector<double>{3, 2}), Catch::Contains("three points at least"));
    CHECK_THROWS_WITH(fit_power_law(std::vector<double>{1, -2, 3}, std::vector<double>{3, 2, 1}), Catch::Contains("x must be positive"));
    CHECK_THROWS_WITH(fit_power_law(std::vector<double>{1, 2, 3}, std::vector<double>{3, 2}), Catch::Contains("3 x values and 2 losses"));
}
