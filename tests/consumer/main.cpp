// A downstream program that only knows the installed package.
#include <cstdio>

#include <vwt/vwt.hpp>

int main() {
    constexpr auto s = vwt::make_schedule<16>(vwt::presets::dense_200m);
    static_assert(s.widths[11] == 192);
    std::printf("consumer: dense_200m turning width %d\n", s.widths[11]);
    return 0;
}
