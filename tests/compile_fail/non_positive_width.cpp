// A non-positive width cannot form a schedule.
#include <vwt/schedule/presets.hpp>
#ifdef VWT_EXPECT_OK
constexpr vwt::schedule<2> s({2, 64, 4, 4, 256, 128, {}}, {64, 8});
#else
constexpr vwt::schedule<2> s({2, 64, 4, 4, 256, 128, {}}, {64, 0});
#endif
int main() { return s.widths[0] == 64 ? 0 : 1; }
