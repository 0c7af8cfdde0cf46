// One model in three weight formats on the CPU: f32, bf16 (vwt::bf16) and 8-bit blocks
// (vwt::q8_block). The format is the policy's weight type; the parameters are converted once, and
// every op widens weights to float where it uses them. Prints how far each format's logits move
// from f32's and the bytes its weights take.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>

#include <vwt/vwt.hpp>

template <class W>
std::vector<float> logits(const vwt::model_config& c, const std::vector<float>& params, std::span<const int> tokens,
                          double& megabytes) {
    using policy = vwt::cpu::backend<float, W>;
    const auto stored = vwt::convert_parameters<W>(vwt::parameter_layout(c), params);  // q8 checks every width
    megabytes = static_cast<double>(stored.size() * sizeof(W)) / 1e6;
    const vwt::model<policy> m(c, stored, {.threads = 2});
    auto cache = m.make_cache(static_cast<int>(tokens.size()));
    const vwt::sequence_input<policy> in{&cache, tokens};
    return m.forward({.threads = 2}, std::span(&in, 1), vwt::logits_mode::all);
}

int main() {
    // an x-shaped schedule whose widths are whole q8 blocks (multiples of 32)
    const auto config = vwt::model_config::mup(vwt::dynamic_schedule({6, 256, 4, 4, 512, 128, {}}, {384, 256, 128, 128, 256, 384}));
    std::vector<float> params;
    vwt::initialize_parameters(config, vwt::parameter_layout(config), /*seed*/ 1, params);
    std::vector<int> tokens;
    for (int i = 0; i < 32; ++i) tokens.push_back((i * 97 + 5) % 512);

    double mb32 = 0, mb16 = 0, mb8 = 0;
    const auto f32 = logits<float>(config, params, tokens, mb32);
    const auto moved = [&](const std::vector<float>& l) {
        double err = 0, scale = 0;
        for (std::size_t i = 0; i < l.size(); ++i) err = std::max(err, std::abs(double(l[i]) - f32[i])), scale = std::max(scale, std::abs(double(f32[i])));
        return err / scale;
    };
    const double d16 = moved(logits<vwt::bf16>(config, params, tokens, mb16));
    const double d8 = moved(logits<vwt::q8_block>(config, params, tokens, mb8));
    std::printf("f32  weights %6.2f MB\n", mb32);
    std::printf("bf16 weights %6.2f MB, logits within %.2f%% of f32's largest\n", mb16, 100 * d16);
    std::printf("q8   weights %6.2f MB, logits within %.2f%% of f32's largest\n", mb8, 100 * d8);
    return d16 < 0.01 && d8 < 0.03 ? 0 : 1;
}
