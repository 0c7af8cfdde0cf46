// An x shape needs a bottleneck ratio below 1.
#include <vwt/schedule/presets.hpp>
constexpr vwt::schedule_spec spec() {
    auto s = vwt::presets::dense_200m;
#ifdef VWT_EXPECT_OK
    s.bottleneck = 0.5;
#else
    s.bottleneck = 1.0;
#endif
    return s;
}
constexpr auto sched = vwt::make_schedule<16>(spec());
int main() { return sched.widths[0] > 0 ? 0 : 1; }
