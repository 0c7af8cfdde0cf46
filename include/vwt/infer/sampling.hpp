// Sampling from one row of logits: a repetition penalty on the recent tokens, then greedy, or
// temperature, top-k, top-p (nucleus) and min-p, composed in that order, drawing from a generator
// the caller owns and seeds. A sampler holds its scratch, sized
// for the vocabulary once, so drawing a token allocates nothing.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstddef>
#include <random>
#include <span>
#include <vector>

#include "../error.hpp"

namespace vwt {

struct sampling_options {
    double temperature = 1.0;  // 0: greedy (argmax)
    int top_k = 0;             // 0: all tokens
    double top_p = 1.0;        // keep the smallest set whose probability reaches top_p
    double min_p = 0.0;        // then drop the tokens less likely than min_p times the most likely one
    // Each distinct token among the last repetition_window tokens of the history has its logit
    // divided by repetition_penalty where positive, multiplied where negative (CTRL's penalty, as
    // llama.cpp's --repeat-penalty and --repeat-last-n apply it); 1: off.
    double repetition_penalty = 1.0;
    int repetition_window = 64;

    void validate() const {
        if (!(temperature >= 0) || !std::isfinite(temperature)) detail::fail("sampling: temperature must be >= 0, got ", temperature);
        if (top_k < 0) detail::fail("sampling: top-k must be >= 0, got ", top_k);
        if (!(top_p > 0 && top_p <= 1)) detail::fail("sampling: top-p must be in (0, 1], got ", top_p);
        if (!(min_p >= 0 && min_p <= 1)) detail::fail("sampling: min-p must be in [0, 1], got ", min_p);
        if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
            detail::fail("sampling: repetition penalty must be > 0, got ", repetition_penalty);
        if (repetition_window < 0) detail::fail("sampling: repetition window must be >= 0, got ", repetition_window);
    }
};

class sampler {
public:
    explicit sampler(int vocab)
        : order_(static_cast<std::size_t>(std::max(vocab, 0))), weight_(order_.size()), penalised_(order_.size(), 0) {}

    // A token drawn from softmax(logits / temperature) restricted to the top-k, then to the top-p
    // nucleus, then to min-p; ties between equal logits go to the lower id. `history`: the tokens so
    // far (prompt and generated), read by the repetition penalty.
    template <class T>
    int sample(std::span<const T> logits, const sampling_options& o, std::mt19937_64& rng, std::span<const int> history = {}) {
        o.validate();
        if (logits.empty()) detail::fail("sampling: empty logits");
        if (logits.size() > order_.size())
            detail::fail("sampling: ", logits.size(), " logits for a sampler of ", order_.size(), " tokens");
        const std::size_t n = logits.size();
        const std::span<const int> recent =
            o.repetition_penalty == 1.0 ? std::span<const int>{}
                                        : history.last(std::min(history.size(), static_cast<std::size_t>(o.repetition_window)));
        for (const int t : recent) {
            if (t < 0 || static_cast<std::size_t>(t) >= n) detail::fail("sampling: history token ", t, " outside the vocabulary of ", n);
            penalised_[static_cast<std::size_t>(t)] = 1;
        }
        const auto logit = [&](int i) {
            const double l = static_cast<double>(logits[static_cast<std::size_t>(i)]);
            if (!penalised_[static_cast<std::size_t>(i)]) return l;
            return l > 0 ? l / o.repetition_penalty : l * o.repetition_penalty;
        };
        const int token = draw(n, logit, o, rng);
        for (const int t : recent) penalised_[static_cast<std::size_t>(t)] = 0;
        return token;
    }

private:
    template <class Logit>
    int draw(std::size_t n, const Logit& logit, const sampling_options& o, std::mt19937_64& rng) {
        if (o.temperature == 0) {
            int best = 0;
            for (int i = 1; i < static_cast<int>(n); ++i)
                if (logit(i) > logit(best)) best = i;
            return best;
        }
        std::iota(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), 0);
        const auto before = [&](int a, int b) {
            const double la = logit(a), lb = logit(b);
            return la > lb || (la == lb && a < b);
        };
        std::size_t keep = o.top_k > 0 ? std::min(n, static_cast<std::size_t>(o.top_k)) : n;
        const auto first = order_.begin(), middle = first + static_cast<std::ptrdiff_t>(keep);
        if (keep < n) std::partial_sort(first, middle, first + static_cast<std::ptrdiff_t>(n), before);
        else std::sort(first, middle, before);
        const double top = logit(order_[0]);
        for (std::size_t i = 0; i < keep; ++i) weight_[i] = std::exp((logit(order_[i]) - top) / o.temperature);  // the first is 1
        const auto kept_sum = [&] { return std::accumulate(weight_.begin(), weight_.begin() + static_cast<std::ptrdiff_t>(keep), 0.0); };
        double sum = kept_sum();
        if (o.top_p < 1) {
            double cumulative = 0;
            std::size_t kept = 0;
            while (kept < keep) {
                cumulative += weight_[kept] / sum;
                ++kept;
                if (cumulative >= o.top_p) break;
            }
            keep = kept;
            sum = kept_sum();
        }
        if (o.min_p > 0) {  // weights fall along the order, and the first (the most likely) is 1
            std::size_t kept = 1;
            while (kept < keep && weight_[kept] >= o.min_p) ++kept;
            keep = kept;
            sum = kept_sum();
        }
        // Inverse CDF of the kept weights.
        const double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
        double cumulative = 0;
        for (std::size_t i = 0; i < keep; ++i) {
            cumulative += weight_[i];
            if (u < cumulative) return order_[i];
        }
        return order_[keep - 1];
    }

    std::vector<int> order_;
    std::vector<double> weight_;
    std::vector<char> penalised_;  // marks the recent tokens during one draw; all 0 between draws
};

// One draw with a sampler made for it (allocates; loops keep a sampler).
template <class T>
int sample_token(std::span<const T> logits, const sampling_options& o, std::mt19937_64& rng, std::span<const int> history = {}) {
    return sampler(static_cast<int>(logits.size())).sample(logits, o, rng, history);
}

}  // namespace vwt
