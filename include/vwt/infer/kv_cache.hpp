// The KV cache of one sequence, in the policy's memory: layer i stores one key and one value of
// Hkv * d_i values per token, 2 * w_i * Hkv / H values in all, exactly the accounting figure (no
// padding to W), in one buffer with per-layer offsets.
#pragma once

#include <cstdint>
#include <vector>

#include "../error.hpp"
#include "../layers/attention.hpp"
#include "../schedule/schedule.hpp"

namespace vwt {

template <class B>
class kv_cache {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;

    kv_cache(const dynamic_schedule& s, int capacity) : capacity_(capacity) {
        if (capacity <= 0 || capacity > s.dims.context)
            detail::fail("KV cache capacity ", capacity, " must be in 1..", s.dims.context, " (the model's context)");
        index_t at = 0;
        for (int i = 0; i < s.layers(); ++i) {
            const index_t row = static_cast<index_t>(s.dims.kv_heads) * s.head_dim(i);
            layers_.push_back({at, row});
            at += 2 * row * capacity;
        }
        storage_ = typename B::template buffer<T>(at);
    }

    int capacity() const { return capacity_; }
    int length() const { return length_; }  // tokens stored
    void clear() { length_ = 0; }
    // Forget everything after the first n tokens (e.g. to re-run from a shared prefix).
    void truncate(int n) {
        if (n < 0 || n > length_) detail::fail("cannot truncate a KV cache of ", length_, " tokens to ", n);
        length_ = n;
    }
    // Advances the length after a forward pass has written `n` new tokens.
    void commit(int n) { length_ += n; }

    // Layer i's keys and values, `capacity` rows each.
    kv_rows<T, M> layer(int i) {
        const auto& l = layers_.at(static_cast<std::size_t>(i));
        const index_t n = l.row * capacity_;
        return {storage_.view().subview(l.offset, n).as_matrix(capacity_, l.row),
                storage_.view().subview(l.offset + n, n).as_matrix(capacity_, l.row)};
    }

    // Values stored per token over all layers, and the bytes they occupy.
    std::int64_t values_per_token() const {
        std::int64_t n = 0;
        for (const auto& l : layers_) n += 2 * l.row;
        return n;
    }
    std::int64_t bytes_per_token() const { return values_per_token() * static_cast<std::int64_t>(sizeof(T)); }
    std::int64_t allocated_bytes() const { return static_cast<std::int64_t>(storage_.size()) * static_cast<std::int64_t>(sizeof(T)); }

private:
    struct layer_offsets {
        index_t offset, row;
    };
    std::vector<layer_offsets> layers_;
    typename B::template buffer<T> storage_;
    int capacity_ = 0;
    int length_ = 0;
};

}  // namespace vwt
