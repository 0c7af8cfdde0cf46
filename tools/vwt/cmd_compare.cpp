// `vwt compare`: trains the ><former and its parameter-matched uniform twin on the same data in
// the same order for each seed, and writes report.json, report.md and SVG plots.
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include <vwt/io/schedule_report.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

#include "commands.hpp"
#include "schedule_flags.hpp"

namespace vwt::cli {

namespace {

struct run_result {
    std::vector<std::pair<std::int64_t, double>> curve;  // (step, validation loss)
    double final_loss = 0, tokens_per_second = 0;
    std::string sample;
};

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size());
}
double stdev(const std::vector<double>& v) {
    if (v.size() < 2) return 0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size() - 1));
}

std::string curves_svg(const std::vector<std::vector<run_result>>& runs, const std::vector<std::string>& names) {
    double lo = 1e9, hi = -1e9, last_step = 1;
    for (const auto& model : runs)
        for (const auto& r : model)
            for (const auto& [s, l] : r.curve) lo = std::min(lo, l), hi = std::max(hi, l), last_step = std::max(last_step, double(s));
    const double W = 640, H = 400, L = 60, B = 40, T = 30, R = 20;
    const auto px = [&](double s) { return L + (W - L - R) * s / last_step; };
    const auto py = [&](double l) { return T + (H - T - B) * (hi - l) / std::max(1e-9, hi - lo); };
    std::ostringstream o;
    o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"11\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">validation loss</text>\n"
      << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" stroke=\"black\"/>"
      << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n";
    for (int i = 0; i <= 4; ++i) {
        const double l = lo + (hi - lo) * i / 4;
        o << "<text x=\"" << L - 4 << "\" y=\"" << py(l) + 4 << "\" text-anchor=\"end\">" << io::detail::fixed(l, 3) << "</text>\n";
    }
    o << "<text x=\"" << W - R << "\" y=\"" << H - 10 << "\" text-anchor=\"end\">step " << last_step << "</text>\n";
    const char* colours[] = {"#c0392b", "#2c3e50"};
    for (std::size_t m = 0; m < runs.size(); ++m) {
        for (const auto& r : runs[m]) {
            o << "<polyline fill=\"none\" stroke=\"" << colours[m % 2] << "\" stroke-width=\"1.5\" points=\"";
            for (const auto& [s, l] : r.curve) o << px(double(s)) << ',' << py(l) << ' ';
            o << "\"/>\n";
        }
        o << "<text x=\"" << W - R - 120 << "\" y=\"" << T + 16 * (m + 1) << "\" fill=\"" << colours[m % 2] << "\">" << io::xml_text(names[m])
          << "</text>\n";
    }
    o << "</svg>\n";
    return o.str();
}

}  // namespace

void add_compare_command(CLI::App& app) {
    struct options {
        schedule_flags schedule;
        std::string data, out, format = "text", prompt = "The ";
        std::vector<std::uint64_t> seeds{1, 2, 3};
        std::int64_t steps = 200, eval_every = 20;
        int batch = 8, seq = 128, threads = 1, sample_tokens = 120;
        double lr = 3e-3, validation = 0.1;
    };
    auto o = std::make_shared<options>();
    auto* cmd = app.add_subcommand("compare", "train the ><former and its uniform twin on the same data and report");
    o->schedule.add_to(*cmd);
    cmd->add_option("--data", o->data, "corpus file")->required();
    cmd->add_option("--format", o->format, "text, u16 or u32");
    cmd->add_option("--seeds", o->seeds, "seeds, comma separated")->delimiter(',');
    cmd->add_option("--steps", o->steps, "optimizer steps per run");
    cmd->add_option("--batch", o->batch, "sequences per step");
    cmd->add_option("--seq", o->seq, "sequence length");
    cmd->add_option("--lr", o->lr, "peak learning rate (cosine decay, 8% warmup)");
    cmd->add_option("--eval-every", o->eval_every, "steps between validation losses");
    cmd->add_option("--validation", o->validation, "held-out fraction at the end of the corpus");
    cmd->add_option("--threads", o->threads, "CPU threads");
    cmd->add_option("--prompt", o->prompt, "prompt of the samples in report.md");
    cmd->add_option("--sample-tokens", o->sample_tokens, "length of those samples");
    cmd->add_option("--out", o->out, "output directory")->required();
    cmd->callback([o] {
        std::string name;
        int base = 0;
        const auto x = o->schedule.build(name, base);
        if (o->seq > x.dims.context) detail::fail("--seq: ", o->seq, " is above the model's context of ", x.dims.context);
        if (o->seeds.empty()) detail::fail("--seeds: give at least one seed");
        const dynamic_schedule schedules[] = {x, uniform_twin(x)};
        const std::vector<std::string> names = {"><former", "uniform"};
        const auto tokens = train::read_tokens(o->data, parse_token_format(o->format), x.dims.vocab);
        std::filesystem::create_directories(o->out);
        std::vector<std::vector<run_result>> runs(2);
        for (std::uint64_t seed : o->seeds) {
            for (int m = 0; m < 2; ++m) {
                auto c = byte_level_config(schedules[m], false);
                std::vector<float> params;
                initialize_parameters(c, parameter_layout(c), seed, params);
                train::train_options t;
                t.steps = o->steps;
                t.batch = o->batch;
                t.threads = o->threads;
                t.eval_every = o->eval_every;
                t.lr = {train::lr_decay::cosine, o->lr, std::max<std::int64_t>(1, o->steps * 8 / 100), o->steps, o->lr / 10};
                // The same seed gives both models the same windows in the same order.
                train::trainer<float> tr(c, std::move(params), train::window_loader(tokens, o->seq, o->validation, seed, o->data), t);
                run_result r;
                double tps = 0;
                tr.run([&](const train::step_report& s) {
                    tps += s.tokens_per_second / static_cast<double>(o->steps);
                    if (s.validation_loss >= 0) r.curve.emplace_back(s.step, s.validation_loss);
                    std::cerr << "\r" << names[static_cast<std::size_t>(m)] << " seed " << seed << ": step " << s.step << "/" << o->steps
                              << " loss " << s.loss << "   " << std::flush;
                });
                r.final_loss = r.curve.back().second;
                r.tokens_per_second = tps;
                std::cerr << "\n" << names[static_cast<std::size_t>(m)] << " seed " << seed << ": validation loss " << r.final_loss << "\n";
                const auto dir = std::filesystem::path(o->out) / (std::string(m == 0 ? "xformer" : "uniform") + "-seed" + std::to_string(seed));
                std::vector<float> p(tr.parameters().begin(), tr.parameters().end());
                io::save_model_dir(dir, c, p);
                if (seed == o->seeds.front()) {
                    const vwt::model<cpu::backend<float>> model(c, p);
                    const io::byte_tokenizer tok(model.vocab());
                    auto prompt = tok.encode(o->prompt);
                    auto cache = model.make_cache(std::min<int>(c.schedule.dims.context, static_cast<int>(prompt.size()) + o->sample_tokens));
                    generation_options g;
                    g.max_new_tokens = std::min<int>(o->sample_tokens, cache.capacity() - static_cast<int>(prompt.size()));
                    g.sampling = {0.8, 40, 0.95};
                    g.seed = seed;
                    // Byte-level samples can stop inside a character: report.md stays valid UTF-8.
                    r.sample = io::valid_utf8(o->prompt + tok.decode(generate(model, cpu::context{o->threads}, cache, prompt, g)));
                }
                runs[static_cast<std::size_t>(m)].push_back(std::move(r));
            }
        }
        nlohmann::ordered_json report;
        report["data"] = io::valid_utf8(o->data);
        report["seeds"] = o->seeds;
        report["steps"] = o->steps;
        report["batch"] = o->batch;
        report["seq"] = o->seq;
        report["lr"] = o->lr;
        std::ostringstream md;
        md << "# vwt compare\n\nCorpus `" << io::valid_utf8(o->data) << "`, " << o->steps << " steps of " << o->batch << " x " << o->seq
           << " tokens, lr " << o->lr << " (cosine), seeds";
        for (auto s : o->seeds) md << ' ' << s;
        md << ".\n\n| model | widths | params | FLOPs/token | KV bytes/token | final validation loss (mean ± std) | tokens/s |\n"
           << "|---|---|---|---|---|---|---|\n";
        for (int m = 0; m < 2; ++m) {
            const auto& s = schedules[m];
            const auto costs = account(s, {o->seq, 2, 4});
            std::vector<double> finals, speeds;
            for (const auto& r : runs[static_cast<std::size_t>(m)]) finals.push_back(r.final_loss), speeds.push_back(r.tokens_per_second);
            auto& j = report[m == 0 ? "xformer" : "uniform"];
            j["widths"] = s.widths;
            j["params"] = costs.params.total();
            j["flops_per_token"] = costs.flops_per_token;
            j["kv_bytes_per_token"] = costs.kv_bytes_per_token;
            j["final_validation_loss"] = finals;
            j["final_validation_loss_mean"] = mean(finals);
            j["final_validation_loss_std"] = stdev(finals);
            j["tokens_per_second"] = mean(speeds);
            auto& curves = j["curves"] = nlohmann::ordered_json::array();
            for (const auto& r : runs[static_cast<std::size_t>(m)]) curves.push_back(r.curve);
            std::string widths;
            for (int w : s.widths) widths += (widths.empty() ? "" : " ") + std::to_string(w);
            md << "| " << names[static_cast<std::size_t>(m)] << " | " << widths << " | " << costs.params.total() << " | "
               << io::detail::fixed(costs.flops_per_token, 0) << " | " << costs.kv_bytes_per_token << " | "
               << io::detail::fixed(mean(finals), 4) << " ± " << io::detail::fixed(stdev(finals), 4) << " | "
               << io::detail::fixed(mean(speeds), 0) << " |\n";
        }
        const double diff = report["xformer"]["final_validation_loss_mean"].get<double>() - report["uniform"]["final_validation_loss_mean"].get<double>();
        report["xformer_minus_uniform"] = diff;
        md << "\n><former minus uniform: " << io::detail::fixed(diff, 4) << " nats.\n\n![validation loss](val_loss.svg)\n![schedules](schedules.svg)\n";
        for (int m = 0; m < 2; ++m)
            md << "\n## Sample from the " << names[static_cast<std::size_t>(m)] << " (seed " << o->seeds.front() << ")\n\n```\n"
               << runs[static_cast<std::size_t>(m)].front().sample << "\n```\n";
        const std::filesystem::path out = o->out;
        io::write_file_atomic(out / "report.json", report.dump(2) + "\n");
        io::write_file_atomic(out / "report.md", md.str());
        io::write_file_atomic(out / "val_loss.svg", curves_svg(runs, names));
        io::write_file_atomic(out / "schedules.svg", io::schedule_svg(x, "width schedules"));
        std::cout << md.str();
    });
}

}  // namespace vwt::cli
