// Sampling from one row of logits: greedy, temperature, top-k, top-p (nucleus), composed in that
// order, drawing from a generator the caller owns and seeds.
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

template <class T>
int sample_token(std::span<const T> logits, const sampling_options& o, std::mt19937_64& rng) {
    o.validate();
    if (logits.empty()) detail::fail("sampling: empty logits");
    if (o.temperature == 0) return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)] ||
               (logits[static_cast<std::size_t>(a)] == logits[static_cast<std::size_t>(b)] && a < b);
    });
    std::size_t keep = order.size();
    if (o.top_k > 0) keep = std::min(keep, static_cast<std::size_t>(o.top_k));
    std::vector<double> p(keep);
    const double top = logits[static_cast<std::size_t>(order[0])];
    double sum = 0;
    for (std::size_t i = 0; i < keep; ++i) {
        p[i] = std::exp((logits[static_cast<std::size_t>(order[i])] - top) / o.temperature);
        sum += p[i];
    }
    if (o.top_p < 1) {
        double cumulative = 0;
        std::size_t n = 0;
        while (n < keep) {
            cumulative += p[n] / sum;
            ++n;
            if (cumulative >= o.top_p) break;
        }
        keep = n;
        p.resize(keep);
    }
    std::discrete_distribution<std::size_t> pick(p.begin(), p.end());
    return order[pick(rng)];
}

}  // namespace vwt
