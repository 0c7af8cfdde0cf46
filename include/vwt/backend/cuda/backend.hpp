// vwt::cuda: the CUDA backend policy. Buffers in device memory (cudaMalloc), every op on the
// context's stream, GEMMs through cuBLASLt, the rest as kernels (src/cuda/). Link vwt::cuda.
#pragma once

// A context is a handle to one stream on one device, with its cuBLASLt handle and workspace;
// copies share them. Ops enqueue work and return (no synchronisation inside an op); download()
// waits for the stream, and reports a bad token id or target that a kernel met since the last
// wait (kernels cannot throw; they record it and the host raises it as vwt::error there).
// Buffers are allocated on the calling thread's current device, which creating a context sets
// (cudaSetDevice): with several GPUs, make a context for a device before that device's buffers.
// The same policy over device_kind::emulation (vwt::cuda_emulation) runs the same kernels on the
// CPU for tests: see device_api.hpp.

#include <memory>
#include <span>
#include <type_traits>

#include "../../error.hpp"
#include "../buffer.hpp"
#include "../policy.hpp"
#include "device_api.hpp"

namespace vwt::cuda {

template <device_kind K>
class basic_context {
public:
    using api = device_api<K>;
    // A new stream (and cuBLASLt handle, workspace) on options.device (by default device 0).
    explicit basic_context(const context_options& options) : state_(api::create(options)), options_(options) {}
    basic_context() : basic_context(context_options{}) {}
    const typename api::state& state() const { return *state_; }
    const context_options& options() const { return options_; }
    // Waits for every op enqueued so far; raises what kernels reported.
    void synchronize() const { api::synchronize(*state_); }
    // The context's cudaStream_t as void* (nullptr on the emulated device): for a collective engine
    // (NCCL) that must order its work with the ops.
    void* native_stream() const { return api::native_stream(*state_); }
    // Whether this build can reach a device (a GPU for device_kind::cuda; always for emulation).
    static bool available() { return api::device_count() > 0; }

private:
    std::shared_ptr<typename api::state> state_;
    context_options options_;
};

template <device_kind K>
struct device_allocator {
    template <class U>
    static U* allocate(index_t n) {
        static_assert(std::is_trivially_copyable_v<U>, "device buffers hold trivially copyable elements");
        if (static_cast<std::size_t>(n) > static_cast<std::size_t>(-1) / sizeof(U)) detail::fail("cuda: buffer of ", n, " elements overflows");
        return static_cast<U*>(device_api<K>::allocate(static_cast<std::size_t>(n) * sizeof(U)));
    }
    template <class U>
    static void deallocate(U* p, index_t) noexcept {
        device_api<K>::deallocate(p);
    }
};

template <device_kind K, class Compute = float>
struct basic_backend {
    static_assert(std::is_same_v<Compute, float>,
                  "the CUDA policy computes in float (bf16 tensor-core GEMMs through context_options::math)");
    using api = device_api<K>;
    using T = float;
    using compute_type = float;
    using weight_type = float;
    using state_type = float;
    using memory = typename api::memory;
    using context = basic_context<K>;
    template <class U>
    using buffer = owning_buffer<U, memory, device_allocator<K>>;
    template <class U, index_t C = dynamic_extent>
    using mat = matrix_view<U, memory, C>;
    template <class U>
    using vec = vector_view<U, memory>;

    // ---- memory
    template <class U>
    static void upload(const context& ctx, std::span<const U> host, vec<U> dst) {
        check(static_cast<index_t>(host.size()) == dst.size(), "upload: sizes differ");
        if (!host.empty()) api::to_device(ctx.state(), host.data(), ptr(dst), host.size() * sizeof(U));
    }
    template <class U>
    static void upload(const context& ctx, std::span<U> host, vec<std::remove_const_t<U>> dst) {
        upload(ctx, std::span<const std::remove_const_t<U>>(host), dst);
    }
    template <class U>
    static void download(const context& ctx, vec<const U> src, std::span<U> host) {
        check(static_cast<index_t>(host.size()) == src.size(), "download: sizes differ");
        if (!host.empty()) api::to_host(ctx.state(), ptr(src), host.data(), host.size() * sizeof(U));
        else api::synchronize(ctx.state());
    }

    // ---- products: y = alpha x w^T + beta y, y = alpha x w + beta y, y = alpha a^T b + beta y
    static void matmul_nt(const context& ctx, mat<const T> x, mat<const T> w, mat<T> y, T alpha = T(1), T beta = T(0)) {
        check(x.cols() == w.cols() && y.rows() == x.rows() && y.cols() == w.rows(), "matmul_nt: shapes");
        api::matmul(ctx.state(), gemm_op::nt, d(x), d(w), d(y), alpha, beta);
    }
    static void matmul_nn(const context& ctx, mat<const T> x, mat<const T> w, mat<T> y, T alpha = T(1), T beta = T(0)) {
        check(x.cols() == w.rows() && y.rows() == x.rows() && y.cols() == w.cols(), "matmul_nn: shapes");
        api::matmul(ctx.state(), gemm_op::nn, d(x), d(w), d(y), alpha, beta);
    }
    static void matmul_tn(const context& ctx, mat<const T> a, mat<const T> b, mat<T> y, T alpha = T(1), T beta = T(0)) {
        check(a.rows() == b.rows() && y.rows() == a.cols() && y.cols() == b.cols(), "matmul_tn: shapes");
        api::matmul(ctx.state(), gemm_op::tn, d(a), d(b), d(y), alpha, beta);
    }

    // ---- normalisation, position, attention, MLP
    template <index_t C>
    static void rmsnorm(const context& ctx, mat<const T, C> x, vec<const T> gain, mat<T, C> y, T eps) {
        check(gain.size() == x.cols() && y.cols() == x.cols() && y.rows() == x.rows(), "rmsnorm: shapes");
        api::rmsnorm(ctx.state(), d(x), ptr(gain), d(y), eps);
    }
    static void rmsnorm(const context& ctx, mat<const T> x, vec<const T> gain, mat<T> y, T eps) {
        rmsnorm<dynamic_extent>(ctx, x, gain, y, eps);
    }
    static index_t rmsnorm_backward_scratch(const context&, index_t rows, index_t cols) { return api::rmsnorm_backward_scratch(rows, cols); }
    template <index_t C>
    static void rmsnorm_backward(const context& ctx, mat<const T, C> x, vec<const T> gain, mat<const T, C> dy, mat<T, C> dx,
                                 vec<T> dgain, T eps, vec<T> scratch) {
        check(gain.size() == x.cols() && dgain.size() == x.cols() && dy.rows() == x.rows() && dx.rows() == x.rows() &&
                  dy.cols() == x.cols() && dx.cols() == x.cols(),
              "rmsnorm_backward: shapes");
        check(scratch.size() >= api::rmsnorm_backward_scratch(x.rows(), x.cols()), "rmsnorm_backward: scratch smaller than rmsnorm_backward_scratch()");
        api::rmsnorm_backward(ctx.state(), d(x), ptr(gain), d(dy), d(dx), ptr(dgain), eps, ptr(scratch));
    }
    static void rmsnorm_backward(const context& ctx, mat<const T> x, vec<const T> gain, mat<const T> dy, mat<T> dx, vec<T> dgain,
                                 T eps, vec<T> scratch) {
        rmsnorm_backward<dynamic_extent>(ctx, x, gain, dy, dx, dgain, eps, scratch);
    }

    template <index_t D>
    static void rope(const context& ctx, mat<T> x, rope_layout<D> layout, vec<const int> positions, double theta, bool inverse = false) {
        const index_t hd = layout.head_dim.value();
        check(positions.size() == x.rows() && hd % 2 == 0, "rope: positions or head dim");
        check(layout.groups == 0 || (layout.groups - 1) * layout.group_stride + layout.heads_per_group * hd <= x.cols(),
              "rope: layout wider than the matrix");
        api::rope(ctx.state(), d(x), layout.groups, layout.heads_per_group, layout.group_stride, hd, ptr(positions), theta, inverse);
    }

    template <index_t D>
    static index_t attention_scratch(const context&, index_t rows, index_t n_ctx, attention_shape<D> shape, kv_dtype = kv_dtype::compute) {
        return api::attention_scratch(rows, n_ctx, shape.heads, shape.head_dim.value());
    }
    template <index_t D>
    static void attention(const context& ctx, mat<const T> q, mat<const T> keys, mat<const T> values, mat<T> out,
                          attention_shape<D> shape, T scale, vec<T> scratch) {
        check_attention(q, keys, values, out, shape, "attention");
        check(keys.rows() >= q.rows(), "attention: fewer keys than queries");
        check(scratch.size() >= attention_scratch(ctx, q.rows(), keys.rows(), shape), "attention: scratch smaller than attention_scratch()");
        api::attention(ctx.state(), d(q), d(keys), d(values), d(out), shape.heads, shape.kv_heads, shape.head_dim.value(), scale,
                       ptr(scratch), scratch.size());
    }
    template <index_t D>
    static index_t attention_backward_scratch(const context&, index_t rows, attention_shape<D> shape) {
        return api::attention_backward_scratch(rows, shape.heads);
    }
    template <index_t D>
    static void attention_backward(const context& ctx, mat<const T> q, mat<const T> keys, mat<const T> values, mat<const T> d_out,
                                   mat<T> dq, mat<T> dk, mat<T> dv, attention_shape<D> shape, T scale, vec<T> scratch) {
        check_attention(q, keys, values, d_out, shape, "attention_backward");
        check(keys.rows() == q.rows() && dq.rows() == q.rows() && dk.rows() == q.rows() && dv.rows() == q.rows() &&
                  dq.cols() == q.cols() && dk.cols() == keys.cols() && dv.cols() == keys.cols(),
              "attention_backward: shapes");
        check(scratch.size() >= attention_backward_scratch(ctx, q.rows(), shape), "attention_backward: scratch too small");
        api::attention_backward(ctx.state(), d(q), d(keys), d(values), d(d_out), d(dq), d(dk), d(dv), shape.heads, shape.kv_heads,
                                shape.head_dim.value(), scale, ptr(scratch));
    }

    static void swiglu(const context& ctx, mat<const T> fused, mat<T> out, index_t inter, swiglu_layout layout) {
        check(fused.cols() >= 2 * inter && out.cols() >= inter && out.rows() == fused.rows(), "swiglu: shapes");
        api::swiglu(ctx.state(), d(fused), d(out), inter, layout == swiglu_layout::interleaved);
    }
    static void swiglu_backward(const context& ctx, mat<const T> fused, mat<const T> d_out, mat<T> d_fused, index_t inter,
                                swiglu_layout layout) {
        check(fused.cols() >= 2 * inter && d_fused.cols() >= 2 * inter && d_out.cols() >= inter && d_out.rows() == fused.rows() &&
                  d_fused.rows() == fused.rows(),
              "swiglu_backward: shapes");
        api::swiglu_backward(ctx.state(), d(fused), d(d_out), d(d_fused), inter, layout == swiglu_layout::interleaved);
    }

    // ---- embedding and loss: an id outside the table (target outside the vocabulary) is reported
    // by the next download() or synchronize(); its row is left zero (its loss NaN).
    static void embed(const context& ctx, mat<const T> table, vec<const int> ids, mat<T> x, T scale) {
        check(ids.size() == x.rows() && x.cols() >= table.cols(), "embed: shapes");
        api::embed(ctx.state(), d(table), ptr(ids), d(x), scale);
    }
    static void embed_backward(const context& ctx, mat<const T> dx, vec<const int> ids, mat<T> table, T scale) {
        check(ids.size() == dx.rows() && dx.cols() >= table.cols(), "embed_backward: shapes");
        api::embed_backward(ctx.state(), d(dx), ptr(ids), d(table), scale);
    }
    static void cross_entropy(const context& ctx, mat<T> logits, vec<const int> targets, T grad_scale, vec<double> row_losses) {
        check(targets.size() == logits.rows() && row_losses.size() >= logits.rows(), "cross_entropy: shapes");
        api::cross_entropy(ctx.state(), d(logits), ptr(targets), grad_scale, ptr(row_losses));
    }

    // ---- data movement and elementwise
    template <index_t D>
    static void split_qkv(const context& ctx, mat<const T> qkv, mat<T> q, mat<T> k, mat<T> v, attention_shape<D> shape) {
        const index_t hd = shape.head_dim.value();
        check(qkv.cols() == (shape.heads + 2 * shape.kv_heads) * hd && q.cols() == shape.heads * hd && k.cols() == shape.kv_heads * hd &&
                  v.cols() == shape.kv_heads * hd && q.rows() == qkv.rows() && k.rows() == qkv.rows() && v.rows() == qkv.rows(),
              "split_qkv: shapes");
        api::split_qkv(ctx.state(), d(qkv), d(q), d(k), d(v), shape.heads, shape.kv_heads, hd);
    }
    template <index_t D>
    static void join_qkv(const context& ctx, mat<const T> q, mat<const T> k, mat<const T> v, mat<T> qkv, attention_shape<D> shape) {
        const index_t hd = shape.head_dim.value();
        check(qkv.cols() == (shape.heads + 2 * shape.kv_heads) * hd && q.cols() == shape.heads * hd && k.cols() == shape.kv_heads * hd &&
                  v.cols() == shape.kv_heads * hd && q.rows() == qkv.rows() && k.rows() == qkv.rows() && v.rows() == qkv.rows(),
              "join_qkv: shapes");
        api::join_qkv(ctx.state(), d(q), d(k), d(v), d(qkv), shape.heads, shape.kv_heads, hd);
    }
    static void copy(const context& ctx, mat<const T> from, mat<T> to) {
        check(from.rows() == to.rows() && from.cols() == to.cols(), "copy: shapes");
        api::copy(ctx.state(), d(from), d(to));
    }
    static void fill(const context& ctx, mat<T> x, T value) { api::fill(ctx.state(), d(x), value); }
    static void gaussian_pad(const context& ctx, mat<T> x, index_t from, index_t to, vec<const int> positions, std::uint64_t key) {
        check(positions.size() == x.rows() && x.cols() >= to && from > 0, "gaussian_pad: shapes");
        api::gaussian_pad(ctx.state(), d(x), from, to, ptr(positions), key);
    }
    static void gaussian_pad_backward(const context& ctx, mat<const T> x_in, mat<T> dx, index_t from, index_t to, vec<const int> positions,
                                      std::uint64_t key) {
        check(positions.size() == dx.rows() && x_in.rows() == dx.rows() && x_in.cols() >= from && dx.cols() >= to && from > 0,
              "gaussian_pad_backward: shapes");
        api::gaussian_pad_backward(ctx.state(), d(x_in), d(dx), from, to, ptr(positions), key);
    }
    static void scale(const context& ctx, vec<T> x, T s) { api::scale(ctx.state(), ptr(x), x.size(), s); }
    static void sum_squares(const context& ctx, vec<const T> x, vec<double> out) {
        check(out.size() >= 1, "sum_squares: no output element");
        api::sum_squares(ctx.state(), ptr(x), x.size(), ptr(out));
    }
    static void adamw(const context& ctx, vec<T> params, vec<const T> grads, vec<T> m, vec<T> v, adamw_update u) {
        check(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(), "adamw: sizes differ");
        api::adamw(ctx.state(), ptr(params), ptr(grads), ptr(m), ptr(v), params.size(), u.beta1, u.beta2, u.eps, u.decay, u.step_size,
                   u.root_bias2);
    }

private:
    static void check(bool ok, const char* what) {
        if (!ok) vwt::detail::fail("cuda backend: ", what);
    }
    template <class U, index_t C>
    static U* ptr(const mat<U, C>& v) { return policy_access::data(v); }
    template <class U>
    static U* ptr(const vec<U>& v) { return policy_access::data(v); }
    template <index_t C>
    static dmatrix d(const mat<T, C>& v) { return {ptr(v), v.rows(), v.cols(), v.stride()}; }
    template <index_t C>
    static const_dmatrix d(const mat<const T, C>& v) { return {ptr(v), v.rows(), v.cols(), v.stride()}; }
    template <index_t D>
    static void check_attention(mat<const T> q, mat<const T> keys, mat<const T> values, const auto& out, attention_shape<D> shape,
                                const char* op) {
        const index_t hd = shape.head_dim.value();
        if (shape.heads <= 0 || shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0 || hd <= 0 || hd > max_head_dim)
            vwt::detail::fail("cuda backend: ", op, ": ", shape.heads, " heads over ", shape.kv_heads, " kv heads of dim ", hd,
                              " (head dims up to ", max_head_dim, ")");
        check(q.cols() == shape.heads * hd && out.cols() == q.cols() && out.rows() == q.rows() && keys.cols() == shape.kv_heads * hd &&
                  values.cols() == keys.cols() && values.rows() == keys.rows(),
              "attention: shapes");
    }

public:
    // Attention keeps a head's query, output and gradient rows in registers, 32 lanes x 8.
    static constexpr index_t max_head_dim = 256;
};

// The CUDA policy, and the same kernels run on the CPU by the emulation (tests).
template <class Compute = float>
using backend = basic_backend<device_kind::cuda, Compute>;
template <class Compute = float>
using emulated_backend = basic_backend<device_kind::emulation, Compute>;
using context = basic_context<device_kind::cuda>;
using emulated_context = basic_context<device_kind::emulation>;

static_assert(backend_policy<backend<float>>);
static_assert(backend_policy<emulated_backend<float>>);

}  // namespace vwt::cuda
