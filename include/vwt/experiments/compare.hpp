// The paper's claim at small scale, as a library call: train the ><former and its
// parameter-matched uniform twin on the same windows in the same order for each seed, and collect
// validation-loss curves, speeds and samples (report/compare_report.hpp writes them out).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../infer/generate.hpp"
#include "../io/checkpoint.hpp"
#include "../params/init.hpp"
#include "../train/trainer.hpp"

namespace vwt::experiments {

struct compare_options {
    std::vector<std::uint64_t> seeds{1, 2, 3};
    train::train_options train{};  // steps, batch, lr, eval_every (checkpoints are not written)
    int sequence_length = 128;
    double validation_fraction = 0.1;
    std::vector<int> prompt{};     // of the samples (empty: none)
    int sample_tokens = 120;
    std::filesystem::path out{};   // when set, each trained model is saved as out/{xformer,uniform}-seedN
};

struct run_result {
    std::vector<std::pair<std::int64_t, double>> curve;  // (step, validation loss)
    double final_loss = 0, tokens_per_second = 0;
    std::vector<int> sample;  // prompt + generated tokens of the first seed's run (else empty)
};

struct compare_result {
    model_config configs[2];            // the ><former's, the uniform twin's
    std::vector<run_result> runs[2];    // one per seed
};

// What a running comparison reports: which model (0 ><former, 1 uniform), which seed, the step.
struct compare_progress {
    int model = 0;
    std::uint64_t seed = 0;
    const train::step_report* step = nullptr;  // null: a run has finished
    const run_result* finished = nullptr;
};

inline const char* compared_model_name(int model) { return model == 0 ? "><former" : "uniform"; }
inline const char* compared_model_slug(int model) { return model == 0 ? "xformer" : "uniform"; }

// One training run of the comparison's recipe: model `c` initialised from `seed`, trained on the
// windows `seed` orders (any model given the same seed and corpus sees the same windows in the same
// order), its validation-loss curve and speed; saved to `save_to` when set; a sample of the prompt
// when `sample` is set. `on_step` sees every step.
template <class B>
run_result train_run(const typename B::context& ctx, const model_config& c, const std::vector<int>& tokens, std::uint64_t seed,
                     const compare_options& o, bool sample, const std::filesystem::path& save_to,
                     const std::function<void(const train::step_report&)>& on_step = {}) {
    std::vector<typename B::weight_type> params;
    initialize_parameters(c, parameter_layout(c), seed, params);
    auto t = o.train;
    t.out.clear();
    t.checkpoint_every = 0;
    train::trainer<B> tr(ctx, c, params, train::window_loader(tokens, o.sequence_length, o.validation_fraction, seed, "corpus"), t);
    run_result r;
    double speed = 0;
    tr.run([&](const train::step_report& s) {
        speed += s.tokens_per_second / static_cast<double>(t.steps);
        if (s.validation_loss >= 0) r.curve.emplace_back(s.step, s.validation_loss);
        if (on_step) on_step(s);
    });
    r.final_loss = r.curve.empty() ? std::nan("") : r.curve.back().second;
    r.tokens_per_second = speed;
    if (!save_to.empty()) {
        const auto p = tr.parameters();
        io::save_model_dir(save_to, c, std::vector<float>(p.begin(), p.end()));
    }
    if (sample && !o.prompt.empty()) {
        const int capacity = std::min<int>(c.schedule.dims.context, static_cast<int>(o.prompt.size()) + o.sample_tokens);
        session<vwt::model<B>> s(tr.model(), ctx, capacity);
        generation_options g;
        g.max_new_tokens = std::max(0, capacity - static_cast<int>(o.prompt.size()));
        g.sampling = {0.8, 40, 0.95};
        g.seed = seed;
        r.sample = o.prompt;
        const auto generated = generate(ctx, s, o.prompt, g);
        r.sample.insert(r.sample.end(), generated.begin(), generated.end());
    }
    return r;
}

// `base` supplies everything but the schedule (parametrisation, special ids); `tokens` is the
// whole corpus (the last validation_fraction held out).
template <class B>
compare_result compare(const typename B::context& ctx, const dynamic_schedule& x, const model_config& base,
                       const std::vector<int>& tokens, const compare_options& o,
                       const std::function<void(const compare_progress&)>& progress = {}) {
    if (o.seeds.empty()) detail::fail("compare: give at least one seed");
    compare_result result{{base, base}, {}};
    result.configs[0].schedule = x;
    result.configs[1].schedule = uniform_twin(x);
    for (auto& c : result.configs) c.attention_multipliers.clear();
    for (std::uint64_t seed : o.seeds) {
        for (int m = 0; m < 2; ++m) {
            const auto& c = result.configs[m];
            const auto save_to = o.out.empty() ? std::filesystem::path{}
                                               : o.out / (std::string(compared_model_slug(m)) + "-seed" + std::to_string(seed));
            run_result r = train_run<B>(ctx, c, tokens, seed, o, seed == o.seeds.front(), save_to, [&](const train::step_report& s) {
                if (progress) progress({m, seed, &s, nullptr});
            });
            if (progress) progress({m, seed, nullptr, &r});
            result.runs[m].push_back(std::move(r));
        }
    }
    return result;
}

}  // namespace vwt::experiments
