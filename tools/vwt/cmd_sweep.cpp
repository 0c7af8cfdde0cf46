// `vwt sweep`: the paper's shape sweep (its Figure 2). Every shape of a list is solved to the same
// parameter budget (the uniform model of width h), trained for every seed on the same windows in
// the same order (experiments::train_run, the recipe of `vwt compare`), and reported together:
// report.json, report.md (final validation loss mean +- std per shape), val_loss.svg (each shape's
// curve, mean over seeds) and schedules.svg. Each finished run is kept in OUT/runs/SHAPE-seedN
// (the model and result.json), so an interrupted sweep continues where it stopped, and more seeds
// or shapes can be added later; OUT/sweep.json holds the recipe, which a continuation must repeat.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include <vwt/experiments/compare.hpp>
#include <vwt/io/atomic_file.hpp>
#include <vwt/report/chart.hpp>
#include <vwt/report/statistics.hpp>

#include "commands.hpp"
#include "compare_run.hpp"
#include "device_flags.hpp"
#include "progress.hpp"
#include "schedule_flags.hpp"

namespace vwt::cli {

namespace {

using json = nlohmann::ordered_json;

struct sweep_options {
    compare_flags run;  // the schedule flags, the recipe and --out (its prompt and samples unused)
    std::vector<std::string> shapes{"x", "diamond", "increasing", "decreasing", "uniform", "shuffled"};
    bool quiet = false, json = false;
    device_flags device;
};

// A shape of the sweep: one of the schedule flags' shapes, "shuffled" (the x shape with its middle
// widths in a seeded random order, --permute-seed) or "constant" (the constant-residual baseline:
// the x shape's widths inside a fixed-width stream, solved for it).
dynamic_schedule shape_schedule(const schedule_flags& flags, const std::string& shape) {
    auto f = flags;
    if (shape == "shuffled") f.shape_name = "x", f.permute = "shuffle";
    else if (shape == "constant") f.shape_name = "x", f.permute = "none", f.fixed_residual_width = true;
    else f.shape_name = shape, f.permute = "none";
    std::string name;
    int base = 0;
    try {
        return f.build(name, base);
    } catch (const error& e) {
        detail::fail("--shapes: ", shape, ": ", e.what());
    }
}

void run_sweep(const sweep_options& options) {
    const compare_flags& o = options.run;
    if (!o.schedule.widths.empty()) detail::fail("--widths: a sweep solves each shape's widths (give --shapes)");
    if (o.schedule.permute != "none") detail::fail("--permute: a sweep has its own permuted shape ('shuffled' in --shapes)");
    const auto& shapes = options.shapes;
    if (shapes.empty()) detail::fail("--shapes: give at least one");
    if (o.seeds.empty()) detail::fail("--seeds: give at least one seed");
    if (o.steps < 1) detail::fail("--steps: must be at least 1");
    std::map<std::string, dynamic_schedule> schedules;
    for (const auto& shape : shapes) {
        if (schedules.count(shape)) detail::fail("--shapes: '", shape, "' is listed twice");
        schedules.emplace(shape, shape_schedule(o.schedule, shape));
    }
    const auto& first = schedules.at(shapes.front());
    if (o.seq > first.dims.context) detail::fail("--seq: ", o.seq, " is above the model's context of ", first.dims.context);
    const std::filesystem::path out = o.out;
    json recipe = {{"data", o.data}, {"format", o.format}, {"steps", o.steps}, {"batch", o.batch}, {"seq", o.seq}, {"lr", o.lr},
                         {"eval_every", o.eval_every}, {"validation", o.validation}, {"hidden", first.dims.hidden}, {"layers", first.dims.layers}};
    // the resize method of every shape (recorded when it is not the paper's move_up)
    if (o.schedule.resize != "move_up") recipe["resize"] = o.schedule.resize;
    const auto recipe_file = out / "sweep.json";
    if (std::filesystem::exists(recipe_file)) {
        std::ifstream in(recipe_file);
        const json kept = json::parse(in, nullptr, false);
        if (kept.is_discarded() || !kept.contains("recipe")) detail::fail("--out: ", recipe_file.string(), " is not a sweep's record");
        auto keys = recipe;
        keys.update(kept["recipe"]);  // a key either recipe has (an absent resize is move_up)
        for (const auto& [key, unused] : keys.items())
            if (kept["recipe"].value(key, json()) != recipe.value(key, json()))
                detail::fail("--out: ", out.string(), " holds a sweep with ", key, " ", kept["recipe"].value(key, json()).dump(), ", not ",
                             recipe.value(key, json()).dump(), " (a continuation repeats the recipe; start another --out for a new one)");
    }
    std::filesystem::create_directories(out / "runs");
    io::write_file_atomic(recipe_file, json{{"recipe", recipe}}.dump(1) + "\n");

    const auto tokens = train::read_tokens(o.data, parse_token_format(o.format), first.dims.vocab);
    const auto c = recipe_options(o);
    progress_display progress(options.quiet);
    json report = {{"recipe", recipe}, {"seeds", o.seeds}, {"shapes", json::array()}};
    std::vector<report::chart_series> curves, widths;
    std::string table = "| shape | widths | params | FLOPs/token | KV bytes/token | final validation loss (mean ± std) | runs |\n|---|---|---|---|---|---|---|\n";
    for (const auto& shape : shapes) {
        const auto& s = schedules.at(shape);
        std::vector<double> finals;
        std::map<std::int64_t, std::vector<double>> curve;  // step -> losses over seeds
        for (const auto seed : o.seeds) {
            const auto dir = out / "runs" / (shape + "-seed" + std::to_string(seed));
            const auto result_file = dir / "result.json";
            json result;
            if (std::filesystem::exists(result_file)) {  // done in an earlier invocation
                std::ifstream in(result_file);
                result = json::parse(in, nullptr, false);
                if (result.is_discarded() || result.value("widths", std::vector<int>{}) != s.widths)
                    detail::fail("--out: ", result_file.string(), " is not this sweep's run of ", shape, " (widths ", report::joined(s.widths), ")");
                progress.note(shape + " seed " + std::to_string(seed) + ": kept from an earlier run");
            } else {
                auto config = o.schedule.model(s, false);
                experiments::run_result r;
                options.device.run([&]<class B>(const typename B::context& ctx) {
                    r = experiments::train_run<B>(ctx, config, tokens, seed, c, false, dir, [&](const train::step_report& st) {
                        std::ostringstream line;
                        line << shape << " seed " << seed << ": " << progress_bar(double(st.step), double(o.steps)) << " step " << st.step << "/"
                             << o.steps << " loss " << st.loss;
                        progress.update(line.str(), st.step == o.steps);
                    });
                });
                result = {{"shape", shape}, {"seed", seed}, {"widths", s.widths}, {"final_validation_loss", r.final_loss},
                          {"tokens_per_second", r.tokens_per_second}, {"curve", r.curve}};
                io::write_file_atomic(result_file, result.dump(1) + "\n");
                progress.note(shape + " seed " + std::to_string(seed) + ": validation loss " + std::to_string(r.final_loss));
            }
            finals.push_back(result["final_validation_loss"].get<double>());
            for (const auto& point : result["curve"]) curve[point[0].get<std::int64_t>()].push_back(point[1].get<double>());
        }
        const auto costs = account(o.schedule.model(s, false), {o.seq, 2, 4});
        const double mean = report::detail::mean(finals), stdev = report::detail::sample_stdev(finals);
        report["shapes"].push_back({{"shape", shape}, {"widths", s.widths}, {"params", costs.params.total()},
                                    {"flops_per_token", costs.flops_per_token}, {"kv_bytes_per_token", costs.kv_bytes_per_token},
                                    {"final_validation_loss", finals}, {"final_validation_loss_mean", mean},
                                    {"final_validation_loss_std", stdev}});
        table += "| " + shape + " | " + report::joined(s.widths) + " | " + std::to_string(costs.params.total()) + " | " +
                 report::detail::fixed(costs.flops_per_token, 0) + " | " + std::to_string(costs.kv_bytes_per_token) + " | " +
                 report::detail::fixed(mean, 4) + " ± " + report::detail::fixed(stdev, 4) + " | " + std::to_string(finals.size()) + " |\n";
        report::chart_series line{shape, {}}, schedule{shape, {}};
        for (const auto& [step, losses] : curve) line.points.emplace_back(double(step), report::detail::mean(losses));
        for (std::size_t i = 0; i < s.widths.size(); ++i) schedule.points.emplace_back(double(i + 1), double(s.widths[i]));
        curves.push_back(std::move(line));
        widths.push_back(std::move(schedule));
    }
    progress.finish();
    std::ostringstream md;
    md << "# vwt sweep\n\nCorpus `" << report::valid_utf8(o.data) << "`, every shape solved to the parameters of the uniform model of width "
       << first.dims.hidden << " (L " << first.dims.layers << "), " << o.steps << " steps of " << o.batch << " x " << o.seq << " tokens, lr "
       << o.lr << " (cosine), seeds";
    for (auto s : o.seeds) md << ' ' << s;
    md << "; the same windows in the same order for every shape of a seed";
    if (o.schedule.resize != "move_up") md << "; resize " << o.schedule.resize;
    md << ".\n\n"
       << table << "\n![validation loss](val_loss.svg)\n![schedules](schedules.svg)\n";
    io::write_file_atomic(out / "report.json", report.dump(1) + "\n");
    io::write_file_atomic(out / "report.md", md.str());
    io::write_file_atomic(out / "val_loss.svg", report::line_chart_svg("validation loss (mean over seeds)", "step", curves));
    io::write_file_atomic(out / "schedules.svg", report::line_chart_svg("width schedules", "layer", widths));
    if (options.json) std::cout << report.dump() << '\n';
    else std::cout << md.str();
}

}  // namespace

void add_sweep_command(CLI::App& app) {
    auto o = std::make_shared<sweep_options>();
    auto* cmd = app.add_subcommand("sweep", "train several shapes at one parameter budget, several seeds, resumable, one report");
    o->run.schedule.add_to(*cmd);
    cmd->add_option("--shapes", o->shapes, "shapes, comma separated: x, diamond, increasing, decreasing, uniform, shuffled (x, middle widths shuffled), "
                    "constant (x in a fixed-width residual stream)")
        ->delimiter(',');
    add_recipe_flags(*cmd, o->run);
    cmd->add_option("--out", o->run.out, "output directory (a sweep there continues)")->required();
    cmd->add_flag("--quiet", o->quiet, "no progress on stderr");
    cmd->add_flag("--json", o->json, "print report.json's content instead of report.md");
    o->device.add_to(*cmd);
    cmd->callback([o] { run_sweep(*o); });
}

}  // namespace vwt::cli
