// Data-parallel training on GPUs: a communicator whose collectives are NCCL's, on the CUDA policy's
// device buffers, bootstrapped over MPI (rank 0 makes NCCL's id and broadcasts it; host numbers are
// reduced over MPI). Link vwt::nccl (CMake: find_package(vwt COMPONENTS nccl)); launch with
// `mpirun -np N`, one rank per GPU.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <span>

#include "../backend/cuda/backend.hpp"
#include "mpi.hpp"

namespace vwt::detail {
inline void check_nccl(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) fail("NCCL ", what, ": ", ncclGetErrorString(r));
}
inline void check_cuda_runtime(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("NCCL communicator: ", what, ": ", cudaGetErrorString(e));
}
}  // namespace vwt::detail

namespace vwt::train {

// Gradient parts started with start_all_reduce_sum run on a stream of the communicator's own, after
// the compute stream's work so far (an event), so that the rest of the backward overlaps them;
// finish_all_reduces makes the compute stream wait for them. The other collectives run on the
// compute stream of the context they are given. One rank per device: make each rank's context for
// its own GPU before this communicator.
template <class B>
class nccl_communicator final : public communicator<B> {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;
    static_assert(!M::host_accessible, "nccl_communicator reduces device buffers; host policies use mpi_communicator");
    static_assert(std::is_same_v<T, float>, "the CUDA policy computes in float");

    explicit nccl_communicator(const typename B::context& ctx, MPI_Comm comm = MPI_COMM_WORLD) : mpi_(comm) {
        vwt::detail::check_mpi(MPI_Comm_rank(mpi_, &rank_), "rank");
        vwt::detail::check_mpi(MPI_Comm_size(mpi_, &size_), "size");
        compute_ = stream_of(ctx);
        ncclUniqueId id{};
        if (rank_ == 0) vwt::detail::check_nccl(ncclGetUniqueId(&id), "unique id");
        vwt::detail::check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_), "broadcast of NCCL's id");
        vwt::detail::check_cuda_runtime(cudaStreamCreateWithFlags(&reduce_, cudaStreamNonBlocking), "stream");
        vwt::detail::check_cuda_runtime(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "event");
        vwt::detail::check_cuda_runtime(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "event");
        vwt::detail::check_nccl(ncclCommInitRank(&nccl_, size_, id, rank_), "init");
    }
    nccl_communicator(const nccl_communicator&) = delete;
    nccl_communicator& operator=(const nccl_communicator&) = delete;
    ~nccl_communicator() override {
        if (nccl_) ncclCommDestroy(nccl_);
        if (done_) cudaEventDestroy(done_);
        if (ready_) cudaEventDestroy(ready_);
        if (reduce_) cudaStreamDestroy(reduce_);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void all_reduce_sum(const typename B::context& ctx, vector_view<T, M> data) override {
        T* p = policy_access::data(data);
        vwt::detail::check_nccl(ncclAllReduce(p, p, static_cast<std::size_t>(data.size()), ncclFloat, ncclSum, nccl_, stream_of(ctx)), "all-reduce");
    }
    void all_reduce_sum(std::span<double> host) override {
        vwt::detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(host.size()), MPI_DOUBLE, MPI_SUM, mpi_), "all-reduce");
    }
    void start_all_reduce_sum(const typename B::context& ctx, vector_view<T, M> data) override {
        vwt::detail::check_cuda_runtime(cudaEventRecord(ready_, stream_of(ctx)), "event record");
        vwt::detail::check_cuda_runtime(cudaStreamWaitEvent(reduce_, ready_, 0), "stream wait");
        T* p = policy_access::data(data);
        vwt::detail::check_nccl(ncclAllReduce(p, p, static_cast<std::size_t>(data.size()), ncclFloat, ncclSum, nccl_, reduce_), "all-reduce");
        pending_ = true;
    }
    void finish_all_reduces() override {
        if (!pending_) return;
        vwt::detail::check_cuda_runtime(cudaEventRecord(done_, reduce_), "event record");
        vwt::detail::check_cuda_runtime(cudaStreamWaitEvent(compute_, done_, 0), "stream wait");
        pending_ = false;
    }
    void broadcast(const typename B::context& ctx, vector_view<T, M> data, int root) override {
        T* p = policy_access::data(data);
        vwt::detail::check_nccl(ncclBroadcast(p, p, static_cast<std::size_t>(data.size()), ncclFloat, root, nccl_, stream_of(ctx)), "broadcast");
    }
    void barrier() override { vwt::detail::check_mpi(MPI_Barrier(mpi_), "barrier"); }

private:
    static cudaStream_t stream_of(const typename B::context& ctx) {
        auto* s = static_cast<cudaStream_t>(ctx.native_stream());
        if (!s) vwt::detail::fail("NCCL communicator: the context has no CUDA stream (an emulated device?)");
        return s;
    }

    MPI_Comm mpi_;
    int rank_ = 0, size_ = 1;
    cudaStream_t compute_ = nullptr, reduce_ = nullptr;
    cudaEvent_t ready_ = nullptr, done_ = nullptr;
    ncclComm_t nccl_ = nullptr;
    bool pending_ = false;
};

}  // namespace vwt::train
