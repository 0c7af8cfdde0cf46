// A downstream program that only knows the installed package.
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include <vwt/vwt.hpp>

int main() {
    constexpr auto s = vwt::make_schedule<16>(vwt::presets::dense_200m);
    static_assert(s.widths[11] == 192);
    std::printf("consumer: dense_200m turning width %d\n", s.widths[11]);
    // A prefill of 8 tokens on a small random model: the CPU policy's GEMM path (Eigen, or oneDNN
    // for the consumer linked against vwt::onednn).
    const auto config = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));
    std::vector<float> params;
    vwt::initialize_parameters(config, vwt::parameter_layout(config), 1, params);
    const vwt::model<vwt::cpu::backend<float>> m(config, params, {.threads = 2});
    auto cache = m.make_cache(8);
    const std::vector<int> tokens{1, 2, 3, 4, 5, 6, 7, 8};
    const vwt::sequence_input<vwt::cpu::backend<float>> in{&cache, tokens};
    double sum = 0;
    for (float v : m.forward({.threads = 2}, std::span(&in, 1), vwt::logits_mode::all)) sum += v;
    if (!std::isfinite(sum)) return 1;
    std::printf("consumer: prefill logits finite\n");
    return 0;
}
