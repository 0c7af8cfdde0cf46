// The training run of `vwt train`'s flags (shared with the Python package), and tokenize_text.
#include "training_setup.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include <vwt/io/bpe_tokenizer.hpp>
#include <vwt/io/mapped_file.hpp>

#include "progress.hpp"

namespace vwt::cli {

training_setup prepare_training(training_flags f, bool progress) {
    std::optional<io::bpe_tokenizer> tok;
    if (!f.tokenizer.empty()) {
        tok.emplace(io::bpe_tokenizer::from_file(f.tokenizer));
        if (f.format != "text") detail::fail("--tokenizer: tokenizes a text corpus (--format text), not --format ", f.format);
        if (f.schedule.vocab && *f.schedule.vocab < tok->vocab_size())
            detail::fail("--vocab ", *f.schedule.vocab, " is smaller than the tokenizer's ", tok->vocab_size(), " ids");
        if (!f.schedule.vocab) f.schedule.vocab = tok->vocab_size();
    }
    std::string name;
    int base = 0;
    auto s = f.schedule.build(name, base);
    if (f.seq > s.dims.context) detail::fail("--seq: ", f.seq, " is above the model's context of ", s.dims.context);
    if (f.steps < 1) detail::fail("--steps: must be at least 1");
    auto c = f.schedule.model(std::move(s), f.standard);
    std::vector<int> tokens;
    if (tok) {
        // the tokenizer's end of text, if it has one, is the model's bos, eos and pad
        c.bos_token_id = c.eos_token_id = c.pad_token_id = tok->token_id("<|endoftext|>").value_or(-1);
        const io::mapped_file text(f.data);
        const auto bytes = text.bytes();
        tokens = tokenize_text(*tok, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), progress);
    } else {
        tokens = train::read_tokens(f.data, parse_token_format(f.format), c.schedule.dims.vocab);
    }
    train::window_loader data(std::move(tokens), f.seq, f.validation, f.seed, f.data);
    std::vector<float> params;
    initialize_parameters(c, parameter_layout(c), f.seed, params);
    train::train_options t;
    t.steps = f.steps;
    t.batch = f.batch;
    t.accumulate = f.accumulate;
    t.clip = f.clip;
    t.eval_every = f.eval_every;
    t.checkpoint_every = f.checkpoint_every;
    t.out = f.out;
    t.max_shard_bytes = parse_shard_size("--max-shard-size", f.max_shard);
    t.tokenizer = f.tokenizer;
    const auto warmup = f.warmup >= 0 ? f.warmup : std::max<std::int64_t>(1, f.steps * 8 / 100);
    const auto decay = f.decay == "cosine" ? train::lr_decay::cosine
                       : f.decay == "constant" ? train::lr_decay::constant
                       : f.decay == "power" ? train::lr_decay::power
                                            : (detail::fail("--decay: unknown schedule '", f.decay, "'"), train::lr_decay::constant);
    t.lr = {decay, f.lr, warmup, f.steps, f.lr / 10};
    if (decay == train::lr_decay::power) t.lr.tokens_per_step = static_cast<double>(f.batch) * f.accumulate * f.seq;
    return {std::move(name), std::move(c), std::move(data), std::move(params), std::move(t)};
}

std::vector<int> tokenize_text(const io::bpe_tokenizer& tok, std::string_view text, bool progress) {
    const auto start = std::chrono::steady_clock::now();
    progress_display display(!progress);
    return io::encode_in_pieces(tok, text, [&](std::size_t done) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        char line[96];
        std::snprintf(line, sizeof line, " %.1f / %.1f MB, %.1f MB/s", static_cast<double>(done) / 1e6, static_cast<double>(text.size()) / 1e6,
                      static_cast<double>(done) / 1e6 / std::max(seconds, 1e-9));
        display.update(progress_bar(static_cast<double>(done), static_cast<double>(text.size())) + line, done == text.size());
    });
}

}  // namespace vwt::cli
