// The summaries the reports print: the mean and the sample standard deviation of a list of runs.
#pragma once

#include <cmath>
#include <vector>

namespace vwt::report::detail {

inline double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size());
}
inline double sample_stdev(const std::vector<double>& v) {
    if (v.size() < 2) return 0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size() - 1));
}

}  // namespace vwt::report::detail
