// `vwt analyze`: the paper's representation analysis, per layer, for one or more models side by
// side (a ><former and its uniform twin): statistics of the residual stream and of the MLP
// activations over windows of a corpus's held-out tail (vwt::analysis; definitions in
// docs/analysis.md), as JSON, a Markdown table and one SVG chart per statistic.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include <vwt/experiments/analysis.hpp>
#include <vwt/io/atomic_file.hpp>
#include <vwt/io/load_model.hpp>
#include <vwt/report/chart.hpp>
#include <vwt/train/data.hpp>

#include "commands.hpp"
#include "device_flags.hpp"
#include "schedule_flags.hpp"

namespace vwt::cli {

namespace {

struct analyze_options {
    std::vector<std::string> models, labels;
    std::string data, format = "text", out;
    int seq = 128, windows = 64, batch = 8;
    double validation = 0.1;
    bool json = false;
    device_flags device;
};

// The statistics in the report, in order: the JSON key and the chart's title.
struct metric {
    const char* key;
    const char* title;
    double analysis::layer_statistics::*field;
};
constexpr metric metrics[] = {
    {"participation_ratio", "participation ratio of the residual stream (at the layer's width)", &analysis::layer_statistics::participation_ratio},
    {"effective_rank", "effective rank of the residual stream (at the layer's width)", &analysis::layer_statistics::effective_rank},
    {"cosine_previous", "cosine: stream after the layer vs after the previous one", &analysis::layer_statistics::cosine_previous},
    {"cosine_layer", "cosine: the layer's columns after vs before it", &analysis::layer_statistics::cosine_layer},
    {"rms", "RMS of the residual stream (at the layer's width)", &analysis::layer_statistics::rms},
    {"max_abs", "largest |coordinate| of the residual stream", &analysis::layer_statistics::max_abs},
    {"mlp_ever_active", "MLP units ever active (gate > 0)", &analysis::layer_statistics::mlp_ever_active},
    {"mlp_active_fraction", "MLP units active per token", &analysis::layer_statistics::mlp_active_fraction},
    {"mlp_entropy", "MLP activation entropy (share of |u silu(g)|, normalised)", &analysis::layer_statistics::mlp_entropy},
};

nlohmann::ordered_json number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); }

void run_analyze(const analyze_options& o) {
    if (o.models.empty()) detail::fail("--model: give at least one");
    if (!o.labels.empty() && o.labels.size() != o.models.size())
        detail::fail("--label: give one per --model (", o.models.size(), "), got ", o.labels.size());
    if (o.seq < 1 || o.windows < 1 || o.batch < 1) detail::fail("--seq, --windows and --batch must be at least 1");
    nlohmann::ordered_json report = {{"data", o.data}, {"seq", o.seq}, {"validation", o.validation}, {"models", nlohmann::ordered_json::array()}};
    for (std::size_t i = 0; i < o.models.size(); ++i) {
        const std::string dir = model_dir(o.models[i]);
        const auto config = io::read_model_config(dir);
        if (o.seq > config.schedule.dims.context)
            detail::fail("--seq: ", o.seq, " is above the context of ", config.schedule.dims.context, " of model '", dir, "'");
        auto tokens = train::read_tokens(o.data, parse_token_format(o.format), config.schedule.dims.vocab);
        const train::window_loader data(std::move(tokens), o.seq, o.validation, 0, o.data);
        const auto count = std::min<std::size_t>(static_cast<std::size_t>(o.windows), data.validation_windows());
        if (count == 0) detail::fail("--data '", o.data, "': no held-out window of ", o.seq, " tokens (--validation ", o.validation, ")");
        std::vector<std::vector<int>> windows(count);
        std::vector<int> targets;
        for (std::size_t w = 0; w < count; ++w) data.validation_window(w, windows[w], targets);
        std::vector<analysis::layer_statistics> stats;
        o.device.run([&]<class B>(const typename B::context& ctx) {
            if constexpr (host_accessible_memory<typename B::memory>) {
                const auto m = io::load_model<B>(dir, ctx);
                stats = analysis::analyze(ctx, m, windows, o.batch);
            } else {
                detail::fail("--device: vwt analyze reads the activations in place and runs on the CPU (--device cpu)");
            }
        });
        nlohmann::ordered_json layers = nlohmann::ordered_json::array();
        for (const auto& s : stats) {
            nlohmann::ordered_json l = {{"layer", s.layer + 1}, {"width", s.width}};
            for (const auto& m : metrics) l[m.key] = number(s.*m.field);
            layers.push_back(l);
        }
        std::string label = o.labels.empty() ? std::filesystem::path(o.models[i]).lexically_normal().filename().string() : o.labels[i];
        if (label.empty()) label = "model " + std::to_string(i + 1);
        report["models"].push_back({{"label", label}, {"model", dir}, {"windows", count}, {"tokens", count * static_cast<std::size_t>(o.seq)},
                                    {"layers", layers}});
    }
    if (o.json || o.out.empty()) std::cout << report.dump(o.json ? -1 : 1) << '\n';
    if (o.out.empty()) return;
    std::filesystem::create_directories(o.out);
    io::write_file_atomic(std::filesystem::path(o.out) / "analysis.json", report.dump(1) + "\n");
    std::string md = "# vwt analyze\n\nCorpus `" + report::valid_utf8(o.data) + "`, held-out tail, windows of " + std::to_string(o.seq) + " tokens.\n";
    for (const auto& m : metrics) {
        std::vector<report::chart_series> series;
        for (const auto& model : report["models"]) {
            report::chart_series s{model["label"].get<std::string>(), {}};
            for (const auto& l : model["layers"])
                s.points.emplace_back(l["layer"].get<double>(), l[m.key].is_null() ? std::nan("") : l[m.key].get<double>());
            series.push_back(std::move(s));
        }
        io::write_file_atomic(std::filesystem::path(o.out) / (std::string(m.key) + ".svg"), report::line_chart_svg(m.title, "layer", series));
        md += std::string("\n![") + m.key + "](" + m.key + ".svg)";
    }
    md += "\n";
    for (const auto& model : report["models"]) {
        md += "\n## " + model["label"].get<std::string>() + " (" + std::to_string(model["tokens"].get<std::size_t>()) + " tokens)\n\n| layer | width |";
        for (const auto& m : metrics) md += std::string(" ") + m.key + " |";
        md += "\n|---|---|";
        for (std::size_t k = 0; k < std::size(metrics); ++k) md += "---|";
        md += "\n";
        for (const auto& l : model["layers"]) {
            md += "| " + std::to_string(l["layer"].get<int>()) + " | " + std::to_string(l["width"].get<int>()) + " |";
            for (const auto& m : metrics) md += " " + (l[m.key].is_null() ? std::string("-") : report::detail::fixed(l[m.key].get<double>(), 4)) + " |";
            md += "\n";
        }
    }
    io::write_file_atomic(std::filesystem::path(o.out) / "report.md", md);
}

}  // namespace

void add_analyze_command(CLI::App& app) {
    auto o = std::make_shared<analyze_options>();
    auto* cmd = app.add_subcommand("analyze", "per-layer statistics of the residual stream and MLP activations, models side by side");
    cmd->add_option("--model", o->models, std::string(model_dir_help) + "; repeat to compare models")->required();
    cmd->add_option("--label", o->labels, "a name per --model for the report (default: the directory's name)");
    cmd->add_option("--data", o->data, "corpus file")->required();
    cmd->add_option("--format", o->format, "text, u16 or u32");
    cmd->add_option("--seq", o->seq, "tokens per window");
    cmd->add_option("--windows", o->windows, "held-out windows to read (at most)");
    cmd->add_option("--validation", o->validation, "held-out fraction at the end of the corpus");
    cmd->add_option("--batch", o->batch, "windows per forward pass");
    cmd->add_option("--out", o->out, "directory for analysis.json, report.md and one SVG per statistic");
    cmd->add_flag("--json", o->json, "print the report as one line of JSON");
    o->device.add_to(*cmd);
    cmd->callback([o] { run_analyze(*o); });
}

}  // namespace vwt::cli
