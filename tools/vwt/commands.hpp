// The subcommands of the `vwt` tool; each registers itself on the top-level CLI11 app.
// Their callbacks throw vwt::error on bad input; main() turns that into a message and exit code 2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace vwt::io {
class bpe_tokenizer;
}

namespace vwt::cli {

// A --model argument: a model directory, or a training run's output directory, whose LATEST names
// its newest checkpoint (that checkpoint's directory is returned). model_dir_help describes it.
std::string model_dir(const std::string& dir);
inline constexpr const char* model_dir_help = "model directory, or a training run's --out (its LATEST checkpoint)";

void add_info_command(CLI::App& app);
void add_model_commands(CLI::App& app);  // init, generate, logits
void add_train_commands(CLI::App& app);  // train, eval
void add_compare_command(CLI::App& app);
void add_analyze_command(CLI::App& app);  // per-layer representation statistics, models side by side
void add_sweep_command(CLI::App& app);    // shapes at one parameter budget, seeds, resumable, one report
void add_fit_command(CLI::App& app);      // scaling curves over compare runs, savings at matched loss
void add_bench_command(CLI::App& app);    // prefill and decode speed, llama-bench style
void add_tokenize_command(CLI::App& app);  // a text corpus to a token file with a tokenizer.json
void add_serve_command(CLI::App& app);     // the OpenAI-compatible HTTP server (built with cpp-httplib)
}
