// The generation loop over a session: prefill the prompt, then decode token by token with a
// sampler, stop tokens, a token limit and a streaming callback that may also cancel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "session.hpp"

namespace vwt {

struct generation_options {
    int max_new_tokens = 64;
    sampling_options sampling{};
    std::uint64_t seed = 0;
    std::vector<int> stop_tokens{};
    // Called with each new token; return false to stop early.
    std::function<bool(int)> on_token{};
};

// Appends the prompt to the session and generates up to max_new_tokens; returns the new tokens (a
// stop token ends generation and is included; the last token is returned but not fed back).
template <class Model>
std::vector<int> generate(const typename Model::context& ctx, session<Model>& s, std::span<const int> prompt,
                          const generation_options& o) {
    o.sampling.validate();
    if (prompt.empty()) detail::fail("generate: the prompt is empty");
    if (o.max_new_tokens < 0) detail::fail("generate: max new tokens must be >= 0, got ", o.max_new_tokens);
    const auto needed = static_cast<std::int64_t>(s.length()) + static_cast<std::int64_t>(prompt.size()) + o.max_new_tokens;
    if (needed > s.capacity())
        detail::fail("generate: prompt (", prompt.size(), " tokens) plus ", o.max_new_tokens, " new tokens need ", needed,
                     " positions, beyond the session's capacity of ", s.capacity());
    std::mt19937_64 rng(o.seed);
    std::vector<int> out;
    out.reserve(static_cast<std::size_t>(o.max_new_tokens));
    std::vector<int> history(prompt.begin(), prompt.end());  // what the repetition penalty reads
    history.reserve(prompt.size() + static_cast<std::size_t>(o.max_new_tokens));
    s.append(ctx, prompt);
    for (int i = 0; i < o.max_new_tokens; ++i) {
        const int token = s.sample(o.sampling, rng, history);
        out.push_back(token);
        history.push_back(token);
        const bool stop = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), token) != o.stop_tokens.end();
        if (o.on_token && !o.on_token(token)) break;
        if (stop || i + 1 == o.max_new_tokens) break;
        s.append(ctx, std::span<const int>(&out.back(), 1));
    }
    return out;
}

}  // namespace vwt
