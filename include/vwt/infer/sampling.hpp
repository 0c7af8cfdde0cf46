// Sampling from one row of logits: greedy, temperature, top-k, top-p (nucleus), composed in that
// order, drawing from a generator the caller owns and seeds. A sampler holds its scratch, sized
// for the vocabulary once, so drawing a token allocates nothing.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "../error.hpp"

namespace vwt {

struct sampling_options {
    double temperature = 1.0;  // 0: greedy (argmax)
    int top_k = 0;             // 0: all tokens
    double top_p = 1.0;        // keep the smallest set whose probability reaches top_p

    void validate() const {
        if (!(temperature >= 0) || !std::isfinite(temperature)) detail::fail("sampling: temperature must be >= 0, got ", temperature);
        if (top_k < 0) detail::fail("sampling: top-k must be >= 0, got ", top_k);
        if (!(top_p > 0 && top_p <= 1)) detail::fail("sampling: top-p must be in (0, 1], got ", top_p);
    }
};

class sampler {
public:
    explicit sampler(int vocab) : order_(static_cast<std::size_t>(std::max(vocab, 0))), weight_(order_.size()) {}

    // A token drawn from softmax(logits / temperature) restricted to the top-k, then to the top-p
    // nucleus; ties between equal logits go to the lower id.
    template <class T>
    int sample(std::span<const T> logits, const sampling_options& o, std::mt19937_64& rng) {
        o.validate();
        if (logits.empty()) detail::fail("sampling: empty logits");
        if (logits.size() > order_.size())
            detail::fail("sampling: ", logits.size(), " logits for a sampler of ", order_.size(), " tokens");
        if (o.temperature == 0) return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        const std::size_t n = logits.size();
        std::iota(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), 0);
        const auto before = [&](int a, int b) {
            const auto la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
            return la > lb || (la == lb && a < b);
        };
        std::size_t keep = o.top_k > 0 ? std::min(n, static_cast<std::size_t>(o.top_k)) : n;
        const auto first = order_.begin(), middle = first + static_cast<std::ptrdiff_t>(keep);
        if (keep < n) std::partial_sort(first, middle, first + static_cast<std::ptrdiff_t>(n), before);
        else std::sort(first, middle, before);
        const double top = static_cast<double>(logits[static_cast<std::size_t>(order_[0])]);
        double sum = 0;
        for (std::size_t i = 0; i < keep; ++i) {
            weight_[i] = std::exp((static_cast<double>(logits[static_cast<std::size_t>(order_[i])]) - top) / o.temperature);
            sum += weight_[i];
        }
        if (o.top_p < 1) {
            double cumulative = 0;
            std::size_t kept = 0;
            while (kept < keep) {
                cumulative += weight_[kept] / sum;
                ++kept;
                if (cumulative >= o.top_p) break;
            }
            keep = kept;
            sum = 0;
            for (std::size_t i = 0; i < keep; ++i) sum += weight_[i];
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

private:
    std::vector<int> order_;
    std::vector<double> weight_;
};

// One draw with a sampler made for it (allocates; loops keep a sampler).
template <class T>
int sample_token(std::span<const T> logits, const sampling_options& o, std::mt19937_64& rng) {
    return sampler(static_cast<int>(logits.size())).sample(logits, o, rng);
}

}  // namespace vwt
