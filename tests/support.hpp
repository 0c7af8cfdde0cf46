// Helpers shared by the model and training tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
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
