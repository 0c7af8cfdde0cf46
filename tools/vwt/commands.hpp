// The subcommands of the `vwt` tool; each registers itself on the top-level CLI11 app.
// Their callbacks throw vwt::error on bad input; main() turns that into a message and exit code 2.
#pragma once

#include <CLI/CLI.hpp>

namespace vwt::cli {
void add_info_command(CLI::App& app);
void add_model_commands(CLI::App& app);  // init, generate, logits
void add_train_commands(CLI::App& app);  // train, eval
void add_compare_command(CLI::App& app);
void add_bench_command(CLI::App& app);    // prefill and decode speed, llama-bench style
}
