// A one-layer x shape cannot narrow toward a turning layer: no factor reaches the bottleneck.
#include <vwt/schedule/presets.hpp>
constexpr vwt::schedule_spec spec() {
    auto s = vwt::presets::tiny_l8;
    s.turn = 1;
#ifdef VWT_EXPECT_OK
    s.dims.layers = 2;
#else
    s.dims.layers = 1;
#endif
    return s;
}
constexpr auto plan = vwt::solve_plan(spec());
int main() { return plan.base_width > 0 ? 0 : 1; }
