// A schedule solved at compile time, used as a template argument, and its costs checked in
// static_assert: the paper's dense_200m ><former against its uniform twin.
#include <cstdio>

#include <vwt/vwt.hpp>

constexpr auto x200m = vwt::make_schedule<16>(vwt::presets::dense_200m);

// Anything that depends on the shape can take the schedule itself as a template argument.
template <vwt::schedule<16> S>
constexpr int narrowest() {
    int m = S.widths[0];
    for (int w : S.widths) m = w < m ? w : m;
    return m;
}

static_assert(narrowest<x200m>() == 192, "turning layer of dense_200m is 192 wide");
static_assert(x200m.residual_width == 1152);

constexpr auto costs = vwt::compare_with_uniform(x200m);
static_assert(costs.model.kv_bytes_per_token < costs.uniform.kv_bytes_per_token,
              "the ><former's KV cache is smaller");

int main() {
    std::printf("dense_200m widths:");
    for (int w : x200m.widths) std::printf(" %d", w);
    std::printf("\nKV cache: %.1f%% smaller, forward FLOPs/token: %.1f%% fewer than the uniform twin\n",
                vwt::reduction_percent(costs.model.kv_bytes_per_token, costs.uniform.kv_bytes_per_token),
                vwt::reduction_percent(costs.model.flops_per_token, costs.uniform.flops_per_token));
    return 0;
}
