// The KV cache of one sequence: layer i stores one key and one value of Hkv * d_i values per
// token, 2 * w_i * Hkv / H values in all, exactly the accounting figure (no padding to W).
#pragma once

#include <cstdint>
#include <vector>

#include "../detail/aligned.hpp"
#include "../error.hpp"
#include "../residual_view.hpp"
#include "../schedule/schedule.hpp"

namespace vwt {

template <class T>
class kv_cache {
public:
    kv_cache(const dynamic_schedule& s, int capacity) : capacity_(capacity) {
        if (capacity <= 0 || capacity > s.dims.context)
            detail::fail("KV cache capacity ", capacity, " must be in 1..", s.dims.context, " (the model's context)");
        for (int i = 0; i < s.layers(); ++i) {
            const index_t row = static_cast<index_t>(s.dims.kv_heads) * s.head_dim(i);
            layers_.push_back({aligned_vector<T>(static_cast<std::size_t>(row * capacity)),
                               aligned_vector<T>(static_cast<std::size_t>(row * capacity)), row});
        }
    }

    int capacity() const { return capacity_; }
    int length() const { return length_; }           // tokens stored
    void clear() { length_ = 0; }
    // Forget everything after the first n tokens (e.g. to re-run from a shared prefix).
    void truncate(int n) {
        if (n < 0 || n > length_) detail::fail("cannot truncate a KV cache of ", length_, " tokens to ", n);
        length_ = n;
    }

    matrix_view<T> keys(int layer) { auto& l = layers_[static_cast<std::size_t>(layer)]; return {l.k.data(), capacity_, l.row, l.row}; }
    matrix_view<T> values(int layer) { auto& l = layers_[static_cast<std::size_t>(layer)]; return {l.v.data(), capacity_, l.row, l.row}; }

    // Values stored per token over all layers, and the bytes they occupy.
    std::int64_t values_per_token() const {
        std::int64_t n = 0;
        for (const auto& l : layers_) n += 2 * l.row;
        return n;
    }
    std::int64_t bytes_per_token() const { return values_per_token() * static_cast<std::int64_t>(sizeof(T)); }
    std::int64_t allocated_bytes() const { return bytes_per_token() * capacity_; }

    // Advances the length after a forward pass has written `n` new tokens.
    void commit(int n) { length_ += n; }

private:
    struct layer_storage {
        aligned_vector<T> k, v;
        index_t row;
    };
    std::vector<layer_storage> layers_;
    int capacity_ = 0;
    int length_ = 0;
};

}  // namespace vwt
