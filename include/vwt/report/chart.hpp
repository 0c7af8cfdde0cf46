// A line chart as SVG: named series of (x, y) points on shared axes, one colour each, with a
// legend. Every label goes through xml_text.
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "schedule_report.hpp"
#include "text.hpp"

namespace vwt::report {

struct chart_series {
    std::string name;
    std::vector<std::pair<double, double>> points;  // (x, y); non-finite y are left out
};

inline std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::vector<chart_series>& series) {
    double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
    for (const auto& s : series)
        for (const auto& [x, y] : s.points)
            if (std::isfinite(x) && std::isfinite(y)) x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    if (x_lo > x_hi) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
    if (y_hi - y_lo < 1e-12) y_lo -= 0.5, y_hi += 0.5;
    if (x_hi - x_lo < 1e-12) x_hi = x_lo + 1;
    const double W = 640, H = 400, L = 64, B = 44, T = 30, R = 20;
    const auto px = [&](double x) { return L + (W - L - R) * (x - x_lo) / (x_hi - x_lo); };
    const auto py = [&](double y) { return T + (H - T - B) * (y_hi - y) / (y_hi - y_lo); };
    std::ostringstream o;
    o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"11\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">" << xml_text(title) << "</text>\n"
      << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" stroke=\"black\"/>"
      << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n";
    const int decimals = y_hi - y_lo >= 20 ? 0 : y_hi - y_lo >= 2 ? 1 : 3;
    for (int i = 0; i <= 4; ++i) {
        const double y = y_lo + (y_hi - y_lo) * i / 4;
        o << "<text x=\"" << L - 4 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << xml_text(detail::fixed(y, decimals)) << "</text>\n";
    }
    // x ticks: whole numbers (layers, steps) when the range starts at one, else four intervals
    const bool whole = std::floor(x_lo) == x_lo && x_hi - x_lo >= 1;
    const double x_step = whole ? std::max(1.0, std::ceil((x_hi - x_lo) / 10)) : (x_hi - x_lo) / 4;
    for (double x = x_lo; x <= x_hi + 1e-9 * (x_hi - x_lo); x += x_step)
        o << "<text x=\"" << px(x) << "\" y=\"" << H - B + 14 << "\" text-anchor=\"middle\">" << xml_text(detail::fixed(x, whole ? 0 : 2))
          << "</text>\n";
    o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">" << xml_text(x_label) << "</text>\n";
    static constexpr const char* colours[] = {"#c0392b", "#2c3e50", "#27ae60", "#8e44ad", "#d68910", "#2980b9"};
    for (std::size_t k = 0; k < series.size(); ++k) {
        const char* colour = colours[k % std::size(colours)];
        o << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.5\" points=\"";
        for (const auto& [x, y] : series[k].points)
            if (std::isfinite(x) && std::isfinite(y)) o << px(x) << ',' << py(y) << ' ';
        o << "\"/>\n";
        for (const auto& [x, y] : series[k].points)
            if (std::isfinite(x) && std::isfinite(y)) o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2.5\" fill=\"" << colour << "\"/>";
        o << "\n<text x=\"" << W - R - 150 << "\" y=\"" << T + 14 * static_cast<double>(k + 1) << "\" fill=\"" << colour << "\">"
          << xml_text(series[k].name) << "</text>\n";
    }
    o << "</svg>\n";
    return o.str();
}

}  // namespace vwt::report
