// The memory of one inference forward pass, sized once for a number of rows (tokens of a batch)
// and a context: the residual buffer, the layers' scratch, the head's rows and logits in the
// policy's memory, and the host staging of token ids and positions. A pass allocates nothing.
#pragma once

#include <algorithm>
#include <vector>

#include "../layers/resize.hpp"
#include "../layers/scratch.hpp"
#include "../tensor/residual.hpp"

namespace vwt {

template <class B>
class forward_workspace {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;

    // max_rows: tokens of one call (all sequences together); max_context: the longest sequence
    // (its past plus its new tokens); the logits of at most max_rows rows; kv: the dtype of the
    // caches it serves (a bf16 workspace serves caches of either dtype).
    forward_workspace(const typename B::context& ctx, const model_config& c, index_t max_rows, index_t max_context,
                      kv_dtype kv = kv_dtype::compute)
        : forward_workspace(ctx, c.schedule, head_input_cols(c), max_rows, max_context, kv) {}

private:
    forward_workspace(const typename B::context& ctx, const dynamic_schedule& s, index_t head_cols, index_t max_rows,
                      index_t max_context, kv_dtype kv)
        : max_rows_(max_rows),
          max_context_(max_context),
          width_(s.residual_width),
          head_cols_(head_cols),
          vocab_(s.dims.vocab),
          kv_(kv),
          plan_(ctx, s, {max_rows, max_context, max_rows, false, kv}) {
        if (max_rows < 1 || max_context < 1) detail::fail("forward workspace: rows and context must be positive");
        const index_t residual = max_rows * width_, gathered = max_rows * width_, head_in = max_rows * head_cols_,
                      logits = max_rows * vocab_;
        memory_ = typename B::template buffer<T>(residual + gathered + head_in + logits + plan_.total());
        auto v = memory_.view();
        residual_ = v.subview(0, residual);
        gathered_ = v.subview(residual, gathered);
        head_in_ = v.subview(residual + gathered, head_in);
        logits_ = v.subview(residual + gathered + head_in, logits);
        integers_ = typename B::template buffer<int>(3 * max_rows + plan_.int_total());
        scratch_ = plan_.carve(v.subview(residual + gathered + head_in + logits, plan_.total()),
                               integers_.view().subview(3 * max_rows, plan_.int_total()));
        host_ids_.reserve(static_cast<std::size_t>(max_rows));
        host_positions_.reserve(static_cast<std::size_t>(max_rows));
        sequences_.reserve(16);
    }

public:
    index_t max_rows() const { return max_rows_; }
    index_t max_context() const { return max_context_; }
    // Whether its scratch fits attention over a cache of this dtype.
    bool serves(kv_dtype d) const { return d == kv_dtype::compute || kv_ == d; }

    residual_view<T, M> residual(index_t rows) const { return residual_view<T, M>(residual_.as_matrix(rows, width_)); }
    const layer_scratch<B>& scratch() const { return scratch_; }
    matrix_view<T, M> gathered(index_t rows) const { return gathered_.as_matrix(rows, width_); }
    matrix_view<T, M> head_in(index_t rows) const { return head_in_.as_matrix(rows, head_cols_); }
    matrix_view<T, M> logits(index_t rows) const { return logits_.as_matrix(rows, vocab_); }
    // The same rows as one contiguous vector (for a download).
    vector_view<T, M> logits_vector(index_t rows) const { return logits_.subview(0, rows * vocab_); }
    vector_view<int, M> ids(index_t rows) { return integers_.view().subview(0, rows); }
    // MoE models: every layer's expert offsets of the last pass, layer i's E + 1 at i (E + 1); the
    // tokens (times experts per token) each expert took are their differences. Empty if dense.
    vector_view<const int, M> expert_offsets() const { return scratch_.expert_offsets; }
    vector_view<int, M> positions(index_t rows) { return integers_.view().subview(max_rows_, rows); }
    // The positions of the rows the head reads (a gaussian head resize draws by them).
    vector_view<int, M> head_positions(index_t rows) { return integers_.view().subview(2 * max_rows_, rows); }
    std::vector<int>& host_head_positions() { return host_head_positions_; }

    // Host staging, reserved for max_rows entries (cleared and refilled by each pass).
    std::vector<int>& host_ids() { return host_ids_; }
    std::vector<int>& host_positions() { return host_positions_; }
    std::vector<sequence_rows>& sequences() { return sequences_; }

private:
    index_t max_rows_, max_context_, width_, head_cols_, vocab_;
    kv_dtype kv_;
    scratch_plan<B> plan_;
    typename B::template buffer<T> memory_;
    typename B::template buffer<int> integers_;
    vector_view<T, M> residual_, gathered_, head_in_, logits_;
    layer_scratch<B> scratch_;
    std::vector<int> host_ids_, host_positions_, host_head_positions_;
    std::vector<sequence_rows> sequences_;
};

}  // namespace vwt
