// Data-parallel training over MPI (CPU processes): a communicator whose collectives are MPI's, and
// the process's MPI environment as an RAII object. Link vwt::mpi (CMake: find_package(vwt
// COMPONENTS mpi)); launch with `mpirun -np N`.
#pragma once

// MPI_Init is the caller's: construct one mpi_environment in main() (it initialises MPI unless
// someone already has, and finalises what it initialised). A rank that dies mid-collective is
// mpirun's to handle: Open MPI's launcher ends every other rank and exits non-zero.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../error.hpp"
#include "comm.hpp"

namespace vwt::detail {
inline void check_mpi(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    fail("MPI ", what, ": ", std::string(text, static_cast<std::size_t>(length)));
}
template <class T>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else static_assert(sizeof(T) == 0, "MPI collectives take float or double buffers");
}
// MPI counts are int: long buffers go in pieces.
template <class T, class F>
void in_pieces(T* data, std::size_t n, F&& f) {
    constexpr std::size_t piece = std::numeric_limits<int>::max() / 2;
    for (std::size_t at = 0; at < n; at += piece) f(data + at, static_cast<int>(std::min(piece, n - at)));
}
}  // namespace vwt::detail

namespace vwt::train {

// MPI for this process: initialised (with MPI_THREAD_FUNNELED: OpenMP threads compute, the main
// thread communicates) unless it already was, finalised at destruction if it was initialised here.
class mpi_environment {
public:
    mpi_environment() : mpi_environment(nullptr, nullptr) {}
    mpi_environment(int* argc, char*** argv) {
        int ready = 0;
        MPI_Initialized(&ready);
        if (!ready) {
            int provided = 0;
            vwt::detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init");
            owned_ = true;
        }
    }
    mpi_environment(const mpi_environment&) = delete;
    mpi_environment& operator=(const mpi_environment&) = delete;
    ~mpi_environment() {
        if (owned_) MPI_Finalize();
    }
    // Whether this process was started by an MPI launcher (Open MPI's mpirun, or a PMI one).
    static bool launched() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }
    // Ends every rank of the job (a rank that fails alone must not leave the others waiting in a
    // collective): prints `message` with this rank's number, then MPI_Abort.
    [[noreturn]] static void abort(const std::string& message, int code) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        std::fprintf(stderr, "vwt: rank %d: %s\n", rank, message.c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
        std::abort();
    }

private:
    bool owned_ = false;
};

// The collectives of a host-memory policy's buffers over an MPI communicator (default: every rank
// of the job). All-reduce sums in the order MPI's reduction takes, which is the same on every
// rank of an Open MPI job, so the ranks keep identical parameters.
template <class B>
class mpi_communicator final : public communicator<B> {
public:
    using T = typename B::compute_type;
    using M = typename B::memory;
    static_assert(M::host_accessible, "mpi_communicator moves host memory; a device policy needs a device-aware engine (NCCL)");

    explicit mpi_communicator(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
        vwt::detail::check_mpi(MPI_Comm_rank(comm_, &rank_), "rank");
        vwt::detail::check_mpi(MPI_Comm_size(comm_, &size_), "size");
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void all_reduce_sum(const typename B::context&, vector_view<T, M> data) override {
        vwt::detail::in_pieces(data.data(), static_cast<std::size_t>(data.size()), [&](T* p, int n) {
            vwt::detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, p, n, vwt::detail::mpi_type<T>(), MPI_SUM, comm_), "all-reduce");
        });
    }
    void all_reduce_sum(std::span<double> host) override {
        vwt::detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(host.size()), MPI_DOUBLE, MPI_SUM, comm_), "all-reduce");
    }
    // MPI_Iallreduce per part; MPI_Testall between layers lets them progress (Open MPI without a
    // progress thread advances them only inside MPI calls).
    void start_all_reduce_sum(const typename B::context&, vector_view<T, M> data) override {
        vwt::detail::in_pieces(data.data(), static_cast<std::size_t>(data.size()), [&](T* p, int n) {
            requests_.emplace_back();
            vwt::detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, p, n, vwt::detail::mpi_type<T>(), MPI_SUM, comm_, &requests_.back()), "all-reduce");
        });
    }
    void progress() override {
        if (requests_.empty()) return;
        int done = 0;
        vwt::detail::check_mpi(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE), "all-reduce");
    }
    void finish_all_reduces() override {
        vwt::detail::check_mpi(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "all-reduce");
        requests_.clear();
    }
    void broadcast(const typename B::context&, vector_view<T, M> data, int root) override {
        vwt::detail::in_pieces(data.data(), static_cast<std::size_t>(data.size()),
                          [&](T* p, int n) { vwt::detail::check_mpi(MPI_Bcast(p, n, vwt::detail::mpi_type<T>(), root, comm_), "broadcast"); });
    }
    void barrier() override { vwt::detail::check_mpi(MPI_Barrier(comm_), "barrier"); }

private:
    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
    std::vector<MPI_Request> requests_;
};

}  // namespace vwt::train
