// Helpers shared by the model and training tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>
#include <vwt/io/checkpoint.hpp>
#include <vwt/train/trainer.hpp>

namespace vwt_test {

// A little-endian float32 file (the PyTorch reference's logits).
inline std::vector<float> read_floats(const std::filesystem::path& p) {
    const auto bytes = vwt::io::read_file_bytes(p);
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

// The nearest bfloat16 to f (8 significant bits, ties to even), from frexp rather than bits:
// float's exponent range, with subnormals below 2^-126 on a fixed grid of 2^-133, and infinity
// above the largest bfloat16. The tests' reference for vwt::bf16.
inline double nearest_bf16(float f) {
    if (std::abs(f) < std::ldexp(1.0, -126)) return std::ldexp(std::nearbyint(std::ldexp(static_cast<double>(f), 133)), -133);
    int e = 0;
    const double m = std::frexp(static_cast<double>(f), &e);  // [0.5, 1)
    const double r = std::ldexp(std::nearbyint(m * 256.0), e - 8);
    const double largest = std::ldexp(255.0, 127 - 7);  // (2 - 2^-7) * 2^127
    return std::abs(r) > largest ? std::copysign(std::numeric_limits<double>::infinity(), r) : r;
}

// max |got - want| relative to the largest |want|.
template <class A, class B>
double relative_error(const std::vector<A>& got, const std::vector<B>& want) {
    REQUIRE(got.size() == want.size());
    double scale = 0, err = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
        err = std::max(err, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    }
    return err / scale;
}

// Runs a trainer to its last step and returns the loss of each step.
template <class B>
std::vector<double> losses_of(vwt::train::trainer<B>& t) {
    std::vector<double> l;
    t.run([&](const vwt::train::step_report& r) { l.push_back(r.loss); });
    return l;
}

}  // namespace vwt_test
