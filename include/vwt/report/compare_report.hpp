// The report of a comparison (experiments/compare.hpp): report.json, report.md and the
// validation-loss curves as SVG; every text through one escaping function, samples valid UTF-8.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../accounting.hpp"
#include "../experiments/compare.hpp"
#include "schedule_report.hpp"
#include "statistics.hpp"
#include "text.hpp"

namespace vwt::report {

struct compare_report_input {
    const experiments::compare_result* result = nullptr;
    const experiments::compare_options* options = nullptr;
    std::string data;                                     // the corpus's name
    std::vector<std::string> samples[2];                  // decoded samples (first seed), any bytes
};

inline nlohmann::ordered_json compare_report_json(const compare_report_input& in) {
    const auto& r = *in.result;
    const auto& o = *in.options;
    nlohmann::ordered_json report;
    report["data"] = valid_utf8(in.data);
    report["seeds"] = o.seeds;
    report["steps"] = o.train.steps;
    report["batch"] = o.train.batch;
    report["seq"] = o.sequence_length;
    report["lr"] = o.train.lr.lr;
    for (int m = 0; m < 2; ++m) {
        const auto& s = r.configs[m].schedule;
        const auto costs = account(r.configs[m], {o.sequence_length, 2, 4});
        std::vector<double> finals, speeds;
        for (const auto& run : r.runs[m]) finals.push_back(run.final_loss), speeds.push_back(run.tokens_per_second);
        auto& j = report[experiments::compared_model_slug(m)];
        j["widths"] = s.widths;
        j["params"] = costs.params.total();
        j["flops_per_token"] = costs.flops_per_token;
        j["kv_bytes_per_token"] = costs.kv_bytes_per_token;
        j["final_validation_loss"] = finals;
        j["final_validation_loss_mean"] = detail::mean(finals);
        j["final_validation_loss_std"] = detail::sample_stdev(finals);
        j["tokens_per_second"] = detail::mean(speeds);
        auto& curves = j["curves"] = nlohmann::ordered_json::array();
        for (const auto& run : r.runs[m]) curves.push_back(run.curve);
    }
    report["xformer_minus_uniform"] = report["xformer"]["final_validation_loss_mean"].get<double>() -
                                      report["uniform"]["final_validation_loss_mean"].get<double>();
    return report;
}

inline std::string compare_report_markdown(const compare_report_input& in) {
    const auto& r = *in.result;
    const auto& o = *in.options;
    const auto j = compare_report_json(in);
    std::ostringstream md;
    md << "# vwt compare\n\nCorpus `" << valid_utf8(in.data) << "`, " << o.train.steps << " steps of " << o.train.batch << " x "
       << o.sequence_length << " tokens, lr " << o.train.lr.lr << " (cosine), seeds";
    for (auto s : o.seeds) md << ' ' << s;
    md << ".\n\n| model | widths | params | FLOPs/token | KV bytes/token | final validation loss (mean ± std) | tokens/s |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (int m = 0; m < 2; ++m) {
        const auto& e = j[experiments::compared_model_slug(m)];
        md << "| " << experiments::compared_model_name(m) << " | " << joined(r.configs[m].schedule.widths) << " | " << e["params"].get<long long>() << " | "
           << detail::fixed(e["flops_per_token"].get<double>(), 0) << " | " << e["kv_bytes_per_token"].get<long long>() << " | "
           << detail::fixed(e["final_validation_loss_mean"].get<double>(), 4) << " ± "
           << detail::fixed(e["final_validation_loss_std"].get<double>(), 4) << " | "
           << detail::fixed(e["tokens_per_second"].get<double>(), 0) << " |\n";
    }
    md << "\n><former minus uniform: " << detail::fixed(j["xformer_minus_uniform"].get<double>(), 4)
       << " nats.\n\n![validation loss](val_loss.svg)\n![schedules](schedules.svg)\n";
    for (int m = 0; m < 2; ++m)
        if (!in.samples[m].empty())
            md << "\n## Sample from the " << experiments::compared_model_name(m) << " (seed " << o.seeds.front() << ")\n\n```\n"
               << valid_utf8(in.samples[m].front()) << "\n```\n";
    return md.str();
}

// Every run's validation-loss curve, one colour per model.
inline std::string loss_curves_svg(const experiments::compare_result& r) {
    double lo = 1e9, hi = -1e9, last_step = 1;
    for (const auto& model : r.runs)
        for (const auto& run : model)
            for (const auto& [s, l] : run.curve) lo = std::min(lo, l), hi = std::max(hi, l), last_step = std::max(last_step, double(s));
    if (lo > hi) lo = 0, hi = 1;
    const double W = 640, H = 400, L = 60, B = 40, T = 30, R = 20;
    const auto px = [&](double s) { return L + (W - L - R) * s / last_step; };
    const auto py = [&](double l) { return T + (H - T - B) * (hi - l) / std::max(1e-9, hi - lo); };
    std::ostringstream o;
    o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"11\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">" << xml_text("validation loss") << "</text>\n"
      << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" stroke=\"black\"/>"
      << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n";
    for (int i = 0; i <= 4; ++i) {
        const double l = lo + (hi - lo) * i / 4;
        o << "<text x=\"" << L - 4 << "\" y=\"" << py(l) + 4 << "\" text-anchor=\"end\">" << xml_text(detail::fixed(l, 3)) << "</text>\n";
    }
    o << "<text x=\"" << W - R << "\" y=\"" << H - 10 << "\" text-anchor=\"end\">" << xml_text(std::string("step ").append(detail::fixed(last_step, 0)))
      << "</text>\n";
    const char* colours[] = {"#c0392b", "#2c3e50"};
    for (int m = 0; m < 2; ++m) {
        for (const auto& run : r.runs[m]) {
            o << "<polyline fill=\"none\" stroke=\"" << colours[m] << "\" stroke-width=\"1.5\" points=\"";
            for (const auto& [s, l] : run.curve) o << px(double(s)) << ',' << py(l) << ' ';
            o << "\"/>\n";
        }
        o << "<text x=\"" << W - R - 120 << "\" y=\"" << T + 16 * (m + 1) << "\" fill=\"" << colours[m] << "\">"
          << xml_text(experiments::compared_model_name(m)) << "</text>\n";
    }
    o << "</svg>\n";
    return o.str();
}

}  // namespace vwt::report
