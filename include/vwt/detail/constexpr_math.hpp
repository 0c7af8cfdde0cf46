// Elementary functions usable in constant expressions (sqrt, log, exp, pow) and Python's round.
// At run time they forward to <cmath>, so run-time results are bit-identical to the authors' Python.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace vwt::detail {

constexpr double ln2_hi = 6.93147180369123816490e-01;
constexpr double ln2_lo = 1.90821492927058770002e-10;

constexpr bool is_finite(double x) {
    return x == x && x != std::numeric_limits<double>::infinity() &&
           x != -std::numeric_limits<double>::infinity();
}

constexpr double abs(double x) { return x < 0 ? -x : x; }

// x * 2^e for integer e, exact while the result is normal.
constexpr double scale_by_power_of_two(double x, int e) {
    while (e > 0) { x *= 2.0; --e; }
    while (e < 0) { x *= 0.5; ++e; }
    return x;
}

constexpr double sqrt(double x) {
    if (!std::is_constant_evaluated()) return std::sqrt(x);
    if (x < 0 || x != x) return std::numeric_limits<double>::quiet_NaN();
    if (x == 0 || x == std::numeric_limits<double>::infinity()) return x;
    // Newton from an initial guess of the right binary magnitude; then one correction step
    // that picks the better of the neighbouring doubles.
    double guess = 1.0;
    double y = x;
    while (y > 4.0) { y *= 0.25; guess *= 2.0; }
    while (y < 0.25) { y *= 4.0; guess *= 0.5; }
    for (int i = 0; i < 60; ++i) {
        const double next = 0.5 * (guess + x / guess);
        if (next == guess) break;
        guess = next;
    }
    return guess;
}

constexpr double log(double x) {
    if (!std::is_constant_evaluated()) return std::log(x);
    if (x < 0 || x != x) return std::numeric_limits<double>::quiet_NaN();
    if (x == 0) return -std::numeric_limits<double>::infinity();
    if (x == std::numeric_limits<double>::infinity()) return x;
    // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172.
    int e = 0;
    double m = x;
    while (m >= 1.4142135623730951) { m *= 0.5; ++e; }
    while (m < 0.7071067811865476) { m *= 2.0; --e; }
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    double term = s;
    double sum = 0.0;
    for (int k = 1; k < 60; k += 2) {
        const double next = sum + term / k;
        if (next == sum) break;
        sum = next;
        term *= s2;
    }
    return 2.0 * sum + e * ln2_lo + e * ln2_hi;
}

constexpr double exp(double x) {
    if (!std::is_constant_evaluated()) return std::exp(x);
    if (x != x) return x;
    if (x > 709.8) return std::numeric_limits<double>::infinity();
    if (x < -745.2) return 0.0;
    // x = k ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series.
    const double kd = x / (ln2_hi + ln2_lo);
    const int k = static_cast<int>(kd < 0 ? kd - 0.5 : kd + 0.5);
    const double r = (x - k * ln2_hi) - k * ln2_lo;
    double term = 1.0;
    double sum = 1.0;
    for (int n = 1; n < 40; ++n) {
        term *= r / n;
        const double next = sum + term;
        if (next == sum) break;
        sum = next;
    }
    return scale_by_power_of_two(sum, k);
}

// pow for the cases the schedule solver meets: positive base, any real exponent; or any base
// with an integral exponent.
constexpr double pow(double base, double exponent) {
    if (!std::is_constant_evaluated()) return std::pow(base, exponent);
    if (exponent == 0) return 1.0;
    const bool integral = exponent == static_cast<double>(static_cast<std::int64_t>(exponent)) &&
                          abs(exponent) < 1e15;
    if (integral) {
        // Square-and-multiply is exact-ish and handles negative bases.
        std::int64_t n = static_cast<std::int64_t>(exponent);
        const bool invert = n < 0;
        if (invert) n = -n;
        double result = 1.0;
        double factor = base;
        while (n > 0) {
            if (n & 1) result *= factor;
            factor *= factor;
            n >>= 1;
        }
        return invert ? 1.0 / result : result;
    }
    if (base < 0) return std::numeric_limits<double>::quiet_NaN();
    if (base == 0) return exponent > 0 ? 0.0 : std::numeric_limits<double>::infinity();
    return exp(exponent * log(base));
}

// Python 3's round(x): nearest integer, ties to even.
constexpr std::int64_t round_half_even(double x) {
    const double floor_x = static_cast<double>(static_cast<std::int64_t>(x)) > x
                               ? static_cast<double>(static_cast<std::int64_t>(x)) - 1.0
                               : static_cast<double>(static_cast<std::int64_t>(x));
    const double fraction = x - floor_x;
    auto result = static_cast<std::int64_t>(floor_x);
    if (fraction > 0.5 || (fraction == 0.5 && (result % 2 != 0))) ++result;
    return result;
}

}  // namespace vwt::detail
