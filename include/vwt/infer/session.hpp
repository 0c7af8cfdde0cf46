// A session: one sequence's KV cache, the workspace of a forward pass, host logits and a sampler,
// all sized when the session is made. Appending tokens and decoding allocate nothing.
#pragma once

#include <algorithm>
#include <random>
#include <span>
#include <vector>

#include "../model/model.hpp"
#include "sampling.hpp"

namespace vwt {

template <class Model>
class session {
public:
    using B = typename Model::backend;
    using T = typename B::compute_type;
    using context = typename B::context;

    // capacity: tokens the sequence may hold; max_chunk: the most tokens one append() takes (a
    // prompt longer than that is fed in chunks); kv: the dtype of its KV cache. Scratch is sized
    // for ctx's thread count.
    session(const Model& m, const context& ctx, int capacity, int max_chunk = 0, kv_dtype kv = kv_dtype::compute)
        : model_(&m),
          cache_(m.make_cache(capacity, kv)),
          workspace_(m.make_workspace(ctx, max_chunk > 0 ? std::min(max_chunk, capacity) : capacity, capacity, kv)),
          logits_(static_cast<std::size_t>(m.vocab())),
          sampler_(m.vocab()) {}

    const Model& model() const { return *model_; }
    kv_cache<B>& cache() { return cache_; }
    const kv_cache<B>& cache() const { return cache_; }
    int length() const { return cache_.length(); }
    int capacity() const { return cache_.capacity(); }
    void clear() { cache_.clear(); }
    void truncate(int n) { cache_.truncate(n); }

    // Appends tokens (in chunks of at most the workspace's rows) and returns the logits of the
    // last one, on the host, valid until the next call.
    std::span<const T> append(const context& ctx, std::span<const int> tokens) {
        if (tokens.empty()) detail::fail("session: no tokens to append");
        if (static_cast<index_t>(cache_.length()) + static_cast<index_t>(tokens.size()) > cache_.capacity())
            detail::fail("session: ", cache_.length(), " + ", tokens.size(), " tokens exceed its capacity of ", cache_.capacity());
        const auto chunk = static_cast<std::size_t>(workspace_.max_rows());
        for (std::size_t begin = 0; begin < tokens.size(); begin += chunk) {
            const sequence_input<B> in{&cache_, tokens.subspan(begin, std::min(chunk, tokens.size() - begin))};
            const auto logits = model_->forward(ctx, workspace_, std::span<const sequence_input<B>>(&in, 1), logits_mode::last);
            if (begin + chunk >= tokens.size())
                B::download(ctx, vector_view<const T, typename B::memory>(workspace_.logits_vector(logits.rows())), std::span<T>(logits_));
        }
        return logits_;
    }

    // A token drawn from the last logits.
    int sample(const sampling_options& o, std::mt19937_64& rng, std::span<const int> history = {}) {
        return sampler_.sample(std::span<const T>(logits_), o, rng, history);
    }

private:
    const Model* model_;
    kv_cache<B> cache_;
    forward_workspace<B> workspace_;
    std::vector<T> logits_;
    sampler sampler_;
};

}  // namespace vwt
