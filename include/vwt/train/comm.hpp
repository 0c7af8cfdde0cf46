// The communicator a trainer uses to combine the work of several processes: rank, size, an
// all-reduce of the gradient buffer, broadcast and barrier. One process needs none of it
// (single_process); a data-parallel engine (MPI, NCCL) implements the same interface.
#pragma once

#include <span>

#include "../tensor/view.hpp"

namespace vwt::train {

template <class B>
class communicator {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;
    virtual ~communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Every rank's `data` becomes the elementwise sum over ranks, in the same order on every rank.
    virtual void all_reduce_sum(const typename B::context& ctx, vector_view<T, M> data) = 0;
    // The same for a few host numbers (losses, counts).
    virtual void all_reduce_sum(std::span<double> host) = 0;
    // Starts the all-reduce of one part of a buffer (a layer's gradients as soon as its backward is
    // done), to overlap with the rest of the backward; `data` must stay untouched until
    // finish_all_reduces() returns. An engine without non-blocking collectives reduces it here.
    virtual void start_all_reduce_sum(const typename B::context& ctx, vector_view<T, M> data) { all_reduce_sum(ctx, data); }
    // Lets started reductions progress (called between layers of the backward).
    virtual void progress() {}
    // Waits for every started reduction.
    virtual void finish_all_reduces() {}
    // Every rank's `data` becomes root's.
    virtual void broadcast(const typename B::context& ctx, vector_view<T, M> data, int root) = 0;
    virtual void barrier() = 0;
};

template <class B>
class single_process final : public communicator<B> {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    void all_reduce_sum(const typename B::context&, vector_view<typename B::compute_type, typename B::memory>) override {}
    void all_reduce_sum(std::span<double>) override {}
    void broadcast(const typename B::context&, vector_view<typename B::compute_type, typename B::memory>, int) override {}
    void barrier() override {}
};

}  // namespace vwt::train
