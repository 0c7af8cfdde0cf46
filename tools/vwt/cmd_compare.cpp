// `vwt compare`: the ><former against its parameter-matched uniform twin on the same data in the
// same order for each seed (vwt::experiments::compare), written out as report.json, report.md and
// SVG plots (vwt/report/compare_report.hpp).
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "compare_run.hpp"
#include "device_flags.hpp"
#include "progress.hpp"

namespace vwt::cli {

void add_compare_command(CLI::App& app) {
    struct options {
        compare_flags run;
        device_flags device;
        bool quiet = false, json = false;
    };
    auto o = std::make_shared<options>();
    auto* cmd = app.add_subcommand("compare", "train the ><former and its uniform twin on the same data and report");
    o->run.schedule.add_to(*cmd);
    add_recipe_flags(*cmd, o->run);
    o->device.add_to(*cmd);
    cmd->add_option("--prompt", o->run.prompt, "prompt of the samples in report.md");
    cmd->add_option("--sample-tokens", o->run.sample_tokens, "length of those samples");
    cmd->add_option("--out", o->run.out, "output directory")->required();
    cmd->add_flag("--quiet", o->quiet, "no progress on stderr (on a terminal a bar, else a line every 10 s)");
    cmd->add_flag("--json", o->json, "print report.json's content instead of report.md");
    cmd->callback([o] {
        compare_written written;
        progress_display progress(o->quiet);
        o->device.run([&]<class B>(const typename B::context& ctx) {
            written = run_compare<B>(ctx, o->run, [&](const experiments::compare_progress& p) {
                const std::string model = experiments::compared_model_name(p.model);
                std::ostringstream line;
                if (p.step) {
                    line << model << " seed " << p.seed << ": " << progress_bar(double(p.step->step), double(o->run.steps)) << " step "
                         << p.step->step << "/" << o->run.steps << " loss " << p.step->loss;
                    progress.update(line.str(), p.step->step == o->run.steps);
                } else {
                    line << model << " seed " << p.seed << ": validation loss " << p.finished->final_loss;
                    progress.note(line.str());
                }
            });
        });
        progress.finish();
        if (o->json) std::cout << written.report.dump() << '\n';  // the report.json it wrote, on one line
        else std::cout << written.markdown;
    });
}

}  // namespace vwt::cli
