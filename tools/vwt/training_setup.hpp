// What a training run is built from before its loop starts, shared by `vwt train` and the Python
// package's vwt.train: the options (the command line's flags), and from them the model config, the
// corpus's windows, the initial parameters and the trainer's options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <vwt/train/trainer.hpp>

#include "schedule_flags.hpp"

namespace vwt::io {
class bpe_tokenizer;
}

namespace vwt::cli {

struct training_flags {
    schedule_flags schedule;
    std::string data, out, format = "text", decay = "cosine", max_shard = "0", tokenizer;
    std::int64_t steps = 200, warmup = -1;  // warmup < 0: 8% of the steps
    int batch = 8, seq = 128, accumulate = 1;
    double lr = 3e-3, clip = 1.0, validation = 0.1;
    std::uint64_t seed = 0;
    std::int64_t eval_every = 50, checkpoint_every = 100;
    bool standard = false;
};

struct training_setup {
    std::string name;  // the preset, or "custom"
    model_config config;
    train::window_loader data;
    std::vector<float> params;  // initialised from the seed
    train::train_options options;
};

// Checks the flags (errors name them) and builds the run; `progress` shows tokenizing on stderr.
training_setup prepare_training(training_flags f, bool progress);

// A text's token ids, in pieces, with a progress bar on stderr when `progress`.
std::vector<int> tokenize_text(const io::bpe_tokenizer& tok, std::string_view text, bool progress);

}  // namespace vwt::cli
