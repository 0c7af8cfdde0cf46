// `vwt bench`: prefill and decode speed of a model directory or of a preset with random weights
// (and, with --twin, of its parameter-matched uniform twin), in the terms of llama.cpp's
// llama-bench (pp = a prompt of N tokens in one call, tg = N tokens generated one at a time; each
// test on its own after --depth earlier tokens, so tg does not follow the prompt), so that both
// run the same shapes side by side.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <cmath>
#include <iostream>
#include <numeric>
#include <optional>

#if __has_include(<sys/resource.h>)
#include <sys/resource.h>
#endif

#include <nlohmann/json.hpp>
#include <vwt/vwt.hpp>

#include "commands.hpp"
#include "device_flags.hpp"
#include "schedule_flags.hpp"

namespace vwt::cli {

namespace {

struct bench_options {
    std::string model;
    schedule_flags schedule;
    std::uint64_t seed = 0;
    int prompt = 256, gen = 64, depth = 0, reps = 5;
    bool twin = false, json = false;
    device_flags device;
    // KV positions a repetition uses: --depth, then the prompt (pp) or the generated tokens (tg)
    long long tokens() const { return static_cast<long long>(depth) + std::max(prompt, gen); }
};

struct bench_row {
    std::string model, test;
    int tokens = 0;
    std::vector<double> samples;  // tokens per second, one per repetition

    double mean() const { return std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size()); }
    double stddev() const {
        if (samples.size() < 2) return 0.0;
        const double m = mean();
        double sq = 0;
        for (double s : samples) sq += (s - m) * (s - m);
        return std::sqrt(sq / static_cast<double>(samples.size() - 1));
    }
};

// The process's peak resident set (loading, the model, caches and all), in bytes; 0 where unknown.
double peak_resident_bytes() {
#if __has_include(<sys/resource.h>)
    rusage usage{};
    if (getrusage(RUSAGE_SELF, &usage) == 0) return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux: KiB
#endif
    return 0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// pp and tg of one model, each test as llama-bench runs it: every repetition starts from an empty
// cache and fills --depth tokens (untimed), then times the prompt in one append (pp), or, from the
// same depth again, --gen single-token appends (tg).
template <class B>
std::vector<bench_row> bench_model(const model<B>& m, const std::string& name, const bench_options& o,
                                   const typename B::context& ctx) {
    const auto capacity = static_cast<int>(o.tokens());  // checked against the context, which is an int
    session<model<B>> s(m, ctx, capacity, 0, o.device.kv_dtype());
    std::vector<int> tokens(static_cast<std::size_t>(capacity));
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>((i * 7919 + 13) % static_cast<std::size_t>(m.vocab()));
    const auto part = [&](int begin, int n) { return std::span<const int>(tokens).subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(n)); };
    const auto at_depth = [&] {
        s.clear();
        if (o.depth > 0) s.append(ctx, part(0, o.depth));
    };
    const std::string at = o.depth > 0 ? " @ d" + std::to_string(o.depth) : "";
    bench_row pp{name, "pp" + std::to_string(o.prompt) + at, o.prompt, {}}, tg{name, "tg" + std::to_string(o.gen) + at, o.gen, {}};
    for (int rep = -1; rep < o.reps; ++rep) {  // repetition -1 warms up (page faults, caches) and is not reported
        if (o.prompt > 0) {
            at_depth();
            const auto t0 = std::chrono::steady_clock::now();
            s.append(ctx, part(o.depth, o.prompt));
            if (rep >= 0) pp.samples.push_back(o.prompt / seconds_since(t0));
        }
        if (o.gen > 0) {
            at_depth();
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < o.gen; ++i) s.append(ctx, part(o.depth + i, 1));
            if (rep >= 0) tg.samples.push_back(o.gen / seconds_since(t0));
        }
    }
    std::vector<bench_row> rows;
    if (o.prompt > 0) rows.push_back(std::move(pp));
    if (o.gen > 0) rows.push_back(std::move(tg));
    return rows;
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto o = std::make_shared<bench_options>();
    auto* cmd = app.add_subcommand("bench", "prefill (pp) and decode (tg) tokens/s of a model or a preset with random weights");
    cmd->add_option("--model", o->model, "model directory or a training run's --out (else the schedule flags: --preset and friends)");
    o->schedule.add_to(*cmd);
    cmd->add_option("--seed", o->seed, "seed of the random weights of a preset");
    cmd->add_option("--prompt", o->prompt, "prompt tokens, processed in one call (pp); 0 skips");
    cmd->add_option("--gen", o->gen, "tokens generated one at a time after --depth tokens (tg; as in llama-bench, not after the prompt); 0 skips");
    cmd->add_option("--depth", o->depth, "tokens already in the KV cache before the prompt and before the generated tokens");
    cmd->add_option("--reps", o->reps, "repetitions (after one warm-up); mean and standard deviation are reported");
    cmd->add_flag("--twin", o->twin, "also the parameter-matched uniform twin (every layer at the hidden width)");
    cmd->add_flag("--json", o->json, "print a JSON array instead of a table");
    o->device.add_to(*cmd);
    o->device.add_weights_to(*cmd);
    o->device.add_kv_to(*cmd);
    cmd->callback([o] {
        if (o->prompt < 0 || o->gen < 0 || o->depth < 0) detail::fail("--prompt, --gen, --depth: must not be negative");
        if (o->prompt == 0 && o->gen == 0) detail::fail("--prompt and --gen: both 0, nothing to measure");
        if (o->reps < 1) detail::fail("--reps: must be at least 1, got ", o->reps);
        std::string name;
        io::loaded_model loaded;  // a preset's config and random weights; a --model's config (its weights are mapped later)
        if (!o->model.empty()) {
            o->model = model_dir(o->model);
            loaded.config = io::read_model_config(o->model);
            name = o->model;
        } else {
            int base = 0;
            loaded.config = o->schedule.model(o->schedule.build(name, base), false);
            initialize_parameters(loaded.config, parameter_layout(loaded.config), o->seed, loaded.params);
        }
        const auto& s = loaded.config.schedule;
        const long long needed = o->tokens();
        if (needed > s.dims.context)
            detail::fail("--depth + the larger of --prompt and --gen: ", needed, " tokens exceed the model's context of ", s.dims.context);
        std::optional<io::loaded_model> twin;
        if (o->twin) {
            twin.emplace();
            twin->config = loaded.config;
            twin->config.schedule = uniform_twin(s);
            initialize_parameters(twin->config, parameter_layout(twin->config), o->seed, twin->params);
        }
        std::vector<bench_row> rows;
        o->device.run_inference([&]<class B>(const typename B::context& ctx) {
            {
                const auto m = o->model.empty() ? make_model<B>(std::move(loaded), ctx) : io::load_model<B>(o->model, ctx);
                for (auto& r : bench_model(m, name, *o, ctx)) rows.push_back(std::move(r));
            }
            if (twin) {
                const auto m = make_model<B>(std::move(*twin), ctx);
                for (auto& r : bench_model(m, name + " uniform twin", *o, ctx)) rows.push_back(std::move(r));
            }
        });
        const std::string device = o->device.device + (o->device.device == "cpu" ? " x" + std::to_string(o->device.threads) : "");
        const double peak_rss = peak_resident_bytes();
        if (o->json) {
            auto out = nlohmann::json::array();
            for (const auto& r : rows)
                out.push_back({{"model", r.model}, {"weights", o->device.weights}, {"kv_dtype", o->device.kv}, {"device", o->device.device},
                               {"threads", o->device.threads}, {"test", r.test}, {"n_prompt", r.test.starts_with("pp") ? o->prompt : 0},
                               {"n_gen", r.test.starts_with("tg") ? o->gen : 0}, {"n_depth", o->depth}, {"avg_ts", r.mean()},
                               {"stddev_ts", r.stddev()}, {"samples_ts", r.samples}, {"peak_rss_bytes", peak_rss}});
            std::cout << out.dump(2) << '\n';
            return;
        }
        std::size_t width = 5;
        for (const auto& r : rows) width = std::max(width, r.model.size());
        std::cout << std::left << std::setw(static_cast<int>(width)) << "model" << "  weights  kv    device  " << std::setw(14) << "test"
                  << "tokens/s\n";
        for (const auto& r : rows) {
            char figure[64];
            std::snprintf(figure, sizeof figure, "%.2f ± %.2f", r.mean(), r.stddev());
            std::cout << std::setw(static_cast<int>(width)) << r.model << "  " << std::setw(7) << o->device.weights << "  " << std::setw(4)
                      << o->device.kv << "  "
                      << std::setw(6) << device << "  " << std::setw(14) << r.test << figure << '\n';
        }
        if (peak_rss > 0) std::printf("peak resident memory of the process: %.1f MB\n", peak_rss / 1e6);
    });
}

}  // namespace vwt::cli
