// `vwt fit`: scaling curves L(x) = a x^-b + c for the ><former and its uniform twin over the
// reports of several `vwt compare` runs (one per model size), x the training FLOPs or the KV bytes
// per token, and the savings at matched loss with a bootstrap interval over the seeds (the
// paper's Table 2). Definitions in README "vwt fit".
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include <vwt/error.hpp>
#include <vwt/experiments/scaling_fit.hpp>
#include <vwt/io/atomic_file.hpp>
#include <vwt/report/chart.hpp>
#include <vwt/report/statistics.hpp>

#include "commands.hpp"

namespace vwt::cli {

namespace {

using json = nlohmann::ordered_json;
using experiments::power_law_fit;

struct fit_options {
    std::vector<std::string> reports;
    std::string out;
    int bootstrap = 2000;
    std::uint64_t seed = 0;
    bool json = false;
};

// One model size of one shape: its costs and the final validation loss of each seed.
struct size_point {
    double flops = 0;  // training FLOPs: 3 x forward FLOPs per token x tokens trained
    double kv = 0;     // KV cache bytes per token
    std::vector<double> losses;
};

constexpr const char* shapes[] = {"xformer", "uniform"};
constexpr const char* shape_names[] = {"><former", "uniform"};

// The four fits (shape x axis) of one set of losses per size.
struct curves {
    power_law_fit fit[2][2];  // [shape][0: FLOPs, 1: KV]
};

curves fit_all(const std::vector<size_point> (&points)[2], const std::vector<double> (&losses)[2]) {
    curves c;
    for (int s = 0; s < 2; ++s) {
        std::vector<double> flops, kv;
        for (const auto& p : points[s]) flops.push_back(p.flops), kv.push_back(p.kv);
        c.fit[s][0] = experiments::fit_power_law(flops, losses[s]);
        c.fit[s][1] = experiments::fit_power_law(kv, losses[s]);
    }
    return c;
}

// At each uniform size's fitted loss: 1 - (><former's x) / (uniform's x) on each axis.
std::vector<std::array<double, 2>> savings(const curves& c, const std::vector<size_point>& uniform) {
    std::vector<std::array<double, 2>> out;
    for (const auto& p : uniform) {
        std::array<double, 2> s{};
        for (int axis = 0; axis < 2; ++axis) {
            const double x_uniform = axis == 0 ? p.flops : p.kv;
            const double target = c.fit[1][axis].loss(x_uniform);
            s[static_cast<std::size_t>(axis)] = 1 - c.fit[0][axis].x_at(target) / x_uniform;
        }
        out.push_back(s);
    }
    return out;
}

json fit_json(const power_law_fit& f) { return {{"a", f.a}, {"b", f.b}, {"c", f.c}, {"x_scale", f.x_scale}, {"sse", f.sse}}; }

double percentile(std::vector<double> v, double q) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    if (v.empty()) return std::nan("");
    std::sort(v.begin(), v.end());
    const double at = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(at));
    const auto hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

std::string percent(double v) { return std::isfinite(v) ? report::detail::fixed(100 * v, 1) + "%" : "n/a"; }

void run_fit(const fit_options& o) {
    if (o.reports.size() < 3) detail::fail("--report: give three sizes at least (the curve has three parameters), got ", o.reports.size());
    if (o.bootstrap < 0) detail::fail("--bootstrap: must be >= 0, got ", o.bootstrap);
    std::vector<size_point> points[2];
    std::string data;
    for (const auto& path : o.reports) {
        std::ifstream in(path);
        if (!in) detail::fail("--report '", path, "': cannot be read");
        const json r = json::parse(in, nullptr, false);
        if (r.is_discarded() || !r.is_object()) detail::fail("--report '", path, "': not JSON (a `vwt compare` report.json)");
        try {
            const double tokens = r.at("steps").get<double>() * r.at("batch").get<double>() * r.at("seq").get<double>();
            if (data.empty()) data = r.at("data").get<std::string>();
            else if (r.at("data").get<std::string>() != data)
                detail::fail("--report '", path, "': trained on '", r.at("data").get<std::string>(), "', the others on '", data, "'");
            for (int s = 0; s < 2; ++s) {
                const auto& m = r.at(shapes[s]);
                size_point p{3 * m.at("flops_per_token").get<double>() * tokens, m.at("kv_bytes_per_token").get<double>(),
                             m.at("final_validation_loss").get<std::vector<double>>()};
                if (p.losses.empty()) detail::fail("--report '", path, "': no final validation loss for the ", shape_names[s]);
                points[s].push_back(std::move(p));
            }
        } catch (const json::exception& e) {
            detail::fail("--report '", path, "': not a `vwt compare` report (", e.what(), ")");
        }
    }
    std::vector<double> means[2];
    for (int s = 0; s < 2; ++s)
        for (const auto& p : points[s]) means[s].push_back(report::detail::mean(p.losses));
    const curves fitted = fit_all(points, means);
    const auto point = savings(fitted, points[1]);

    // Bootstrap: each size's seeds drawn with replacement, per shape; every fit and saving again.
    std::mt19937_64 rng(o.seed);
    std::vector<std::vector<std::array<double, 2>>> draws;
    for (int k = 0; k < o.bootstrap; ++k) {
        std::vector<double> resampled[2];
        for (int s = 0; s < 2; ++s)
            for (const auto& p : points[s]) {
                std::uniform_int_distribution<std::size_t> pick(0, p.losses.size() - 1);
                double sum = 0;
                for (std::size_t i = 0; i < p.losses.size(); ++i) sum += p.losses[pick(rng)];
                resampled[s].push_back(sum / static_cast<double>(p.losses.size()));
            }
        draws.push_back(savings(fit_all(points, resampled), points[1]));
    }

    json report = {{"data", data}, {"reports", o.reports}, {"bootstrap", o.bootstrap}, {"seed", o.seed}, {"points", json::array()},
                   {"fits", json::object()}, {"savings", json::array()}};
    for (int s = 0; s < 2; ++s)
        for (std::size_t i = 0; i < points[s].size(); ++i)
            report["points"].push_back({{"shape", shapes[s]}, {"report", o.reports[i]}, {"training_flops", points[s][i].flops},
                                        {"kv_bytes_per_token", points[s][i].kv}, {"final_validation_loss", points[s][i].losses},
                                        {"mean", means[s][i]}});
    for (int s = 0; s < 2; ++s) report["fits"][shapes[s]] = {{"flops", fit_json(fitted.fit[s][0])}, {"kv", fit_json(fitted.fit[s][1])}};
    std::string table = "| uniform size (report) | matched loss | FLOP saving | 95% CI | KV saving | 95% CI | within the ><former's measured FLOPs |\n|---|---|---|---|---|---|---|\n";
    for (std::size_t i = 0; i < point.size(); ++i) {
        json row = {{"report", o.reports[i]}, {"target_loss", fitted.fit[1][0].loss(points[1][i].flops)}};
        const char* axis_name[] = {"flops", "kv"};
        std::string cells;
        for (std::size_t axis = 0; axis < 2; ++axis) {
            std::vector<double> v;
            for (const auto& d : draws) v.push_back(d[i][axis]);
            const double lo = percentile(v, 0.025), hi = percentile(v, 0.975);
            row[std::string(axis_name[axis]) + "_saving"] = std::isfinite(point[i][axis]) ? json(point[i][axis]) : json(nullptr);
            row[std::string(axis_name[axis]) + "_ci95"] = {std::isfinite(lo) ? json(lo) : json(nullptr), std::isfinite(hi) ? json(hi) : json(nullptr)};
            cells += percent(point[i][axis]) + " | " + percent(lo) + " .. " + percent(hi) + " | ";
        }
        // extrapolated: the ><former's FLOPs at the matched loss lie outside the sizes it was trained at
        double lo_flops = 1e300, hi_flops = 0;
        for (const auto& p : points[0]) lo_flops = std::min(lo_flops, p.flops), hi_flops = std::max(hi_flops, p.flops);
        const double at = fitted.fit[0][0].x_at(row["target_loss"].get<double>());
        row["interpolated"] = at >= lo_flops && at <= hi_flops;
        report["savings"].push_back(row);
        table += "| " + std::filesystem::path(o.reports[i]).parent_path().filename().string() + " | " +
                 report::detail::fixed(row["target_loss"].get<double>(), 4) + " | " + cells + (row["interpolated"].get<bool>() ? "yes" : "no") + " |\n";
    }
    if (o.json || o.out.empty()) std::cout << report.dump(o.json ? -1 : 1) << '\n';
    if (o.out.empty()) return;
    std::filesystem::create_directories(o.out);
    io::write_file_atomic(std::filesystem::path(o.out) / "fit.json", report.dump(1) + "\n");
    // charts: measured mean losses and the fitted curves, against log10 of each axis
    const char* files[] = {"loss_vs_flops.svg", "loss_vs_kv.svg"};
    const char* titles[] = {"final validation loss vs training FLOPs (log10)", "final validation loss vs KV bytes per token (log10)"};
    for (int axis = 0; axis < 2; ++axis) {
        std::vector<report::chart_series> series;
        for (int s = 0; s < 2; ++s) {
            report::chart_series measured{std::string(shape_names[s]) + " (mean over seeds)", {}}, curve{std::string(shape_names[s]) + " fit", {}};
            double lo = 1e300, hi = 0;
            for (std::size_t i = 0; i < points[s].size(); ++i) {
                const double x = axis == 0 ? points[s][i].flops : points[s][i].kv;
                measured.points.emplace_back(std::log10(x), means[s][i]);
                lo = std::min(lo, x), hi = std::max(hi, x);
            }
            for (int k = 0; k <= 40; ++k) {
                const double x = lo * std::pow(hi / lo, k / 40.0);
                curve.points.emplace_back(std::log10(x), fitted.fit[s][axis].loss(x));
            }
            std::sort(measured.points.begin(), measured.points.end());
            series.push_back(std::move(measured));
            series.push_back(std::move(curve));
        }
        io::write_file_atomic(std::filesystem::path(o.out) / files[axis], report::line_chart_svg(titles[axis], "log10", series));
    }
    std::string md = "# vwt fit\n\nL(x) = a x^-b + c fitted by least squares to the mean final validation loss over seeds of each size, per shape, "
                     "x the training FLOPs (3 x forward FLOPs per token x tokens) or the KV bytes per token; savings at the uniform model's "
                     "fitted loss at each of its sizes: 1 - x(><former) / x(uniform); 95% intervals from " +
                     std::to_string(o.bootstrap) + " bootstrap draws of the seeds.\n\n| shape | axis | a | b | c |\n|---|---|---|---|---|\n";
    for (int s = 0; s < 2; ++s)
        for (int axis = 0; axis < 2; ++axis) {
            const auto& f = fitted.fit[s][axis];
            md += std::string("| ") + shape_names[s] + " | " + (axis == 0 ? "FLOPs" : "KV") + " | " + report::detail::fixed(f.a, 4) + " | " +
                  report::detail::fixed(f.b, 4) + " | " + report::detail::fixed(f.c, 4) + " |\n";
        }
    md += "\n" + table + "\n![loss vs FLOPs](loss_vs_flops.svg)\n![loss vs KV](loss_vs_kv.svg)\n";
    io::write_file_atomic(std::filesystem::path(o.out) / "report.md", md);
}

}  // namespace

void add_fit_command(CLI::App& app) {
    auto o = std::make_shared<fit_options>();
    auto* cmd = app.add_subcommand("fit", "fit loss scaling curves over `vwt compare` runs of several sizes; savings at matched loss");
    cmd->add_option("--report", o->reports, "a `vwt compare` report.json, one per model size (three or more)")->required();
    cmd->add_option("--bootstrap", o->bootstrap, "bootstrap draws over the seeds for the intervals");
    cmd->add_option("--seed", o->seed, "the bootstrap's random seed");
    cmd->add_option("--out", o->out, "directory for fit.json, report.md and the charts");
    cmd->add_flag("--json", o->json, "print the report as one line of JSON");
    cmd->callback([o] { run_fit(*o); });
}

}  // namespace vwt::cli
