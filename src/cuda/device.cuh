// What the CUDA policy's kernels are written against: thread and block indices, warp reductions,
// atomics and kernel launches, either from CUDA (nvcc) or from the CPU emulation
// (VWT_CUDA_EMULATION, see include/vwt/backend/cuda/device_api.hpp).
#pragma once

// Rules the kernels follow, which make the emulation faithful: blocks are one-dimensional and a
// multiple of 32 threads; a warp reduction is called by all 32 lanes of a warp together (a warp
// may leave a kernel early, a single lane may not before a reduction); no __syncthreads and no
// shared memory (warps share nothing but global memory and its atomics).

#include <cstddef>
#include <cstdint>

#if defined(VWT_CUDA_EMULATION)
#include <cmath>
#include <math.h>
#include <memory>
#include <stdexcept>
#include <ucontext.h>
#include <utility>
#include <vector>
#else
#include <cuda_runtime.h>
#endif

namespace vwt::cuda::kernels {

struct grid3 {
    unsigned x = 1, y = 1, z = 1;
};

#if defined(VWT_CUDA_EMULATION)

#define VWT_KERNEL static
#define VWT_DEVICE inline
#define VWT_UNROLL

namespace emu {

// One warp of the emulated device: its 32 lanes as fibers on the calling thread, switched
// round-robin at each warp collective (a lane writes its value and passes on; when lane 0 is back,
// all 32 have written). Values alternate between two slots so that a lane running ahead into the
// next collective never overwrites what a later lane has still to read.
struct warp_fibers {
    struct lane_registers {
        unsigned thread = 0;
        grid3 block{};
        unsigned phase = 0;
    };
    unsigned block_dim = 0;
    grid3 grid{};
    lane_registers lanes[32];
    unsigned current = 0;
    double exchange[2][32] = {};
    ucontext_t main{};
    ucontext_t fibers[32];
    void (*body)(void*) = nullptr;  // runs the lane's share of the grid
    void* closure = nullptr;
};
inline thread_local warp_fibers* active = nullptr;

inline warp_fibers::lane_registers& registers() { return active->lanes[active->current]; }

// Hands over to the next lane; returns when this lane's turn comes again.
inline void yield_to_next_lane() {
    warp_fibers& w = *active;
    const unsigned from = w.current;
    w.current = (from + 1) % 32;
    swapcontext(&w.fibers[from], &w.fibers[w.current]);
}

// Writes this lane's value of a collective and returns the 32 lanes' values.
inline const double* exchange(double v) {
    warp_fibers& w = *active;
    const unsigned slot = registers().phase++ % 2;
    w.exchange[slot][w.current] = v;
    yield_to_next_lane();
    return w.exchange[slot];
}

inline void lane_entry() {
    warp_fibers& w = *active;
    w.body(w.closure);
    // Every lane ends in the same round: each hands over to the next, the last to the launcher.
    const unsigned from = w.current;
    if (from == 31) {
        setcontext(&w.main);
    } else {
        w.current = from + 1;
        setcontext(&w.fibers[w.current]);
    }
}

}  // namespace emu

VWT_DEVICE unsigned thread_x() { return emu::registers().thread; }
VWT_DEVICE unsigned block_dim_x() { return emu::active->block_dim; }
VWT_DEVICE unsigned block_x() { return emu::registers().block.x; }
VWT_DEVICE unsigned block_y() { return emu::registers().block.y; }
VWT_DEVICE unsigned block_z() { return emu::registers().block.z; }
VWT_DEVICE unsigned grid_dim_x() { return emu::active->grid.x; }

// Every lane gets the sum (maximum) of the 32 lanes' values.
VWT_DEVICE float warp_sum(float v) {
    const double* all = emu::exchange(v);
    float s = 0;
    for (int lane = 0; lane < 32; ++lane) s += static_cast<float>(all[lane]);
    return s;
}
VWT_DEVICE double warp_sum(double v) {
    const double* all = emu::exchange(v);
    double s = 0;
    for (int lane = 0; lane < 32; ++lane) s += all[lane];
    return s;
}
// Every lane gets lane `from`'s value.
VWT_DEVICE float warp_shuffle(float v, int from) { return static_cast<float>(emu::exchange(v)[from]); }
// Every lane gets the value of lane (its own index xor mask).
VWT_DEVICE float warp_shuffle_xor(float v, int mask) {
    const unsigned me = emu::active->current;
    return static_cast<float>(emu::exchange(v)[me ^ static_cast<unsigned>(mask)]);
}
VWT_DEVICE float warp_max(float v) {
    const double* all = emu::exchange(v);
    float m = static_cast<float>(all[0]);
    for (int lane = 1; lane < 32; ++lane) m = fmaxf(m, static_cast<float>(all[lane]));
    return m;
}
// One lane runs at a time: plain read-modify-writes are atomic.
VWT_DEVICE void atomic_add(float* p, float v) { *p += v; }
VWT_DEVICE void atomic_add(double* p, double v) { *p += v; }
VWT_DEVICE void atomic_or(int* p, int v) { *p |= v; }

using stream_t = void*;
using launch_status = int;  // 0: launched
inline const char* launch_error_string(launch_status) { return "emulated launch failed"; }

// Runs kernel(args...) over the grid on the calling thread. The kernels share nothing between
// warps (see the rules above), so one warp runs at a time: 32 fibers, one per lane, go through
// every warp of every block in order, switching only at warp collectives.
template <class... P, class... A>
launch_status launch(void (*kernel)(P...), grid3 grid, unsigned block, stream_t, A... args) {
    if (block == 0 || block % 32 != 0) throw std::logic_error("emulated launch: block size not a multiple of 32");
    constexpr std::size_t stack_bytes = 256 * 1024;
    auto w = std::make_unique<emu::warp_fibers>();
    const std::unique_ptr<char[]> stacks(new char[32 * stack_bytes]);
    w->block_dim = block;
    w->grid = grid;
    auto body = [&] {
        emu::warp_fibers& f = *emu::active;
        for (unsigned z = 0; z < grid.z; ++z)
            for (unsigned y = 0; y < grid.y; ++y)
                for (unsigned x = 0; x < grid.x; ++x)
                    for (unsigned warp = 0; warp < block / 32; ++warp) {
                        f.lanes[f.current].block = {x, y, z};
                        f.lanes[f.current].thread = warp * 32 + f.current;
                        kernel(static_cast<P>(args)...);
                    }
    };
    w->closure = &body;
    w->body = [](void* c) { (*static_cast<decltype(body)*>(c))(); };
    for (unsigned lane = 0; lane < 32; ++lane) {
        getcontext(&w->fibers[lane]);
        w->fibers[lane].uc_stack.ss_sp = stacks.get() + lane * stack_bytes;
        w->fibers[lane].uc_stack.ss_size = stack_bytes;
        w->fibers[lane].uc_link = nullptr;
        makecontext(&w->fibers[lane], emu::lane_entry, 0);
    }
    emu::warp_fibers* const outer = std::exchange(emu::active, w.get());
    swapcontext(&w->main, &w->fibers[0]);
    emu::active = outer;
    return 0;
}

#else  // CUDA

#define VWT_KERNEL __global__
#define VWT_DEVICE __device__ __forceinline__
#define VWT_UNROLL _Pragma("unroll")

VWT_DEVICE unsigned thread_x() { return threadIdx.x; }
VWT_DEVICE unsigned block_dim_x() { return blockDim.x; }
VWT_DEVICE unsigned block_x() { return blockIdx.x; }
VWT_DEVICE unsigned block_y() { return blockIdx.y; }
VWT_DEVICE unsigned block_z() { return blockIdx.z; }
VWT_DEVICE unsigned grid_dim_x() { return gridDim.x; }

VWT_DEVICE float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
VWT_DEVICE double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
VWT_DEVICE float warp_shuffle(float v, int from) { return __shfl_sync(0xffffffffu, v, from); }
VWT_DEVICE float warp_shuffle_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
VWT_DEVICE float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
VWT_DEVICE void atomic_add(float* p, float v) { atomicAdd(p, v); }
VWT_DEVICE void atomic_add(double* p, double v) { atomicAdd(p, v); }
VWT_DEVICE void atomic_or(int* p, int v) { atomicOr(p, v); }

using stream_t = cudaStream_t;
using launch_status = cudaError_t;
inline const char* launch_error_string(launch_status e) { return cudaGetErrorString(e); }

// Enqueues kernel(args...) on the stream (arguments converted to the kernel's parameter types).
template <class... P, class... A>
launch_status launch(void (*kernel)(P...), grid3 grid, unsigned block, stream_t stream, A... args) {
    return [&](P... params) {
        void* argv[] = {static_cast<void*>(&params)...};
        return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid.x, grid.y, grid.z), dim3(block), argv, 0, stream);
    }(static_cast<P>(args)...);
}

#endif

}  // namespace vwt::cuda::kernels
