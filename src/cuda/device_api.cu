// The compiled part of the CUDA policy: contexts, memory, cuBLASLt GEMMs and kernel launches.
// Compiled by nvcc into vwt::cuda, and as C++ with VWT_CUDA_EMULATION into vwt::cuda_emulation
// (see include/vwt/backend/cuda/device_api.hpp); the two differ only where marked.

#include <vwt/backend/cuda/device_api.hpp>
#include <vwt/error.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <tuple>

#include "kernels.cuh"

#if defined(VWT_CUDA_EMULATION)
#include <unistd.h>
#else
#include <cublasLt.h>
#endif

namespace vwt::cuda {

#if defined(VWT_CUDA_EMULATION)
using api = emulation_api;
#else
using api = cuda_api;
#endif

namespace {

using kernels::grid3;
using kernels::launch;
using kernels::launch_status;

constexpr unsigned block_threads = 128;  // four warps
#if defined(VWT_CUDA_EMULATION)
constexpr index_t max_blocks = 4;  // few blocks: the kernels' grid-stride loops take several turns, as on a large input
#else
constexpr index_t max_blocks = 1 << 16;
#endif

grid3 blocks_for_threads(index_t threads) {
    const index_t blocks = (threads + block_threads - 1) / block_threads;
    return {static_cast<unsigned>(std::clamp<index_t>(blocks, 1, max_blocks))};
}
grid3 blocks_for_warps(index_t warps) { return blocks_for_threads(warps * 32); }

void launched(launch_status status, const char* op) {
    if (status != launch_status{}) detail::fail("cuda: launching the ", op, " kernel failed: ", kernels::launch_error_string(status));
}

// Calls f.template operator()<R>() with R = ceil(head_dim / 32) registers per lane.
template <class F>
void with_head_registers(index_t head_dim, F&& f) {
    switch ((head_dim + 31) / 32) {
        case 1: return f.template operator()<1>();
        case 2: return f.template operator()<2>();
        case 3: return f.template operator()<3>();
        case 4: return f.template operator()<4>();
        case 5: return f.template operator()<5>();
        case 6: return f.template operator()<6>();
        case 7: return f.template operator()<7>();
        case 8: return f.template operator()<8>();
        default: detail::fail("cuda: attention head dim ", head_dim, " is outside 1..", 32 * kernels::max_head_registers);
    }
}

// Decode and short prefills split the keys so that enough warps run: up to 32 chunks of at least
// 16 keys each, when fewer than 1024 (row, head) pairs would otherwise run.
constexpr index_t split_below_pairs = 1024, min_split_keys = 16, max_splits = 32;
index_t key_splits(index_t rows, index_t n_ctx, int heads) {
    if (rows * heads >= split_below_pairs) return 1;
    return std::clamp<index_t>((n_ctx + min_split_keys - 1) / min_split_keys, 1, max_splits);
}

std::string error_bits_message(int bits) {
    std::string what;
    auto add = [&](const char* m) { what += what.empty() ? m : std::string("; ") + m; };
    if (bits & kernels::bad_embed_id) add("embed: a token id outside the embedding table");
    if (bits & kernels::bad_embed_backward_id) add("embed_backward: a token id outside the embedding table");
    if (bits & kernels::bad_target) add("cross_entropy: a target outside the vocabulary");
    return what;
}

}  // namespace

#if defined(VWT_CUDA_EMULATION)
// ================================================================== emulation: host memory and loops

struct api::state {
    context_options options;
    mutable int error_word = 0;  // kernels record bad ids here (atomically)
    int* error() const { return &error_word; }
    kernels::stream_t stream() const { return nullptr; }
    void use_device() const {}
};

int api::device_count() { return 1; }
std::shared_ptr<api::state> api::create(const context_options& options) {
    auto s = std::make_shared<state>();
    s->options = options;
    return s;
}
void* api::allocate(std::size_t bytes) {
    // The emulated device's memory is the host's: no request beyond the host's RAM is tried.
    const auto ram = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* p = bytes <= ram ? ::operator new(bytes, std::align_val_t{256}, std::nothrow) : nullptr;
    if (!p) detail::fail("cuda (emulated): cannot allocate ", bytes, " bytes of memory (", ram, " bytes of RAM)");
    std::memset(p, 0, bytes);
    return p;
}
void api::deallocate(void* p) noexcept { ::operator delete(p, std::align_val_t{256}); }
void api::to_device(const state&, const void* host, void* device, std::size_t bytes) { std::memcpy(device, host, bytes); }
void api::to_host(const state& s, const void* device, void* host, std::size_t bytes) {
    std::memcpy(host, device, bytes);
    synchronize(s);
}
void api::synchronize(const state& s) {
    if (const int bits = std::exchange(s.error_word, 0)) detail::fail("cuda (emulated): ", error_bits_message(bits));
}
void* api::native_stream(const state&) { return nullptr; }

// The GEMMs as loops in double (what cuBLASLt does on the device).
void api::matmul(const state&, gemm_op op, const_dmatrix a, const_dmatrix b, dmatrix y, float alpha, float beta) {
    (void)kernels::scale_matrix_kernel;  // the device's path for an empty inner dimension
    const index_t depth = op == gemm_op::tn ? a.rows : a.cols;
    for (index_t i = 0; i < y.rows; ++i)
        for (index_t j = 0; j < y.cols; ++j) {
            double sum = 0;
            for (index_t k = 0; k < depth; ++k) {
                const double lhs = op == gemm_op::tn ? a.data[k * a.stride + i] : a.data[i * a.stride + k];
                const double rhs = op == gemm_op::nt ? b.data[j * b.stride + k] : b.data[k * b.stride + j];
                sum += lhs * rhs;
            }
            float& out = y.data[i * y.stride + j];
            out = static_cast<float>(double(alpha) * sum + (beta == 0.0f ? 0.0 : double(beta) * double(out)));
        }
}

namespace {
void clear_double(const api::state&, double* p) { *p = 0; }
}  // namespace

#else
// ================================================================== CUDA: streams, cudaMalloc, cuBLASLt

namespace {

void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) detail::fail("cuda: ", what, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
const char* cublas_status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "a cuBLAS error";
    }
}
void cublas_check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) detail::fail("cuda: cuBLASLt ", what, " failed: ", cublas_status_name(s), " (", static_cast<int>(s), ")");
}

// The largest power of two (up to 16) dividing a pointer's address: cuBLASLt picks kernels for
// the alignment it is promised.
std::uint32_t alignment_of(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::uint32_t align = 16;
    while (align > 4 && a % align != 0) align /= 2;
    return align;
}

// One GEMM's shape as cuBLASLt sees it, the key of the algorithm cache.
struct gemm_shape {
    cublasOperation_t trans_a, trans_b;
    std::int64_t m, n, k, lda, ldb, ldc;
    std::uint32_t align_a, align_b, align_c;
    bool beta_zero;
    auto tie() const { return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c, beta_zero); }
    bool operator<(const gemm_shape& o) const { return tie() < o.tie(); }
};

}  // namespace

struct api::state {
    context_options options;
    cudaStream_t stream_ = nullptr;
    cublasLtHandle_t lt = nullptr;
    void* gemm_workspace = nullptr;
    int* error_device = nullptr;  // device memory: kernels atomicOr into it
    int* error_host = nullptr;    // pinned: its copy, read after a wait
    mutable std::mutex algo_mutex;
    mutable std::map<gemm_shape, cublasLtMatmulAlgo_t> algos;

    int* error() const { return error_device; }
    cudaStream_t stream() const { return stream_; }
    void use_device() const {
        int current = -1;
        if (cudaGetDevice(&current) != cudaSuccess || current != options.device) cuda_check(cudaSetDevice(options.device), "cudaSetDevice");
    }
    ~state() {
        cudaSetDevice(options.device);
        if (stream_) cudaStreamSynchronize(stream_);
        if (gemm_workspace) cudaFree(gemm_workspace);
        if (error_host) cudaFreeHost(error_host);
        if (error_device) cudaFree(error_device);
        if (lt) cublasLtDestroy(lt);
        if (stream_) cudaStreamDestroy(stream_);
    }
};

int api::device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver or no device: not an error of ours to keep
        return 0;
    }
    return n;
}

std::shared_ptr<api::state> api::create(const context_options& options) {
    const int devices = device_count();
    if (options.device < 0 || options.device >= devices)
        detail::fail("cuda: device ", options.device, " requested, ", devices, " CUDA device(s) present");
    auto s = std::make_shared<state>();
    s->options = options;
    cuda_check(cudaSetDevice(options.device), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&s->stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cublas_check(cublasLtCreate(&s->lt), "cublasLtCreate");
    if (options.gemm_workspace_bytes > 0) cuda_check(cudaMalloc(&s->gemm_workspace, options.gemm_workspace_bytes), "cudaMalloc (GEMM workspace)");
    cuda_check(cudaMallocHost(reinterpret_cast<void**>(&s->error_host), sizeof(int)), "cudaMallocHost (error word)");
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&s->error_device), sizeof(int)), "cudaMalloc (error word)");
    cuda_check(cudaMemsetAsync(s->error_device, 0, sizeof(int), s->stream_), "cudaMemsetAsync (error word)");
    return s;
}

void* api::allocate(std::size_t bytes) {
    void* p = nullptr;
    if (const cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
        cudaGetLastError();
        std::size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        detail::fail("cuda: cannot allocate ", bytes, " bytes of device memory (", free_bytes, " free of ", total, "): ", cudaGetErrorString(e));
    }
    // New buffers read as zeros, as on the host; the legacy stream finishes the fill before any
    // context's stream can use the buffer.
    cuda_check(cudaMemset(p, 0, bytes), "cudaMemset (new buffer)");
    cuda_check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (new buffer)");
    return p;
}
void api::deallocate(void* p) noexcept { cudaFree(p); }

void api::to_device(const state& s, const void* host, void* device, std::size_t bytes) {
    s.use_device();
    cuda_check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s.stream()), "cudaMemcpyAsync (upload)");
}
void api::to_host(const state& s, const void* device, void* host, std::size_t bytes) {
    s.use_device();
    cuda_check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s.stream()), "cudaMemcpyAsync (download)");
    synchronize(s);
}
void* api::native_stream(const state& s) {
    s.use_device();
    return s.stream();
}
// The error word comes back with the wait (4 bytes on the same stream); a set word is cleared.
void api::synchronize(const state& s) {
    s.use_device();
    cuda_check(cudaMemcpyAsync(s.error_host, s.error_device, sizeof(int), cudaMemcpyDeviceToHost, s.stream()), "cudaMemcpyAsync (error word)");
    cuda_check(cudaStreamSynchronize(s.stream()), "cudaStreamSynchronize");
    if (const int bits = *s.error_host) {
        *s.error_host = 0;
        cuda_check(cudaMemsetAsync(s.error_device, 0, sizeof(int), s.stream()), "cudaMemsetAsync (error word)");
        cuda_check(cudaStreamSynchronize(s.stream()), "cudaStreamSynchronize");
        detail::fail("cuda: ", error_bits_message(bits));
    }
}

namespace {
struct lt_descriptors {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t preference = nullptr;
    ~lt_descriptors() {
        if (preference) cublasLtMatmulPreferenceDestroy(preference);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};
cublasComputeType_t compute_type(gemm_math math) {
    switch (math) {
        case gemm_math::tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
        case gemm_math::bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
        default: return CUBLAS_COMPUTE_32F;
    }
}
}  // namespace

namespace {
void clear_double(const api::state& s, double* p) { cuda_check(cudaMemsetAsync(p, 0, sizeof(double), s.stream()), "cudaMemsetAsync"); }
}  // namespace

// Row-major products as cuBLASLt's column-major D (M x N) = op(A) (M x K) . op(B) (K x N): a
// row-major [r x c] matrix with stride s is a column-major c x r matrix with leading dimension s,
// so every product becomes its transpose with the operands swapped:
//   nt  y = x w^T : D = y^T, A = w (stored K x M, transposed), B = x (stored K x N)
//   nn  y = x w   : D = y^T, A = w (stored M x K),             B = x (stored K x N)
//   tn  y = a^T b : D = y^T, A = b (stored M x K),             B = a (stored N x K, transposed)
void api::matmul(const state& s, gemm_op op, const_dmatrix a, const_dmatrix b, dmatrix y, float alpha, float beta) {
    if (y.rows == 0 || y.cols == 0) return;
    s.use_device();
    const index_t depth = op == gemm_op::tn ? a.rows : a.cols;
    if (depth == 0) {
        launched(launch(kernels::scale_matrix_kernel, blocks_for_threads(y.rows * y.cols), block_threads, s.stream(), y.data, y.stride,
                        y.rows, y.cols, beta),
                 "matmul (empty inner dimension)");
        return;
    }
    gemm_shape shape{};
    shape.m = y.cols;
    shape.n = y.rows;
    shape.k = depth;
    shape.trans_a = op == gemm_op::nt ? CUBLAS_OP_T : CUBLAS_OP_N;
    shape.trans_b = op == gemm_op::tn ? CUBLAS_OP_T : CUBLAS_OP_N;
    shape.lda = b.stride;
    shape.ldb = a.stride;
    shape.ldc = y.stride;
    shape.align_a = alignment_of(b.data);
    shape.align_b = alignment_of(a.data);
    shape.align_c = alignment_of(y.data);
    shape.beta_zero = beta == 0.0f;

    lt_descriptors d;
    const auto a_rows = shape.trans_a == CUBLAS_OP_N ? shape.m : shape.k, a_cols = shape.trans_a == CUBLAS_OP_N ? shape.k : shape.m;
    const auto b_rows = shape.trans_b == CUBLAS_OP_N ? shape.k : shape.n, b_cols = shape.trans_b == CUBLAS_OP_N ? shape.n : shape.k;
    cublas_check(cublasLtMatmulDescCreate(&d.op, compute_type(s.options.math), CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublas_check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &shape.trans_a, sizeof(shape.trans_a)), "set TRANSA");
    cublas_check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &shape.trans_b, sizeof(shape.trans_b)), "set TRANSB");
    cublas_check(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_32F, a_rows, a_cols, shape.lda), "cublasLtMatrixLayoutCreate (A)");
    cublas_check(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_32F, b_rows, b_cols, shape.ldb), "cublasLtMatrixLayoutCreate (B)");
    cublas_check(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, shape.m, shape.n, shape.ldc), "cublasLtMatrixLayoutCreate (C)");

    cublasLtMatmulAlgo_t algo{};
    {
        const std::lock_guard<std::mutex> lock(s.algo_mutex);
        if (const auto it = s.algos.find(shape); it != s.algos.end()) {
            algo = it->second;
        } else {
            cublas_check(cublasLtMatmulPreferenceCreate(&d.preference), "cublasLtMatmulPreferenceCreate");
            auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value, const char* what) {
                cublas_check(cublasLtMatmulPreferenceSetAttribute(d.preference, attribute, &value, sizeof(value)), what);
            };
            prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, s.options.gemm_workspace_bytes, "set MAX_WORKSPACE_BYTES");
            prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, shape.align_a, "set MIN_ALIGNMENT_A_BYTES");
            prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, shape.align_b, "set MIN_ALIGNMENT_B_BYTES");
            prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, shape.align_c, "set MIN_ALIGNMENT_C_BYTES");
            prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, shape.align_c, "set MIN_ALIGNMENT_D_BYTES");
            cublasLtMatmulHeuristicResult_t result{};
            int found = 0;
            cublas_check(cublasLtMatmulAlgoGetHeuristic(s.lt, d.op, d.a, d.b, d.c, d.c, d.preference, 1, &result, &found),
                         "cublasLtMatmulAlgoGetHeuristic");
            if (found == 0)
                detail::fail("cuda: cuBLASLt has no algorithm for the product M ", shape.m, " N ", shape.n, " K ", shape.k, " (lda ",
                             shape.lda, " ldb ", shape.ldb, " ldc ", shape.ldc, ")");
            algo = result.algo;
            s.algos.emplace(shape, algo);
        }
    }
    cublas_check(cublasLtMatmul(s.lt, d.op, &alpha, b.data, d.a, a.data, d.b, &beta, y.data, d.c, y.data, d.c, &algo, s.gemm_workspace,
                                s.options.gemm_workspace_bytes, s.stream()),
                 "cublasLtMatmul");
}

#endif

// ================================================================== the ops: kernel launches

void api::rmsnorm(const state& s, const_dmatrix x, const float* gain, dmatrix y, float eps) {
    if (x.rows == 0) return;
    s.use_device();
    launched(launch(kernels::rmsnorm_kernel, blocks_for_warps(x.rows), block_threads, s.stream(), x.data, x.stride, gain, y.data, y.stride,
                    x.rows, x.cols, eps),
             "rmsnorm");
}

index_t api::rmsnorm_backward_scratch(index_t rows, index_t cols) {
    return rows + (rows + kernels::gain_chunk_rows - 1) / kernels::gain_chunk_rows * cols;
}

void api::rmsnorm_backward(const state& s, const_dmatrix x, const float* gain, const_dmatrix dy, dmatrix dx, float* dgain, float eps,
                           float* scratch) {
    if (x.rows == 0) return;
    s.use_device();
    launched(launch(kernels::rmsnorm_backward_kernel, blocks_for_warps(x.rows), block_threads, s.stream(), x.data, x.stride, gain, dy.data,
                    dy.stride, dx.data, dx.stride, x.rows, x.cols, eps, scratch),
             "rmsnorm_backward");
    const index_t chunks = (x.rows + kernels::gain_chunk_rows - 1) / kernels::gain_chunk_rows;
    float* const partial = scratch + x.rows;
    launched(launch(kernels::rmsnorm_gain_partial_kernel, blocks_for_threads(chunks * x.cols), block_threads, s.stream(), x.data, x.stride,
                    dy.data, dy.stride, scratch, partial, x.rows, x.cols),
             "rmsnorm_backward (gain, partial sums)");
    launched(launch(kernels::rmsnorm_gain_backward_kernel, blocks_for_threads(x.cols), block_threads, s.stream(), partial, dgain, chunks,
                    x.cols),
             "rmsnorm_backward (gain)");
}

void api::rope(const state& s, dmatrix x, int groups, int heads_per_group, index_t group_stride, index_t head_dim, const int* positions,
               double theta, bool inverse) {
    const index_t pairs = x.rows * groups * heads_per_group * (head_dim / 2);
    if (pairs == 0) return;
    s.use_device();
    launched(launch(kernels::rope_kernel, blocks_for_threads(pairs), block_threads, s.stream(), x.data, x.stride, x.rows, groups,
                    heads_per_group, group_stride, head_dim, positions, theta, inverse),
             "rope");
}

index_t api::attention_scratch(index_t rows, index_t n_ctx, int heads, index_t head_dim) {
    // The most any call with at most `rows` rows and `n_ctx` keys uses: splits happen below
    // split_below_pairs (row, head) pairs.
    const index_t split_rows = std::min<index_t>(rows, (split_below_pairs - 1) / std::max(heads, 1));
    if (split_rows <= 0) return 0;
    const index_t splits = key_splits(split_rows, n_ctx, heads);
    return splits == 1 ? 0 : split_rows * heads * splits * (head_dim + 2);
}

void api::attention(const state& s, const_dmatrix q, const_dmatrix k, const_dmatrix v, dmatrix out, int heads, int kv_heads,
                    index_t head_dim, float scale, float* scratch, index_t scratch_size) {
    if (q.rows == 0) return;
    s.use_device();
    const index_t rows = q.rows, n_ctx = k.rows;
    index_t splits = key_splits(rows, n_ctx, heads);
    if (splits > 1) splits = std::max<index_t>(1, std::min(splits, scratch_size / (rows * heads * (head_dim + 2))));
    const index_t chunk = (n_ctx + splits - 1) / splits;
    const int group = heads / kv_heads;
    with_head_registers(head_dim, [&]<int R>() {
        launched(launch(kernels::attention_kernel<R>, blocks_for_warps(rows * heads * splits), block_threads, s.stream(), q.data, q.stride,
                        k.data, k.stride, v.data, v.stride, out.data, out.stride, rows, n_ctx, heads, group, head_dim, scale,
                        static_cast<int>(splits), chunk, scratch),
                 "attention");
    });
    if (splits > 1)
        launched(launch(kernels::attention_combine_kernel, blocks_for_warps(rows * heads), block_threads, s.stream(), scratch, out.data,
                        out.stride, rows, heads, head_dim, static_cast<int>(splits)),
                 "attention (combine)");
}

index_t api::attention_backward_scratch(index_t rows, int heads) { return 3 * rows * heads; }

void api::attention_backward(const state& s, const_dmatrix q, const_dmatrix k, const_dmatrix v, const_dmatrix d_out, dmatrix dq, dmatrix dk,
                             dmatrix dv, int heads, int kv_heads, index_t head_dim, float scale, float* scratch) {
    if (q.rows == 0) return;
    s.use_device();
    const index_t rows = q.rows;
    const int group = heads / kv_heads;
    with_head_registers(head_dim, [&]<int R>() {
        launched(launch(kernels::attention_stats_kernel<R>, blocks_for_warps(rows * heads), block_threads, s.stream(), q.data, q.stride,
                        k.data, k.stride, v.data, v.stride, d_out.data, d_out.stride, rows, heads, group, head_dim, scale, scratch),
                 "attention_backward (softmax statistics)");
        launched(launch(kernels::attention_dq_kernel<R>, blocks_for_warps(rows * heads), block_threads, s.stream(), q.data, q.stride,
                        k.data, k.stride, v.data, v.stride, d_out.data, d_out.stride, dq.data, dq.stride, rows, heads, group, head_dim,
                        scale, static_cast<const float*>(scratch)),
                 "attention_backward (dq)");
        launched(launch(kernels::attention_dkdv_kernel<R>, blocks_for_warps(rows * kv_heads), block_threads, s.stream(), q.data, q.stride,
                        k.data, k.stride, v.data, v.stride, d_out.data, d_out.stride, dk.data, dk.stride, dv.data, dv.stride, rows, heads,
                        group, head_dim, scale, static_cast<const float*>(scratch)),
                 "attention_backward (dk, dv)");
    });
}

void api::swiglu(const state& s, const_dmatrix fused, dmatrix out, index_t inter, bool interleaved) {
    if (fused.rows * inter == 0) return;
    s.use_device();
    launched(launch(kernels::swiglu_kernel, blocks_for_threads(fused.rows * inter), block_threads, s.stream(), fused.data, fused.stride,
                    out.data, out.stride, fused.rows, inter, interleaved),
             "swiglu");
}

void api::swiglu_backward(const state& s, const_dmatrix fused, const_dmatrix d_out, dmatrix d_fused, index_t inter, bool interleaved) {
    if (fused.rows * inter == 0) return;
    s.use_device();
    launched(launch(kernels::swiglu_backward_kernel, blocks_for_threads(fused.rows * inter), block_threads, s.stream(), fused.data,
                    fused.stride, d_out.data, d_out.stride, d_fused.data, d_fused.stride, fused.rows, inter, interleaved),
             "swiglu_backward");
}

void api::embed(const state& s, const_dmatrix table, const int* ids, dmatrix x, float scale) {
    if (x.rows * x.cols == 0) return;
    s.use_device();
    launched(launch(kernels::embed_kernel, blocks_for_threads(x.rows * x.cols), block_threads, s.stream(), table.data, table.stride,
                    table.rows, table.cols, ids, x.data, x.stride, x.rows, x.cols, scale, s.error()),
             "embed");
}

void api::embed_backward(const state& s, const_dmatrix dx, const int* ids, dmatrix table, float scale) {
    if (dx.rows * table.cols == 0) return;
    s.use_device();
    launched(launch(kernels::embed_backward_kernel, blocks_for_threads(dx.rows * table.cols), block_threads, s.stream(), dx.data, dx.stride,
                    ids, table.data, table.stride, table.rows, dx.rows, table.cols, scale, s.error()),
             "embed_backward");
}

void api::cross_entropy(const state& s, dmatrix logits, const int* targets, float grad_scale, double* row_losses) {
    if (logits.rows == 0) return;
    s.use_device();
    launched(launch(kernels::cross_entropy_kernel, blocks_for_warps(logits.rows), block_threads, s.stream(), logits.data, logits.stride,
                    logits.rows, logits.cols, targets, grad_scale, row_losses, s.error()),
             "cross_entropy");
}

void api::split_qkv(const state& s, const_dmatrix qkv, dmatrix q, dmatrix k, dmatrix v, int heads, int kv_heads, index_t head_dim) {
    if (qkv.rows * qkv.cols == 0) return;
    s.use_device();
    launched(launch(kernels::split_qkv_kernel, blocks_for_threads(qkv.rows * qkv.cols), block_threads, s.stream(), qkv.data, qkv.stride,
                    q.data, q.stride, k.data, k.stride, v.data, v.stride, qkv.rows, qkv.cols, heads / kv_heads, head_dim),
             "split_qkv");
}

void api::join_qkv(const state& s, const_dmatrix q, const_dmatrix k, const_dmatrix v, dmatrix qkv, int heads, int kv_heads,
                   index_t head_dim) {
    if (qkv.rows * qkv.cols == 0) return;
    s.use_device();
    launched(launch(kernels::join_qkv_kernel, blocks_for_threads(qkv.rows * qkv.cols), block_threads, s.stream(), q.data, q.stride, k.data,
                    k.stride, v.data, v.stride, qkv.data, qkv.stride, qkv.rows, qkv.cols, heads / kv_heads, head_dim),
             "join_qkv");
}

void api::copy(const state& s, const_dmatrix from, dmatrix to) {
    if (from.rows * from.cols == 0) return;
    s.use_device();
    launched(launch(kernels::copy_kernel, blocks_for_threads(from.rows * from.cols), block_threads, s.stream(), from.data, from.stride,
                    to.data, to.stride, from.rows, from.cols),
             "copy");
}

void api::fill(const state& s, dmatrix x, float value) {
    if (x.rows * x.cols == 0) return;
    s.use_device();
    launched(launch(kernels::fill_kernel, blocks_for_threads(x.rows * x.cols), block_threads, s.stream(), x.data, x.stride, x.rows, x.cols,
                    value),
             "fill");
}

void api::gaussian_pad(const state& s, dmatrix x, index_t from, index_t to, const int* positions, std::uint64_t key) {
    if (x.rows == 0 || to <= from) return;
    s.use_device();
    launched(launch(kernels::gaussian_pad_kernel, blocks_for_threads(x.rows), block_threads, s.stream(), x.data, x.stride, x.rows, from, to,
                    positions, key),
             "gaussian_pad");
}

void api::gaussian_pad_backward(const state& s, const_dmatrix x_in, dmatrix dx, index_t from, index_t to, const int* positions,
                                std::uint64_t key) {
    if (dx.rows == 0 || to <= from) return;
    s.use_device();
    launched(launch(kernels::gaussian_pad_backward_kernel, blocks_for_threads(dx.rows), block_threads, s.stream(), x_in.data, x_in.stride,
                    dx.data, dx.stride, dx.rows, from, to, positions, key),
             "gaussian_pad_backward");
}

void api::scale(const state& s, float* x, index_t n, float factor) {
    if (n == 0) return;
    s.use_device();
    launched(launch(kernels::scale_kernel, blocks_for_threads(n), block_threads, s.stream(), x, n, factor), "scale");
}

void api::sum_squares(const state& s, const float* x, index_t n, double* out) {
    s.use_device();
    clear_double(s, out);
    if (n == 0) return;
    launched(launch(kernels::sum_squares_kernel, blocks_for_threads(n), block_threads, s.stream(), x, n, out), "sum_squares");
}

void api::adamw(const state& s, float* params, const float* grads, float* m, float* v, index_t n, double beta1, double beta2, double eps,
                double decay, double step_size, double root_bias2) {
    if (n == 0) return;
    s.use_device();
    launched(launch(kernels::adamw_kernel, blocks_for_threads(n), block_threads, s.stream(), params, grads, m, v, n, beta1, beta2, eps,
                    decay, step_size, root_bias2),
             "adamw");
}

}  // namespace vwt::cuda
