// The KV cache of one sequence, in the policy's memory: layer i stores one key and one value of
// Hkv * d_i values per token, 2 * w_i * Hkv / H values in all, exactly the accounting figure (no
// padding to W), in one buffer with per-layer offsets. The values are the compute type or bf16
// (kv_dtype, chosen when the cache is made; bf16 needs a policy with kv_bf16).
#pragma once

#include <cstdint>
#include <type_traits>
#include <variant>
#include <vector>

#include "../error.hpp"
#include "../layers/attention.hpp"
#include "../schedule/schedule.hpp"
#include "../tensor/bf16.hpp"

namespace vwt {

// One layer's keys and values as the policy's kernels take them: kv_rows of the compute type, or
// (policies with kv_bf16) of bf16.
template <class B>
using kv_layer = std::conditional_t<supports_kv_bf16<B>,
                                    std::variant<kv_rows<typename B::compute_type, typename B::memory>, kv_rows<bf16, typename B::memory>>,
                                    std::variant<kv_rows<typename B::compute_type, typename B::memory>>>;

inline const char* kv_dtype_name(kv_dtype d) { return d == kv_dtype::bf16 ? "bf16" : "compute"; }

template <class B>
class kv_cache {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;

    kv_cache(const dynamic_schedule& s, int capacity, kv_dtype dtype = kv_dtype::compute) : capacity_(capacity), dtype_(dtype) {
        if (capacity <= 0 || capacity > s.dims.context)
            detail::fail("KV cache capacity ", capacity, " must be in 1..", s.dims.context, " (the model's context)");
        if (dtype == kv_dtype::bf16 && !supports_kv_bf16<B>)
            detail::fail("KV cache: this policy keeps keys and values in its compute type only (a bf16 cache needs kv_bf16)");
        index_t at = 0;
        for (int i = 0; i < s.layers(); ++i) {
            const index_t row = static_cast<index_t>(s.dims.kv_heads) * s.head_dim(i);
            layers_.push_back({at, row});
            at += 2 * row * capacity;
        }
        if (dtype == kv_dtype::bf16) {
            if constexpr (supports_kv_bf16<B>) narrow_ = typename B::template buffer<bf16>(at);
        } else {
            wide_ = typename B::template buffer<T>(at);
        }
    }

    kv_dtype dtype() const { return dtype_; }
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

    // Layer i's keys and values, `capacity` rows each, in the cache's element type.
    kv_layer<B> layer(int i) {
        if constexpr (supports_kv_bf16<B>)
            if (dtype_ == kv_dtype::bf16) return rows_of(narrow_, i);
        return rows_of(wide_, i);
    }

    // Values stored per token over all layers, and the bytes they occupy.
    std::int64_t values_per_token() const {
        std::int64_t n = 0;
        for (const auto& l : layers_) n += 2 * l.row;
        return n;
    }
    std::int64_t element_bytes() const { return dtype_ == kv_dtype::bf16 ? 2 : static_cast<std::int64_t>(sizeof(T)); }
    std::int64_t bytes_per_token() const { return values_per_token() * element_bytes(); }
    std::int64_t allocated_bytes() const {
        return static_cast<std::int64_t>(wide_.size()) * static_cast<std::int64_t>(sizeof(T)) + 2 * static_cast<std::int64_t>(narrow_.size());
    }

private:
    struct layer_offsets {
        index_t offset, row;
    };
    template <class E>
    kv_rows<E, M> rows_of(typename B::template buffer<E>& storage, int i) {
        const auto& l = layers_.at(static_cast<std::size_t>(i));
        const index_t n = l.row * capacity_;
        return {storage.view().subview(l.offset, n).as_matrix(capacity_, l.row),
                storage.view().subview(l.offset + n, n).as_matrix(capacity_, l.row)};
    }

    std::vector<layer_offsets> layers_;
    typename B::template buffer<T> wide_;
    struct no_storage {
        index_t size() const { return 0; }
    };
    std::conditional_t<supports_kv_bf16<B>, typename B::template buffer<bf16>, no_storage> narrow_;
    int capacity_ = 0;
    kv_dtype dtype_ = kv_dtype::compute;
    int length_ = 0;
};

}  // namespace vwt
