// `vwt compare`'s whole run, shared with the Python package's vwt.compare: the flags checked, both
// models trained for every seed (experiments::compare), and report.json, report.md and the SVG
// plots written into the output directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <vwt/experiments/compare.hpp>
#include <vwt/io/atomic_file.hpp>
#include <vwt/report/compare_report.hpp>
#include <vwt/vwt.hpp>

#include "schedule_flags.hpp"

namespace vwt::cli {

struct compare_flags {
    schedule_flags schedule;
    std::string data, out, format = "text", prompt = "The ";
    std::vector<std::uint64_t> seeds{1, 2, 3};
    std::int64_t steps = 200, eval_every = 20;
    int batch = 8, seq = 128, sample_tokens = 120;
    double lr = 3e-3, validation = 0.1;
};

// The training recipe's flags, shared by `vwt compare` and `vwt sweep`: --data, --format, --seeds,
// --steps, --batch, --seq, --lr, --eval-every, --validation.
inline void add_recipe_flags(CLI::App& cmd, compare_flags& f) {
    cmd.add_option("--data", f.data, "corpus file")->required();
    cmd.add_option("--format", f.format, "text, u16 or u32");
    cmd.add_option("--seeds", f.seeds, "seeds, comma separated")->delimiter(',');
    cmd.add_option("--steps", f.steps, "optimizer steps per run");
    cmd.add_option("--batch", f.batch, "sequences per step");
    cmd.add_option("--seq", f.seq, "sequence length");
    cmd.add_option("--lr", f.lr, "peak learning rate (cosine decay, 8% warmup)");
    cmd.add_option("--eval-every", f.eval_every, "steps between validation losses");
    cmd.add_option("--validation", f.validation, "held-out fraction at the end of the corpus");
}

// The recipe as the comparison harness takes it: cosine decay to lr / 10 after 8% warmup.
inline experiments::compare_options recipe_options(const compare_flags& f) {
    experiments::compare_options c;
    c.seeds = f.seeds;
    c.train.steps = f.steps;
    c.train.batch = f.batch;
    c.train.eval_every = f.eval_every;
    c.train.lr = {train::lr_decay::cosine, f.lr, std::max<std::int64_t>(1, f.steps * 8 / 100), f.steps, f.lr / 10};
    c.sequence_length = f.seq;
    c.validation_fraction = f.validation;
    return c;
}

struct compare_written {
    nlohmann::ordered_json report;  // report.json's content
    std::string markdown;           // report.md's
};

// Checks the flags (errors name them) and runs the comparison on policy B; `progress` sees every
// step and every finished run.
template <class B>
compare_written run_compare(const typename B::context& ctx, const compare_flags& f,
                            const std::function<void(const experiments::compare_progress&)>& progress = {}) {
    std::string name;
    int base = 0;
    const auto x = f.schedule.build(name, base);
    if (f.seq > x.dims.context) detail::fail("--seq: ", f.seq, " is above the model's context of ", x.dims.context);
    if (f.seeds.empty()) detail::fail("--seeds: give at least one seed");
    if (f.steps < 1) detail::fail("--steps: must be at least 1");
    const auto tokens = train::read_tokens(f.data, parse_token_format(f.format), x.dims.vocab);
    const io::byte_tokenizer tok(x.dims.vocab);
    auto c = recipe_options(f);
    c.prompt = tok.encode(f.prompt);
    c.sample_tokens = f.sample_tokens;
    c.out = f.out;
    std::filesystem::create_directories(f.out);
    const auto result = experiments::compare<B>(ctx, x, f.schedule.model(x, false), tokens, c, progress);
    report::compare_report_input in{&result, &c, f.data, {}};
    for (int m = 0; m < 2; ++m)
        if (!result.runs[m].empty() && !result.runs[m].front().sample.empty()) in.samples[m].push_back(tok.decode(result.runs[m].front().sample));
    const std::filesystem::path out = f.out;
    compare_written w{report::compare_report_json(in), report::compare_report_markdown(in)};
    io::write_file_atomic(out / "report.json", w.report.dump(2) + "\n");
    io::write_file_atomic(out / "report.md", w.markdown);
    io::write_file_atomic(out / "val_loss.svg", report::loss_curves_svg(result));
    io::write_file_atomic(out / "schedules.svg", report::schedule_svg(x, "width schedules"));
    return w;
}

}  // namespace vwt::cli
