// `vwt compare`: the ><former against its parameter-matched uniform twin on the same data in the
// same order for each seed (vwt::experiments::compare), written out as report.json, report.md and
// SVG plots (vwt/report/compare_report.hpp).
#include <iostream>
#include <sstream>

#include <vwt/experiments/compare.hpp>
#include <vwt/report/compare_report.hpp>
#include <vwt/vwt.hpp>

#include "commands.hpp"
#include "progress.hpp"
#include "device_flags.hpp"
#include "schedule_flags.hpp"

namespace vwt::cli {

void add_compare_command(CLI::App& app) {
    struct options {
        schedule_flags schedule;
        std::string data, out, format = "text", prompt = "The ";
        std::vector<std::uint64_t> seeds{1, 2, 3};
        std::int64_t steps = 200, eval_every = 20;
        int batch = 8, seq = 128, sample_tokens = 120;
        device_flags device;
        double lr = 3e-3, validation = 0.1;
        bool quiet = false, json = false;
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
    o->device.add_to(*cmd);
    cmd->add_option("--prompt", o->prompt, "prompt of the samples in report.md");
    cmd->add_option("--sample-tokens", o->sample_tokens, "length of those samples");
    cmd->add_option("--out", o->out, "output directory")->required();
    cmd->add_flag("--quiet", o->quiet, "no progress on stderr (on a terminal a bar, else a line every 10 s)");
    cmd->add_flag("--json", o->json, "print report.json's content instead of report.md");
    cmd->callback([o] {
        std::string name;
        int base = 0;
        const auto x = o->schedule.build(name, base);
        if (o->seq > x.dims.context) detail::fail("--seq: ", o->seq, " is above the model's context of ", x.dims.context);
        if (o->seeds.empty()) detail::fail("--seeds: give at least one seed");
        if (o->steps < 1) detail::fail("--steps: must be at least 1");
        const auto tokens = train::read_tokens(o->data, parse_token_format(o->format), x.dims.vocab);
        const io::byte_tokenizer tok(x.dims.vocab);
        experiments::compare_options c;
        c.seeds = o->seeds;
        c.train.steps = o->steps;
        c.train.batch = o->batch;
        c.train.eval_every = o->eval_every;
        c.train.lr = {train::lr_decay::cosine, o->lr, std::max<std::int64_t>(1, o->steps * 8 / 100), o->steps, o->lr / 10};
        c.sequence_length = o->seq;
        c.validation_fraction = o->validation;
        c.prompt = tok.encode(o->prompt);
        c.sample_tokens = o->sample_tokens;
        c.out = o->out;
        std::filesystem::create_directories(o->out);
        experiments::compare_result result;
        progress_display progress(o->quiet);
        o->device.run([&]<class B>(const typename B::context& ctx) {
            result = experiments::compare<B>(ctx, x, byte_level_config(x, false), tokens, c, [&](const experiments::compare_progress& p) {
                const std::string model = experiments::compared_model_name(p.model);
                std::ostringstream line;
                if (p.step) {
                    line << model << " seed " << p.seed << ": " << progress_bar(double(p.step->step), double(o->steps)) << " step " << p.step->step
                         << "/" << o->steps << " loss " << p.step->loss;
                    progress.update(line.str(), p.step->step == o->steps);
                } else {
                    line << model << " seed " << p.seed << ": validation loss " << p.finished->final_loss;
                    progress.note(line.str());
                }
            });
        });
        progress.finish();
        report::compare_report_input in{&result, &c, o->data, {}};
        for (int m = 0; m < 2; ++m)
            if (!result.runs[m].empty() && !result.runs[m].front().sample.empty())
                in.samples[m].push_back(tok.decode(result.runs[m].front().sample));
        const std::filesystem::path out = o->out;
        const auto md = report::compare_report_markdown(in);
        io::write_file_atomic(out / "report.json", report::compare_report_json(in).dump(2) + "\n");
        io::write_file_atomic(out / "report.md", md);
        io::write_file_atomic(out / "val_loss.svg", report::loss_curves_svg(result));
        io::write_file_atomic(out / "schedules.svg", report::schedule_svg(x, "width schedules"));
        if (o->json) std::cout << report::compare_report_json(in).dump() << '\n';  // the report.json it wrote, on one line
        else std::cout << md;
    });
}

}  // namespace vwt::cli
