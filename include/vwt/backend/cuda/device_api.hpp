// The entry points of the CUDA policy's compiled part (the vwt::cuda library, src/cuda/): memory,
// streams and every op, on raw device pointers. The policy class (backend.hpp) is their only
// caller; it unpacks its views into the plain descriptors below.
#pragma once

// Two implementations share these declarations and one source (src/cuda/device_api.cu):
//  - device_kind::cuda, compiled by nvcc into vwt::cuda: streams, cudaMalloc, cuBLASLt, kernels;
//  - device_kind::emulation, the same kernels compiled as C++ into vwt::cuda_emulation, where a
//    warp's 32 lanes run as fibers on the calling thread, one warp after another (switching at warp
//    collectives), and the GEMMs are plain loops. It runs the kernels' index arithmetic, masking,
//    online softmax and reductions on a machine without a GPU, so the op-parity and model tests
//    check them everywhere; what it cannot check (cuBLASLt, streams, the hardware) needs a GPU.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "../../tensor/view.hpp"

namespace vwt::cuda {

enum class device_kind { cuda, emulation };

// How the GEMMs compute on float data: plain fp32, TF32 tensor cores, or bf16 tensor cores with
// fp32 accumulation (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16BF: inputs rounded to bf16).
enum class gemm_math { fp32, tf32, bf16 };

struct context_options {
    int device = 0;                                // CUDA device ordinal
    gemm_math math = gemm_math::fp32;              // see gemm_math
    std::size_t gemm_workspace_bytes = 32u << 20;  // cuBLASLt's workspace, allocated once per context
};

// Plain descriptors of device memory: element type float unless named.
struct dmatrix {
    float* data;
    index_t rows, cols, stride;
};
struct const_dmatrix {
    const float* data;
    index_t rows, cols, stride;
};
enum class gemm_op { nt, nn, tn };

// The members of an implementation (one struct per device_kind, defined in src/cuda/device_api.cu):
// device_count, create (a context's state), allocate (zero-filled) and deallocate, to_device and
// to_host (which waits for the stream), synchronize (waits, then raises as vwt::error a bad id or
// target that a kernel recorded), and the ops, enqueued on the context's stream.
#define VWT_CUDA_DEVICE_API_MEMBERS \
    struct state; /* the stream, the cuBLASLt handle, the workspaces, the error word */ \
    static int device_count(); \
    static std::shared_ptr<state> create(const context_options& options); \
    static void* allocate(std::size_t bytes);  /* zero-filled */ \
    static void deallocate(void* p) noexcept; \
    static void to_device(const state& s, const void* host, void* device, std::size_t bytes); \
    static void to_host(const state& s, const void* device, void* host, std::size_t bytes);  /* waits for the stream */ \
    static void synchronize(const state& s); \
    static void* native_stream(const state& s);  /* the cudaStream_t, for collective engines (NCCL); nullptr when emulated */ \
 \
    static void matmul(const state& s, gemm_op op, const_dmatrix a, const_dmatrix b, dmatrix y, float alpha, float beta); \
    static void rmsnorm(const state& s, const_dmatrix x, const float* gain, dmatrix y, float eps); \
    static index_t rmsnorm_backward_scratch(index_t rows, index_t cols); \
    static void rmsnorm_backward(const state& s, const_dmatrix x, const float* gain, const_dmatrix dy, dmatrix dx, float* dgain, \
                                 float eps, float* scratch); \
    static void rope(const state& s, dmatrix x, int groups, int heads_per_group, index_t group_stride, index_t head_dim, \
                     const int* positions, double theta, bool inverse); \
    static index_t attention_scratch(index_t rows, index_t n_ctx, int heads, index_t head_dim); \
    static void attention(const state& s, const_dmatrix q, const_dmatrix k, const_dmatrix v, dmatrix out, int heads, int kv_heads, \
                          index_t head_dim, float scale, float* scratch, index_t scratch_size); \
    static index_t attention_backward_scratch(index_t rows, int heads); \
    static void attention_backward(const state& s, const_dmatrix q, const_dmatrix k, const_dmatrix v, const_dmatrix d_out, \
                                   dmatrix dq, dmatrix dk, dmatrix dv, int heads, int kv_heads, index_t head_dim, float scale, \
                                   float* scratch); \
    static void swiglu(const state& s, const_dmatrix fused, dmatrix out, index_t inter, bool interleaved); \
    static void swiglu_backward(const state& s, const_dmatrix fused, const_dmatrix d_out, dmatrix d_fused, index_t inter, \
                                bool interleaved); \
    static void embed(const state& s, const_dmatrix table, const int* ids, dmatrix x, float scale); \
    static void embed_backward(const state& s, const_dmatrix dx, const int* ids, dmatrix table, float scale); \
    static void cross_entropy(const state& s, dmatrix logits, const int* targets, float grad_scale, double* row_losses); \
    static void split_qkv(const state& s, const_dmatrix qkv, dmatrix q, dmatrix k, dmatrix v, int heads, int kv_heads, \
                          index_t head_dim); \
    static void join_qkv(const state& s, const_dmatrix q, const_dmatrix k, const_dmatrix v, dmatrix qkv, int heads, int kv_heads, \
                         index_t head_dim); \
    static void copy(const state& s, const_dmatrix from, dmatrix to); \
    static void fill(const state& s, dmatrix x, float value); \
    static void gaussian_pad(const state& s, dmatrix x, index_t from, index_t to, const int* positions, std::uint64_t key); \
    static void gaussian_pad_backward(const state& s, const_dmatrix x_in, dmatrix dx, index_t from, index_t to, const int* positions, \
                                      std::uint64_t key); \
    static void scale(const state& s, float* x, index_t n, float factor); \
    static void sum_squares(const state& s, const float* x, index_t n, double* out); \
    static void adamw(const state& s, float* params, const float* grads, float* m, float* v, index_t n, double beta1, double beta2, \
                      double eps, double decay, double step_size, double root_bias2);

// Device memory of each implementation: host code cannot read it.
struct device_memory {
    static constexpr bool host_accessible = false;
};
struct emulated_memory {
    static constexpr bool host_accessible = false;
};

struct cuda_api {
    using memory = device_memory;
    VWT_CUDA_DEVICE_API_MEMBERS
};
struct emulation_api {
    using memory = emulated_memory;
    VWT_CUDA_DEVICE_API_MEMBERS
};

template <device_kind K>
using device_api = std::conditional_t<K == device_kind::cuda, cuda_api, emulation_api>;

}  // namespace vwt::cuda
