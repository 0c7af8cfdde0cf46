// Scaling curves L(x) = a x^-b + c fitted to final losses (x: training FLOPs, or KV bytes per
// token), and what one shape saves over another at matched loss (the paper's Table 2).
#pragma once

// The fit is least squares in loss space. For a fixed exponent b the model is linear in (a, c), so
// the best (a, c) with a >= 0 and c >= 0 has a closed form (the unconstrained solution, else the
// better of the two boundaries); the search runs over b alone: a log-spaced grid over (0, max_b],
// then golden sections around the best grid point. x is divided by its geometric mean first.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "../error.hpp"

namespace vwt::experiments {

struct power_law_fit {
    double a = 0, b = 0, c = 0;
    double x_scale = 1;  // L(x) = a (x / x_scale)^-b + c
    double sse = 0;      // sum of squared loss residuals
    double loss(double x) const { return a * std::pow(x / x_scale, -b) + c; }
    // The x at which the curve reaches `l`: infinite at or below the asymptote c.
    double x_at(double l) const {
        if (!(l > c) || a <= 0) return std::numeric_limits<double>::infinity();
        return x_scale * std::pow((l - c) / a, -1 / b);
    }
};

namespace detail {
// The best (a, c), a >= 0 and c >= 0, for a fixed b, and the sum of squared residuals.
inline double fit_for_exponent(std::span<const double> x, std::span<const double> loss, double b, double& a, double& c) {
    const double n = static_cast<double>(x.size());
    double sf = 0, sff = 0, sl = 0, sfl = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double f = std::pow(x[i], -b);
        sf += f, sff += f * f, sl += loss[i], sfl += f * loss[i];
    }
    const auto sse_of = [&](double a_, double c_) {
        double s = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double r = loss[i] - (a_ * std::pow(x[i], -b) + c_);
            s += r * r;
        }
        return s;
    };
    double best = std::numeric_limits<double>::infinity();
    const auto consider = [&](double a_, double c_) {
        if (!(a_ >= 0 && c_ >= 0)) return;
        if (const double s = sse_of(a_, c_); s < best) best = s, a = a_, c = c_;
    };
    const double det = n * sff - sf * sf;
    if (std::abs(det) > 1e-300) consider((n * sfl - sf * sl) / det, (sff * sl - sf * sfl) / det);  // unconstrained
    consider(std::max(0.0, sff > 0 ? sfl / sff : 0.0), 0.0);                                       // c = 0
    consider(0.0, std::max(0.0, sl / n));                                                          // a = 0
    return best;
}
}  // namespace detail

// Fits L(x) = a x^-b + c (a >= 0, b in (0, max_b], c >= 0) to at least three points with
// positive x.
inline power_law_fit fit_power_law(std::span<const double> x, std::span<const double> loss, double max_b = 4) {
    if (x.size() != loss.size()) vwt::detail::fail("fit_power_law: ", x.size(), " x values and ", loss.size(), " losses");
    if (x.size() < 3) vwt::detail::fail("fit_power_law: three points at least (three parameters), got ", x.size());
    double log_sum = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        if (!(x[i] > 0) || !std::isfinite(x[i])) vwt::detail::fail("fit_power_law: x must be positive and finite, got ", x[i]);
        if (!std::isfinite(loss[i]) || loss[i] < 0) vwt::detail::fail("fit_power_law: losses must be finite and >= 0, got ", loss[i]);
        log_sum += std::log(x[i]);
    }
    power_law_fit f;
    f.x_scale = std::exp(log_sum / static_cast<double>(x.size()));
    std::vector<double> scaled(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) scaled[i] = x[i] / f.x_scale;
    const auto sse = [&](double b) {
        double a = 0, c = 0;
        return detail::fit_for_exponent(scaled, loss, b, a, c);
    };
    constexpr int grid = 2000;
    const double lo = 1e-4, ratio = std::pow(max_b / lo, 1.0 / grid);
    int best_k = 0;
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k <= grid; ++k)
        if (const double s = sse(lo * std::pow(ratio, k)); s < best) best = s, best_k = k;
    double left = lo * std::pow(ratio, std::max(0, best_k - 1)), right = lo * std::pow(ratio, std::min(grid, best_k + 1));
    const double golden = (std::sqrt(5.0) - 1) / 2;
    for (int i = 0; i < 200 && right - left > 1e-14 * right; ++i) {
        const double m1 = right - golden * (right - left), m2 = left + golden * (right - left);
        if (sse(m1) <= sse(m2)) right = m2;
        else left = m1;
    }
    f.b = (left + right) / 2;
    f.sse = detail::fit_for_exponent(scaled, loss, f.b, f.a, f.c);
    if (best < f.sse) {  // the grid point was better (a flat or multi-modal valley)
        f.b = lo * std::pow(ratio, best_k);
        f.sse = detail::fit_for_exponent(scaled, loss, f.b, f.a, f.c);
    }
    return f;
}

}  // namespace vwt::experiments
