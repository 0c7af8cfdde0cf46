// `vwt info`: the cost table of a schedule beside its uniform twin, as text, JSON or SVG.
#include <iostream>
#include <map>

#include <vwt/io/atomic_file.hpp>
#include <vwt/report/schedule_report.hpp>

#include "commands.hpp"
#include "schedule_flags.hpp"

namespace vwt::cli {

namespace {
int dtype_bytes(const std::string& flag, const std::string& name) {
    static const std::map<std::string, int> sizes = {{"f32", 4}, {"f16", 2}, {"bf16", 2}, {"f8", 1}};
    const auto it = sizes.find(name);
    if (it == sizes.end()) detail::fail(flag, ": unknown dtype '", name, "' (f32, f16, bf16, f8)");
    return it->second;
}
}  // namespace

void add_info_command(CLI::App& app) {
    struct options {
        schedule_flags schedule;
        bool json = false;
        std::string svg;
        int accounting_context = 0;
        std::string kv_dtype = "bf16";
        std::string weight_dtype = "bf16";
    };
    auto opts = std::make_shared<options>();
    auto* cmd = app.add_subcommand("info", "print the width schedule and its costs beside the uniform twin");
    opts->schedule.add_to(*cmd);
    cmd->add_flag("--json", opts->json, "print JSON instead of a table");
    cmd->add_option("--svg", opts->svg, "also draw both width schedules into this SVG file");
    cmd->add_option("--flops-context", opts->accounting_context,
                    "context length the attention FLOPs are counted at (default: --context)");
    cmd->add_option("--kv-dtype", opts->kv_dtype, "dtype of the KV cache: f32, f16, bf16, f8");
    cmd->add_option("--weight-dtype", opts->weight_dtype, "dtype of the weights: f32, f16, bf16, f8");
    cmd->callback([opts] {
        report::schedule_report_input in;
        in.model = opts->schedule.build(in.name, in.base_width);
        in.options = {opts->accounting_context, dtype_bytes("--kv-dtype", opts->kv_dtype),
                      dtype_bytes("--weight-dtype", opts->weight_dtype)};
        if (opts->json) std::cout << report::schedule_report_json(in).dump(2) << '\n';
        else std::cout << report::schedule_report_table(in);
        if (!opts->svg.empty()) {
            io::write_file_atomic(opts->svg, report::schedule_svg(in.model, "width schedule: " + in.name));
            if (!opts->json) std::cout << "wrote " << opts->svg << '\n';
        }
    });
}

}  // namespace vwt::cli
