// The turning layer must lie in 1..L.
#include <vwt/schedule/presets.hpp>
constexpr vwt::schedule_spec spec() {
    auto s = vwt::presets::tiny_l8;
#ifdef VWT_EXPECT_OK
    s.turn = 8;
#else
    s.turn = 9;
#endif
    return s;
}
constexpr auto sched = vwt::make_schedule<8>(spec());
int main() { return sched.widths[0] > 0 ? 0 : 1; }
