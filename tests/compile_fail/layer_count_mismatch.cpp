// A fixed-size schedule must have as many widths as the spec has layers.
#include <vwt/schedule/presets.hpp>
#ifdef VWT_EXPECT_OK
constexpr auto s = vwt::make_schedule<16>(vwt::presets::dense_200m);
#else
constexpr auto s = vwt::make_schedule<15>(vwt::presets::dense_200m);
#endif
int main() { return s.widths[0] > 0 ? 0 : 1; }
