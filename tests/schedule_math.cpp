// The constexpr elementary functions against <cmath>, and Python's round and random.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <vector>

#include <vwt/schedule/python_random.hpp>
#include <vwt/detail/constexpr_math.hpp>

namespace {
constexpr std::array<double, 9> inputs{1e-6, 0.01, 0.3, 0.7, 1.0, 1.5, 2.0, 12.25, 4096.0};

template <class F>
constexpr std::array<double, inputs.size()> table(F f) {
    std::array<double, inputs.size()> out{};
    for (std::size_t i = 0; i < inputs.size(); ++i) out[i] = f(inputs[i]);
    return out;
}
// Evaluated by the compiler (the constexpr series), compared with the run-time libm.
constexpr auto ct_log = table([](double x) { return vwt::detail::log(x); });
constexpr auto ct_exp = table([](double x) { return vwt::detail::exp(x / 100.0); });
constexpr auto ct_sqrt = table([](double x) { return vwt::detail::sqrt(x); });
constexpr auto ct_pow = table([](double x) { return vwt::detail::pow(x, -11.0 / 4.0); });
constexpr auto ct_powi = table([](double x) { return vwt::detail::pow(x, 7.0); });

double ulps(double a, double b) { return std::abs(a - b) / std::abs(std::nextafter(b, 2 * b + 1) - b); }
}  // namespace

TEST_CASE("constexpr math agrees with libm to a few ulp") {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const double x = inputs[i];
        CAPTURE(x);
        CHECK(ulps(ct_log[i], std::log(x)) <= 2);
        CHECK(ulps(ct_exp[i], std::exp(x / 100.0)) <= 2);
        CHECK(ulps(ct_sqrt[i], std::sqrt(x)) <= 1);
        // exp(y log x): the rounding of y log x costs |y log x| ulp on top of exp's own.
        CHECK(ulps(ct_pow[i], std::pow(x, -11.0 / 4.0)) <= 4 + 2 * std::abs(-11.0 / 4.0 * std::log(x)));
        CHECK(ulps(ct_powi[i], std::pow(x, 7.0)) <= 4);
    }
}

TEST_CASE("round_half_even is Python's round") {
    static_assert(vwt::detail::round_half_even(0.5) == 0);
    static_assert(vwt::detail::round_half_even(1.5) == 2);
    static_assert(vwt::detail::round_half_even(2.5) == 2);
    static_assert(vwt::detail::round_half_even(-0.5) == 0);
    static_assert(vwt::detail::round_half_even(-1.5) == -2);
    static_assert(vwt::detail::round_half_even(-2.6) == -3);
    static_assert(vwt::detail::round_half_even(35.84375) == 36);
    CHECK(vwt::detail::round_half_even(1146.9999) == 1147);
    CHECK(vwt::detail::round_half_even(7.5) == 8);
}

TEST_CASE("python_random reproduces random.Random(seed).shuffle(range(14))") {
    const auto shuffled = [](std::uint64_t seed) {
        std::vector<int> v(14);
        for (int i = 0; i < 14; ++i) v[static_cast<std::size_t>(i)] = i;
        vwt::detail::python_random(seed).shuffle(std::span<int>(v));
        return v;
    };
    CHECK(shuffled(0) == std::vector<int>{1, 10, 9, 5, 11, 2, 3, 7, 8, 4, 0, 12, 6, 13});
    CHECK(shuffled(1) == std::vector<int>{13, 10, 0, 12, 6, 5, 3, 8, 7, 11, 4, 1, 9, 2});
    CHECK(shuffled(42) == std::vector<int>{8, 12, 7, 6, 13, 11, 5, 2, 9, 3, 4, 0, 1, 10});
    CHECK(shuffled(1234) == std::vector<int>{4, 5, 3, 6, 13, 2, 8, 9, 10, 11, 0, 1, 7, 12});
}
