// A width that the heads do not divide cannot form a schedule.
#include <vwt/schedule/presets.hpp>
#ifdef VWT_EXPECT_OK
constexpr vwt::schedule<2> s({2, 64, 4, 4, 256, 128, {}}, {64, 72});
#else
constexpr vwt::schedule<2> s({2, 64, 4, 4, 256, 128, {}}, {64, 70});
#endif
int main() { return s.widths[0] == 64 ? 0 : 1; }
