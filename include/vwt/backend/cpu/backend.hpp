// vwt::cpu: the Eigen backend policy. Every op the layers call, on host memory; each call takes a
// cpu::context (context.hpp) whose thread count and product precision the caller sets (no global
// state).
#pragma once

// Threads: each op splits its work into fixed pieces for the context's thread count (OpenMP
// num_threads per call) and runs Eigen single-threaded on each piece. Results repeat exactly for
// a given thread count, because every piece and every partial sum is fixed by it, and buffers are
// 64-byte aligned (backend/buffer.hpp).

// Eigen's own OpenMP threading would ignore the caller's thread count: vwt::vwt's CMake target
// defines EIGEN_DONT_PARALLELIZE for everything that links it (a build without CMake passes
// -DEIGEN_DONT_PARALLELIZE, as the pkg-config file does). Outside a parallel region Eigen would
// otherwise use every core for the ops that call it on one thread.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../../detail/gaussian_noise.hpp"
#include "../../error.hpp"
#include "../buffer.hpp"
#include "../policy.hpp"
#include "activation_kernels.hpp"
#include "attention_kernels.hpp"
#include "bf16_attention.hpp"
#include "context.hpp"
#include "onednn_gemm.hpp"
#include "rope_kernels.hpp"
#include "weight_kernels.hpp"

// OpenMP when the build enables it (vwt::vwt links OpenMP::OpenMP_CXX); serial otherwise.
#if defined(_OPENMP)
#include <omp.h>
#define VWT_OMP(...) _Pragma(VWT_OMP_STR(omp __VA_ARGS__))
#define VWT_OMP_STR(x) #x
#else
#define VWT_OMP(...)
#endif

namespace vwt::cpu {

namespace detail {
constexpr int eigen_extent(index_t n) { return n == dynamic_extent ? Eigen::Dynamic : static_cast<int>(n); }
}  // namespace detail

// Weight: the compute type, or with float compute bf16 (half the bytes) or q8_block (8 bits and a
// scale per 32 weights), widened to float inside the ops. bf16 and q8 are inference formats:
// training keeps float weights (a q8 optimizer step is an error).
template <class Compute, class Weight = Compute, class State = Compute>
struct backend {
    static_assert(std::is_floating_point_v<Compute>, "the CPU policy computes in float or double");
    static_assert(std::is_same_v<Weight, Compute> ||
                      (std::is_same_v<Compute, float> && (std::is_same_v<Weight, bf16> || std::is_same_v<Weight, q8_block>)),
                  "the CPU policy stores weights in its compute type, or in bf16 or q8 blocks with float compute");
    static_assert(std::is_same_v<State, Compute>, "the CPU policy keeps optimizer state in its compute type");
    using T = Compute;
    using compute_type = Compute;
    using weight_type = Weight;
    using state_type = State;
    static constexpr index_t per_item = elements_per_item<Weight>;  // weights per stored item: 32 for q8
    using memory = host_memory;
    using context = vwt::cpu::context;
    template <class U>
    using buffer = owning_buffer<U, host_memory, aligned_host_allocator>;
    template <class U, index_t C = dynamic_extent>
    using mat = matrix_view<U, host_memory, C>;
    template <class U>
    using vec = vector_view<U, host_memory>;

    // ---- memory: host memory, so a copy
    template <class U>
    static void upload(const context&, std::span<const U> host, vec<U> dst) {
        check_size(static_cast<index_t>(host.size()), dst.size(), "upload");
        if (!host.empty()) std::memcpy(dst.data(), host.data(), host.size() * sizeof(U));
    }
    template <class U>
    static void upload(const context& ctx, std::span<U> host, vec<std::remove_const_t<U>> dst) {
        upload(ctx, std::span<const std::remove_const_t<U>>(host), dst);
    }
    template <class U>
    static void download(const context&, vec<const U> src, std::span<U> host) {
        check_size(src.size(), static_cast<index_t>(host.size()), "download");
        if (!host.empty()) std::memcpy(host.data(), src.data(), host.size() * sizeof(U));
    }

    // ---- products
    using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using map = Eigen::Map<matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    using const_map = Eigen::Map<const matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    template <index_t C>
    static map eigen(mat<T, C> v) { return map(v.data(), v.rows(), v.cols(), Eigen::OuterStride<>(v.stride())); }
    template <index_t C>
    static const_map eigen(mat<const T, C> v) { return const_map(v.data(), v.rows(), v.cols(), Eigen::OuterStride<>(v.stride())); }

    // out = beta * out, with beta 0 clearing (never reading) what was there.
    template <class Out>
    static void scale_output(Out& out, T beta) {
        if (beta == T(0)) out.setZero();
        else if (beta != T(1)) out *= beta;
    }

    // The longest stretch of the inner dimension handed to one Eigen product. Above ~800, Eigen's
    // blocking halves k and makes the weight block as tall as the whole product, which ran 10-15%
    // slower (2-core AVX-512, M = 256) than two products of k <= 768 summed; the split into equal
    // panels, a multiple of 32 floats wide (whole q8 blocks), keeps every product in the fast regime.
    static constexpr index_t gemm_k_panel = 768;
    // Output columns (weight rows) per product: 256 ran 5-10% faster than a thread's whole slice.
    static constexpr index_t gemm_n_panel = 256;
    static index_t k_panel_width(index_t k) {
        if (k <= gemm_k_panel) return k;
        const index_t panels = (k + gemm_k_panel - 1) / gemm_k_panel;
        return ((k + panels - 1) / panels + 31) / 32 * 32;
    }

    // matmul_nt of up to gemv_rows rows (decode): kernels::gemv_nt on each thread's slice of the
    // weight's rows (one slice per thread measured faster than 4 handed out as threads finish).
    // Against q8 weights the activations are quantized to q8 blocks once for all threads, against
    // bf16 weights rounded to bf16, both into the context's cache under its lock (see
    // product_precision): decode allocates nothing after its first step.
    static void gemv_nt(const context& ctx, mat<const T> x, mat<const Weight> w, mat<T> y, T alpha, T beta) {
        const index_t n = w.rows();
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((n + 63) / 64)));
        const index_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
        // kernels::gemv_nt over each thread's slice, with x as given or as converted below
        const auto slices = [&](auto operand) {
            parallel_for(threads, threads, [&](index_t t) {
                const index_t begin = t * chunk, end = std::min(n, begin + chunk);
                if (begin < end) kernels::gemv_nt(operand, x.cols(), w.rows_range(begin, end), y.cols_range(begin, end), alpha, beta);
            });
        };
        // ... with x's rows converted by convert_row into `buffer`, the context's (under its lock),
        // each w.cols() items long
        const auto converted = [&](auto& buffer, auto convert_row) {
            const std::scoped_lock lock(ctx.cache->mutex());
            buffer.resize(static_cast<std::size_t>(x.rows() * w.cols()));
            for (index_t r = 0; r < x.rows(); ++r) convert_row(x.row(r), x.cols(), buffer.data() + r * w.cols());
            using item = typename std::remove_reference_t<decltype(buffer)>::value_type;
            slices(mat<const item>{buffer.data(), x.rows(), w.cols(), w.cols()});
        };
        if constexpr (std::is_same_v<T, float> && std::is_same_v<Weight, bf16>)
            if (ctx.products == product_precision::automatic)
                return converted(ctx.cache->operand(0), [](const T* row, index_t k, bf16* out) { kernels::round_to_bf16(row, k, out); });
        if constexpr (std::is_same_v<Weight, q8_block>)
            if (ctx.products == product_precision::automatic)
                return converted(ctx.cache->q8_operand(), [](const T* row, index_t k, q8_block* out) { kernels::quantize_row(row, k, out); });
        slices(x);
    }

    // y = alpha * x . w^T + beta * y, w an [n x k] row-major weight (torch's Linear layout). The
    // output columns (weight rows) are split across threads, so each thread streams its own slice
    // of the weight: the right split for decode (a few rows of x) and for prefill alike. Up to
    // gemv_rows rows of x run the streaming kernel (gemv_nt above); more run Eigen's GEMM, on
    // bf16 weights widened to float one cache-sized panel at a time.
    static constexpr index_t gemv_rows = 4;
    static void matmul_nt(const context& ctx, mat<const T> x, mat<const Weight> w, mat<T> y, T alpha = T(1), T beta = T(0)) {
        check_product(x.rows(), x.cols(), w.rows(), w.cols() * per_item, y, "matmul_nt", true);
        const index_t n = w.rows();
        if (bf16_products(ctx, x.rows())) {
#if defined(VWT_WITH_ONEDNN)
            if constexpr (std::is_same_v<T, float>)
                if (!kernels::bf16_products_pay()) return matmul_nt_onednn(ctx, x, w, y, alpha, beta, true);
#endif
            return product_bf16(ctx, 'N', 'T', x.rows(), n, x.cols(), alpha, x, w, beta, y, [&](const context& f32, auto a, auto b) {
                backend<T>::matmul_nt(f32, a, b, y, alpha, beta);
            });
        }
#if defined(VWT_WITH_ONEDNN)
        if constexpr (std::is_same_v<T, float>)
            if (x.rows() > gemv_rows) return matmul_nt_onednn(ctx, x, w, y, alpha, beta);
#endif
        if constexpr (std::is_same_v<T, float>)
            if (x.rows() <= gemv_rows) return gemv_nt(ctx, x, w, y, alpha, beta);
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((n + 63) / 64)));
        const index_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
        parallel_for(threads, threads, [&](index_t t_) {
            const auto t = static_cast<int>(t_);
            const index_t begin = t * chunk;
            const index_t end = std::min(n, begin + chunk);
            if (begin >= end) return;
            auto out = eigen(y.cols_range(begin, end));
            scale_output(out, beta);
            const auto lhs = eigen(x);
            const index_t width = k_panel_width(x.cols());
            if constexpr (std::is_same_v<Weight, T>) {
                const auto rhs = eigen(w.rows_range(begin, end));
                if (x.rows() == 1)  // decode in double: a row-major matrix-vector product streams each weight row once
                    out.row(0).transpose().noalias() += alpha * (rhs * lhs.row(0).transpose());
                else
                    for (index_t j0 = 0; j0 < end - begin; j0 += gemm_n_panel) {
                        const index_t rows = std::min(gemm_n_panel, end - begin - j0);
                        for (index_t k0 = 0; k0 < x.cols(); k0 += width) {
                            const index_t kk = std::min(width, x.cols() - k0);
                            out.middleCols(j0, rows).noalias() +=
                                alpha * (lhs.middleCols(k0, kk) * rhs.middleRows(j0, rows).middleCols(k0, kk).transpose());
                        }
                    }
            } else {
                // Panels of panel_rows weight rows x width columns, widened into this thread's buffer.
                constexpr index_t panel_rows = gemm_n_panel;
                matrix panel(std::min(panel_rows, end - begin), std::min(width, x.cols()));
                for (index_t j0 = begin; j0 < end; j0 += panel_rows) {
                    const index_t rows = std::min(panel_rows, end - j0);
                    for (index_t k0 = 0; k0 < x.cols(); k0 += width) {
                        const index_t kk = std::min(width, x.cols() - k0);
                        for (index_t j = 0; j < rows; ++j) kernels::widen(w.row(j0 + j) + k0 / per_item, kk, panel.row(j).data());
                        out.middleCols(j0 - begin, rows).noalias() +=
                            alpha * (lhs.middleCols(k0, kk) * panel.topLeftCorner(rows, kk).transpose());
                    }
                }
            }
        });
    }

    // y = alpha * x . w + beta * y, w [k x n] row-major: the input gradient of a Linear layer
    // (dx = dy . W). The rows of x are split across threads.
    static void matmul_nn(const context& ctx, mat<const T> x, mat<const Weight> w, mat<T> y, T alpha = T(1), T beta = T(0)) {
        check_product(x.rows(), x.cols(), w.cols() * per_item, w.rows(), y, "matmul_nn", true);
        if (bf16_products(ctx, x.rows()))
            return product_bf16(ctx, 'N', 'N', x.rows(), w.cols() * per_item, x.cols(), alpha, x, w, beta, y,
                                [&](const context& f32, auto a, auto b) { backend<T>::matmul_nn(f32, a, b, y, alpha, beta); });
        if constexpr (!std::is_same_v<Weight, T>) {  // bf16 weights (inference storage): widened once, then as float
            auto wide = widened(w);
            return backend<T>::matmul_nn(ctx, x, wide.view().as_const(), y, alpha, beta);
        }
#if defined(VWT_WITH_ONEDNN)
        if constexpr (std::is_same_v<T, float>)
            return onednn::sgemm(ctx.threads, 'N', 'N', x.rows(), w.cols(), x.cols(), alpha, x.data(), x.stride(), w.data(), w.stride(),
                                 beta, y.data(), y.stride());
#endif
        const index_t m = x.rows();
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((m + 15) / 16)));
        const index_t chunk = (m + threads - 1) / threads;
        parallel_for(threads, threads, [&](index_t t_) {
            const auto t = static_cast<int>(t_);
            const index_t begin = t * chunk, end = std::min(m, begin + chunk);
            if (begin >= end) return;
            auto out = eigen(y.rows_range(begin, end));
            scale_output(out, beta);
            out.noalias() += alpha * (eigen(x.rows_range(begin, end)) * eigen(w));
        });
    }

    // y = alpha * a^T . b + beta * y, a [m x n], b [m x k], y [n x k]: the weight gradient of a
    // Linear layer (dW += dy^T . x), summed over the m rows. The rows of y are split across threads.
    static void matmul_tn(const context& ctx, mat<const T> a, mat<const T> b, mat<T> y, T alpha = T(1), T beta = T(0)) {
        if (a.rows() != b.rows() || y.rows() != a.cols() || y.cols() != b.cols())
            vwt::detail::fail("matmul_tn: shapes [", a.rows(), " x ", a.cols(), "]^T . [", b.rows(), " x ", b.cols(), "] -> [",
                              y.rows(), " x ", y.cols(), "] do not match");
        if (bf16_products(ctx, a.rows()))
            return product_bf16(ctx, 'T', 'N', a.cols(), b.cols(), a.rows(), alpha, a, b, beta, y,
                                [&](const context& f32, auto p, auto q) { backend<T>::matmul_tn(f32, p, q, y, alpha, beta); });
#if defined(VWT_WITH_ONEDNN)
        if constexpr (std::is_same_v<T, float>)
            return onednn::sgemm(ctx.threads, 'T', 'N', a.cols(), b.cols(), a.rows(), alpha, a.data(), a.stride(), b.data(), b.stride(),
                                 beta, y.data(), y.stride());
#endif
        const index_t n = a.cols();
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((n + 15) / 16)));
        const index_t chunk = ((n + threads - 1) / threads + 7) / 8 * 8;
        parallel_for(threads, threads, [&](index_t t_) {
            const auto t = static_cast<int>(t_);
            const index_t begin = t * chunk, end = std::min(n, begin + chunk);
            if (begin >= end) return;
            auto out = eigen(y.rows_range(begin, end));
            scale_output(out, beta);
            out.noalias() += alpha * (eigen(a.cols_range(begin, end)).transpose() * eigen(b));
        });
    }

    // ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * g, row by row, over all x.cols() coordinates.
    // A static column extent C becomes a fixed-size Eigen array.
    template <index_t C>
    static void rmsnorm(const context& ctx, mat<const T, C> x, vec<const Weight> gain, mat<T, C> y, T eps) {
        using array = Eigen::Array<T, detail::eigen_extent(C), 1>;
        const index_t n = x.cols();
        const auto inverse_rms = [&](const Eigen::Map<const array>& in) {
            return T(1) / std::sqrt(in.square().sum() / static_cast<T>(n) + eps);
        };
        const auto normalize = [&](const T* g, index_t r) {
            const Eigen::Map<const array> in(x.row(r), n);
            Eigen::Map<array>(y.row(r), n) = in * inverse_rms(in) * Eigen::Map<const array>(g, n);
        };
        if constexpr (std::is_same_v<Weight, T>) {
            parallel_for(ctx.threads, x.rows(), [&](index_t r) { normalize(gain.data(), r); });
        } else if (n <= rmsnorm_stack_cols) {
            // A bf16 or q8 gain widened once, on the calling thread's stack (no heap: decode stays
            // allocation-free), and read by every thread. Widened for each row, the gain made
            // RMSNorm of 256 rows 35-40% slower than with a float gain (hot in cache, 192-1152 columns).
            alignas(64) T wide[rmsnorm_stack_cols];
            kernels::widen(gain.data(), n, wide);
            parallel_for(ctx.threads, x.rows(), [&](index_t r) { normalize(wide, r); });
        } else {  // wider rows: the gain widened a panel at a time for each row
            parallel_for(ctx.threads, x.rows(), [&](index_t r) {
                const Eigen::Map<const array> in(x.row(r), n);
                const T inv = inverse_rms(in);
                constexpr index_t panel = 256;  // whole q8 blocks
                T* out = y.row(r);
                T g[panel];
                for (index_t c0 = 0; c0 < n; c0 += panel) {
                    const index_t len = std::min(panel, n - c0);
                    kernels::widen(gain.data() + c0 / per_item, len, g);
                    for (index_t c = 0; c < len; ++c) out[c0 + c] = in(c0 + c) * inv * g[c];
                }
            });
        }
    }
    static constexpr index_t rmsnorm_stack_cols = 4096;  // the widest row whose widened gain goes on the stack
    static void rmsnorm(const context& ctx, mat<const T> x, vec<const Weight> gain, mat<T> y, T eps) {
        rmsnorm<dynamic_extent>(ctx, x, gain, y, eps);
    }

    // Scratch of rmsnorm_backward: one partial gain gradient per thread.
    static index_t rmsnorm_backward_scratch(const context& ctx, index_t rows, index_t cols) {
        return static_cast<index_t>(backward_threads(ctx, rows)) * cols;
    }
    // dx += d(y)/d(x)^T dy and dgain += sum over rows of dy * x / rms. Each thread sums its rows'
    // gain gradient apart; the partial sums are added in thread order.
    template <index_t C>
    static void rmsnorm_backward(const context& ctx, mat<const T, C> x, vec<const Weight> gain, mat<const T, C> dy,
                                 mat<T, C> dx, vec<T> dgain, T eps, vec<T> scratch) {
        if constexpr (!std::is_same_v<Weight, T>) {
            const auto wide = widened(gain.as_matrix(1, gain.size()));
            return backend<T>::template rmsnorm_backward<C>(ctx, x, vec<const T>(wide.data.data(), wide.cols), dy, dx, dgain, eps, scratch);
        }
        using array = Eigen::Array<T, detail::eigen_extent(C), 1>;
        const index_t n = x.cols();
        const int threads = backward_threads(ctx, x.rows());
        check_size(rmsnorm_backward_scratch(ctx, x.rows(), n), scratch.size(), "rmsnorm_backward scratch", true);
        const index_t chunk = (x.rows() + threads - 1) / threads;
        parallel_for(threads, threads, [&](index_t t_) {
            const auto t = static_cast<int>(t_);
            const Eigen::Map<const array> g(gain.data(), n);
            Eigen::Map<array> partial(scratch.data() + t * n, n);
            partial.setZero();
            for (index_t r = t * chunk; r < std::min(x.rows(), (t + 1) * chunk); ++r) {
                const Eigen::Map<const array> in(x.row(r), n), d(dy.row(r), n);
                Eigen::Map<array> out(dx.row(r), n);
                const T inv = T(1) / std::sqrt(in.square().sum() / static_cast<T>(n) + eps);
                const T dot = (d * g * in).sum();
                partial += d * in * inv;
                out += inv * d * g - in * (inv * inv * inv * dot / static_cast<T>(n));
            }
        });
        Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> dg(dgain.data(), n);
        for (int t = 0; t < threads; ++t) dg += Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(scratch.data() + t * n, n);
    }
    static void rmsnorm_backward(const context& ctx, mat<const T> x, vec<const Weight> gain, mat<const T> dy, mat<T> dx,
                                 vec<T> dgain, T eps, vec<T> scratch) {
        rmsnorm_backward<dynamic_extent>(ctx, x, gain, dy, dx, dgain, eps, scratch);
    }

    // ---- RoPE, rotate-half, pairs (j, j + d/2), inv_freq_j = theta^(-2j/d), at each row's position,
    // in place over the heads that `layout` names. One cos/sin per row and frequency serves every
    // head (rope_angles). The rotation is orthogonal: `inverse` rotates by the negated angle (the
    // backward).
    static constexpr index_t rope_rows = 16;
    template <index_t D>
    static void rope(const context& ctx, mat<T> x, rope_layout<D> layout, vec<const int> positions, double theta,
                     bool inverse = false) {
        const int d = static_cast<int>(layout.head_dim.value());
        check_size(x.rows(), positions.size(), "rope positions");
        rope_angles(ctx, x.rows(), d, positions, theta, inverse, [&](index_t r, int j0, int n, const T* c, const T* s) {
            T* row = x.row(r);
            for (int g = 0; g < layout.groups; ++g)
                for (int h = 0; h < layout.heads_per_group; ++h) {
                    T* head = row + g * layout.group_stride + static_cast<index_t>(h) * d + j0;
                    rotate_half(head, head, n, d / 2, c, s);
                }
        });
    }

    // split_qkv with RoPE on the way (an optional op: the attention layer calls it where the policy
    // has it, else rope then split_qkv): q and k receive each group's queries and key rotated at the
    // row's position, v its value; qkv is left as it was. One pass over the rows instead of two,
    // the same numbers.
    template <index_t D, class E = T>
    static void split_qkv_rope(const context& ctx, mat<const T> qkv, mat<T> q, mat<E> k, mat<E> v, attention_shape<D> shape,
                               vec<const int> positions, double theta) {
        const index_t d = shape.head_dim.value();
        const int G = shape.heads / shape.kv_heads;
        check_size(qkv.rows(), positions.size(), "rope positions");
        rope_angles(ctx, qkv.rows(), static_cast<int>(d), positions, theta, false, [&](index_t r, int j0, int n, const T* c, const T* s) {
            for (int g = 0; g < shape.kv_heads; ++g) {
                const T* src = qkv.row(r) + g * (G + 2) * d;
                for (int h = 0; h < G; ++h) rotate_half(src + h * d + j0, q.row(r) + (g * G + h) * d + j0, n, d / 2, c, s);
                rotate_half(src + G * d + j0, k.row(r) + g * d + j0, n, d / 2, c, s);
                if (j0 == 0) store_row(src + (G + 1) * d, d, v.row(r) + g * d);
            }
        });
    }

    // ---- causal attention of one sequence
    // Keys and values may be kept in bf16 (float compute): split_qkv rounds them to the nearest
    // bf16, attention widens them as it reads. Prefill with bf16 or q8 weights runs its products in
    // bf16 where the CPU has AMX tiles or AVX512_BF16 (bf16_attention).
    static constexpr bool kv_bf16 = std::is_same_v<T, float>;
    static constexpr index_t attention_tile = 64;  // query rows per score tile: bounds scratch and masked work
    // Scratch of attention(): prefill, one [tile x n_ctx] score tile per thread (and with bf16
    // keys and values, the thread's head's keys and values widened, 2 x [n_ctx x d]); decode, a
    // score row per head; prefill in bf16 products, a head's keys, values and a block's scores and
    // weights in the engines' layouts per thread (bf16_attention.hpp).
    template <index_t D>
    static index_t attention_scratch(const context& ctx, index_t q_rows, index_t n_ctx, attention_shape<D> shape,
                                     kv_dtype kv = kv_dtype::compute) {
        const index_t threads = std::max(1, std::min(ctx.threads, shape.heads));
        index_t per_thread = attention_thread_scratch(std::min(attention_tile, std::max<index_t>(q_rows, 1)), n_ctx,
                                                      shape.head_dim.value(), kv == kv_dtype::bf16);
        if (bf16_attention_possible(q_rows)) per_thread = std::max(per_thread, bf16_attention_thread_scratch(n_ctx, shape.head_dim.value()));
        return std::max<index_t>(threads * per_thread, shape.heads * n_ctx);
    }
    // q: [T x H*d] (head h at column h*d); keys, values: [n_ctx x Hkv*d] of T or bf16, the first
    // n_ctx - T positions are the past. Query row i sits at position n_ctx - T + i and sees keys
    // 0..that position. out: [T x H*d]. Heads run in parallel, each thread on its own score tile.
    template <index_t D, class E = T>
    static void attention(const context& ctx, mat<const T> q, mat<const E> keys, mat<const E> values, mat<T> out,
                          attention_shape<D> shape, T scale, vec<T> scratch) {
        static_assert(std::is_same_v<E, T> || (kv_bf16 && std::is_same_v<E, bf16>), "cpu backend: keys and values of T or bf16");
        using head_matrix = Eigen::Matrix<T, Eigen::Dynamic, detail::eigen_extent(D), Eigen::RowMajor>;
        using head_map = Eigen::Map<const head_matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
        if (q.rows() == 1) return attention_decode(ctx, q, keys, values, out, shape, scale, scratch);
        if constexpr (std::is_same_v<T, float>)  // (backend<double> instantiates no float kernel)
            if (bf16_attention(ctx, q.rows())) return attention_bf16(ctx, q, keys, values, out, shape, scale, scratch);
        if constexpr (simd_prefill_attention) return attention_prefill(ctx, q, keys, values, out, shape, scale, scratch);
        const index_t T_q = q.rows(), n_ctx = keys.rows(), past = n_ctx - T_q, d = shape.head_dim.value();
        const int group = shape.heads / shape.kv_heads;
        const index_t tile = std::min(attention_tile, std::max<index_t>(T_q, 1));
        constexpr bool widen = !std::is_same_v<E, T>;
        const index_t per_thread = attention_thread_scratch(tile, n_ctx, d, widen);
        // Heads are independent, so a smaller scratch only means fewer threads, never other results.
        const int threads = scratch_threads(std::min(ctx.threads, shape.heads), per_thread, scratch, "attention");
        parallel_for(threads, threads, [&](index_t t_) {
            const auto t = static_cast<int>(t_);
            T* tile_memory = scratch.data() + static_cast<index_t>(t) * per_thread;
            T* wide_keys = tile_memory + tile * n_ctx;  // bf16: the head's keys and values as T
            T* wide_values = wide_keys + n_ctx * d;
            int widened_group = -1;
            const auto [h0, h1] = heads_of_thread(t, threads, shape.heads);
            for (int h = h0; h < h1; ++h) {
                const int g = h / group;
                const T* k_at = nullptr;
                const T* v_at = nullptr;
                index_t stride = 0;
                if constexpr (widen) {
                    if (g != widened_group) {
                        for (index_t j = 0; j < n_ctx; ++j) {
                            kernels::widen(keys.row(j) + g * d, d, wide_keys + j * d);
                            kernels::widen(values.row(j) + g * d, d, wide_values + j * d);
                        }
                        widened_group = g;
                    }
                    k_at = wide_keys, v_at = wide_values, stride = d;
                } else {
                    k_at = keys.data() + g * d, v_at = values.data() + g * d, stride = keys.stride();
                }
                const head_map K(k_at, n_ctx, d, Eigen::OuterStride<>(stride));
                const head_map V(v_at, n_ctx, d, Eigen::OuterStride<>(widen ? stride : values.stride()));
                for (index_t r0 = 0; r0 < T_q; r0 += tile) {
                    const index_t rows = std::min(tile, T_q - r0);
                    const index_t visible = past + r0 + rows;  // keys the last row of the tile sees
                    const head_map Q(q.row(r0) + h * d, rows, d, Eigen::OuterStride<>(q.stride()));
                    Eigen::Map<matrix> scores(tile_memory, rows, visible);
                    scores.noalias() = (Q * K.topRows(visible).transpose()) * scale;
                    for (index_t i = 0; i < rows; ++i) {
                        const index_t seen = past + r0 + i + 1;
                        auto s = scores.row(i);
                        const T m = s.head(seen).maxCoeff();
                        s.head(seen) = (s.head(seen).array() - m).exp();
                        s.head(seen) /= s.head(seen).sum();
                        if (seen < visible) s.tail(visible - seen).setZero();
                    }
                    map O(out.row(r0) + h * d, rows, d, Eigen::OuterStride<>(out.stride()));
                    O.noalias() = scores * V.topRows(visible);
                }
            }
        });
    }

    // Scratch of attention_backward(): two [tile x n] tiles (probabilities and their gradient) per thread.
    template <index_t D>
    static index_t attention_backward_scratch(const context& ctx, index_t n, attention_shape<D> shape) {
        return static_cast<index_t>(std::max(1, std::min(ctx.threads, shape.kv_heads))) * 2 * std::min(attention_tile, std::max<index_t>(n, 1)) * n;
    }
    // The backward of attention() for one sequence without a past (training): from q, keys,
    // values and d_out, writes dq [T x H*d] and dk, dv [T x Hkv*d]. The probabilities are
    // recomputed tile by tile. kv groups run in parallel; the heads of a group add into its dk and
    // dv in head order.
    template <index_t D>
    static void attention_backward(const context& ctx, mat<const T> q, mat<const T> keys, mat<const T> values,
                                   mat<const T> d_out, mat<T> dq, mat<T> dk, mat<T> dv, attention_shape<D> shape, T scale,
                                   vec<T> scratch) {
        const index_t n = q.rows(), d = shape.head_dim.value();
        const int group = shape.heads / shape.kv_heads;
        const index_t tile = std::min(attention_tile, std::max<index_t>(n, 1));
        const int threads = scratch_threads(std::min(ctx.threads, shape.kv_heads), 2 * tile * n, scratch, "attention_backward");
        parallel_for(threads, threads, [&](index_t t_) {
            const auto t = static_cast<int>(t_);
            T* p_memory = scratch.data() + static_cast<index_t>(t) * 2 * tile * n;
            T* dp_memory = p_memory + tile * n;
            for (int g = t; g < shape.kv_heads; g += threads) {
                const auto K = eigen(mat<const T>{keys.data() + g * d, n, d, keys.stride()});
                const auto V = eigen(mat<const T>{values.data() + g * d, n, d, values.stride()});
                auto dK = eigen(mat<T>{dk.data() + g * d, n, d, dk.stride()});
                auto dV = eigen(mat<T>{dv.data() + g * d, n, d, dv.stride()});
                dK.setZero();
                dV.setZero();
                for (int h = g * group; h < (g + 1) * group; ++h)
                    for (index_t r0 = 0; r0 < n; r0 += tile) {
                        const index_t rows = std::min(tile, n - r0), visible = r0 + rows;
                        const auto Q = eigen(mat<const T>{q.row(r0) + h * d, rows, d, q.stride()});
                        const auto dO = eigen(mat<const T>{d_out.row(r0) + h * d, rows, d, d_out.stride()});
                        auto dQ = eigen(mat<T>{dq.row(r0) + h * d, rows, d, dq.stride()});
                        Eigen::Map<matrix> p(p_memory, rows, visible), dp(dp_memory, rows, visible);
                        p.noalias() = (Q * K.topRows(visible).transpose()) * scale;
                        for (index_t i = 0; i < rows; ++i) {
                            const index_t seen = r0 + i + 1;
                            auto s = p.row(i);
                            const T m = s.head(seen).maxCoeff();
                            s.head(seen) = (s.head(seen).array() - m).exp();
                            s.head(seen) /= s.head(seen).sum();
                            if (seen < visible) s.tail(visible - seen).setZero();
                        }
                        dV.topRows(visible).noalias() += p.transpose() * dO;
                        dp.noalias() = dO * V.topRows(visible).transpose();
                        // d scores = P o (dP - rowsum(P o dP)), times the score scale
                        for (index_t i = 0; i < rows; ++i) {
                            const T centre = (dp.row(i).array() * p.row(i).array()).sum();
                            dp.row(i) = (p.row(i).array() * (dp.row(i).array() - centre) * scale).matrix();
                        }
                        dQ.noalias() = dp * K.topRows(visible);
                        dK.topRows(visible).noalias() += dp.transpose() * Q;
                    }
            }
        });
    }

    // ---- mixture of experts: the reference policy's contracts (reference/backend.hpp). Routing,
    // gathers and scatters run serially in pair order (a small share of an MoE layer's work; every
    // result repeats exactly); the grouped products are this policy's threaded products per expert.
    static void moe_route(const context&, mat<const T> logits, int k, vec<int> experts, vec<T> weights, vec<int> order, vec<int> offsets) {
        const index_t R = logits.rows(), E = logits.cols();
        if (k < 1 || k > E || experts.size() != R * k || weights.size() != R * k || order.size() != R * k || offsets.size() != E + 1)
            vwt::detail::fail("cpu backend: moe_route: shapes (", R, " rows, ", E, " experts, k ", k, ")");
        for (index_t r = 0; r < R; ++r) {
            const T* z = logits.row(r);
            int* chosen = experts.data() + r * k;
            for (int slot = 0; slot < k; ++slot) {  // k is small (1..8): selection by k passes
                index_t best = -1;
                for (index_t e = 0; e < E; ++e)
                    if ((best < 0 || z[e] > z[best]) && std::find(chosen, chosen + slot, int(e)) == chosen + slot) best = e;
                chosen[slot] = int(best);
            }
            const double top = double(z[chosen[0]]);
            double sum = 0;
            for (int slot = 0; slot < k; ++slot) sum += std::exp(double(z[chosen[slot]]) - top);
            for (int slot = 0; slot < k; ++slot) weights[r * k + slot] = T(std::exp(double(z[chosen[slot]]) - top) / sum);
        }
        // counting sort of the pairs by expert, stable
        std::fill(offsets.data(), offsets.data() + E + 1, 0);
        for (index_t pair = 0; pair < R * k; ++pair) ++offsets[experts[pair] + 1];
        for (index_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
        for (index_t pair = 0; pair < R * k; ++pair) order[offsets[experts[pair]]++] = int(pair);
        for (index_t e = E; e > 0; --e) offsets[e] = offsets[e - 1];  // each cursor ended at the next expert's start
        offsets[0] = 0;
    }
    static void moe_route_backward(const context&, vec<const int> experts, vec<const T> weights, vec<const T> d_weights, mat<T> d_logits) {
        const index_t R = d_logits.rows(), E = d_logits.cols(), k = R > 0 ? experts.size() / R : 0;
        check_size(R * k, experts.size(), "moe_route_backward: experts");
        check_size(R * k, weights.size(), "moe_route_backward: weights");
        check_size(R * k, d_weights.size(), "moe_route_backward: weight gradients");
        for (index_t r = 0; r < R; ++r) {
            double centre = 0;
            for (index_t s = 0; s < k; ++s) centre += double(weights[r * k + s]) * double(d_weights[r * k + s]);
            std::fill(d_logits.row(r), d_logits.row(r) + E, T(0));
            for (index_t s = 0; s < k; ++s) {
                const int e = experts[r * k + s];
                if (e < 0 || e >= E) vwt::detail::fail("cpu backend: moe_route_backward: expert ", e, " outside 0..", E - 1);
                d_logits(r, e) = T(double(weights[r * k + s]) * (double(d_weights[r * k + s]) - centre));
            }
        }
    }
    static void moe_aux_loss(const context&, mat<const T> logits, vec<const int> experts, T scale, mat<T> d_logits, vec<double> out) {
        const index_t R = logits.rows(), E = logits.cols();
        if (R == 0 || experts.size() % R != 0 || d_logits.rows() != R || d_logits.cols() != E || out.size() != 1)
            vwt::detail::fail("cpu backend: moe_aux_loss: shapes (", R, " rows, ", E, " experts, ", experts.size(), " assignments)");
        std::vector<double> f(static_cast<std::size_t>(E), 0.0), p(static_cast<std::size_t>(E), 0.0), soft(static_cast<std::size_t>(E));
        for (index_t j = 0; j < experts.size(); ++j) {
            if (experts[j] < 0 || experts[j] >= E) vwt::detail::fail("cpu backend: moe_aux_loss: expert ", experts[j], " outside 0..", E - 1);
            f[static_cast<std::size_t>(experts[j])] += 1.0 / double(experts.size());
        }
        // p needs every token before any gradient: one pass for p and the z-loss, one for d_logits
        const auto softmax_row = [&](index_t r) {
            const T* z = logits.row(r);
            double top = -std::numeric_limits<double>::infinity(), sum = 0;
            for (index_t e = 0; e < E; ++e) top = std::max(top, double(z[e]));
            for (index_t e = 0; e < E; ++e) sum += std::exp(double(z[e]) - top);
            const double lse = top + std::log(sum);
            for (index_t e = 0; e < E; ++e) soft[static_cast<std::size_t>(e)] = std::exp(double(z[e]) - lse);
            return lse;
        };
        double z_loss = 0;
        for (index_t r = 0; r < R; ++r) {
            const double lse = softmax_row(r);
            z_loss += lse * lse / double(R);
            for (index_t e = 0; e < E; ++e) p[static_cast<std::size_t>(e)] += soft[static_cast<std::size_t>(e)] / double(R);
        }
        double balance = 0;
        for (index_t e = 0; e < E; ++e) balance += f[static_cast<std::size_t>(e)] * p[static_cast<std::size_t>(e)];
        out[0] = double(E) * balance + 0.1 * z_loss;
        for (index_t r = 0; r < R; ++r) {
            const double lse = softmax_row(r);
            double fs = 0;
            for (index_t e = 0; e < E; ++e) fs += f[static_cast<std::size_t>(e)] * soft[static_cast<std::size_t>(e)];
            for (index_t e = 0; e < E; ++e) {
                const double s = soft[static_cast<std::size_t>(e)];
                d_logits(r, e) += T(double(scale) * (double(E) / double(R) * s * (f[static_cast<std::size_t>(e)] - fs) + 0.2 * lse * s / double(R)));
            }
        }
    }
    static void gather_rows(const context&, mat<const T> x, vec<const int> order, int k, vec<const T> weights, T alpha, mat<T> out) {
        check_size(order.size(), out.rows(), "gather_rows: rows");
        check_size(x.cols(), out.cols(), "gather_rows: columns");
        if (!weights.empty()) check_size(order.size(), weights.size(), "gather_rows: weights");
        for (index_t j = 0; j < out.rows(); ++j) {
            const T f = alpha * (weights.empty() ? T(1) : weights[order[j]]);
            const T* from = x.row(pair_row(order[j], k, x.rows(), "gather_rows"));
            T* to = out.row(j);
            for (index_t c = 0; c < x.cols(); ++c) to[c] = f * from[c];
        }
    }
    static void scatter_add_rows(const context&, mat<const T> x, vec<const int> order, int k, vec<const T> weights, mat<T> y, T alpha) {
        check_size(order.size(), x.rows(), "scatter_add_rows: rows");
        check_size(y.cols(), x.cols(), "scatter_add_rows: columns");
        if (!weights.empty()) check_size(order.size(), weights.size(), "scatter_add_rows: weights");
        for (index_t j = 0; j < x.rows(); ++j) {
            const T f = alpha * (weights.empty() ? T(1) : weights[order[j]]);
            T* to = y.row(pair_row(order[j], k, y.rows(), "scatter_add_rows"));
            const T* from = x.row(j);
            for (index_t c = 0; c < x.cols(); ++c) to[c] += f * from[c];
        }
    }
    static void pair_dots(const context&, mat<const T> x, vec<const int> order, int k, mat<const T> y, vec<T> out) {
        check_size(order.size(), x.rows(), "pair_dots: rows");
        check_size(order.size(), out.size(), "pair_dots: output");
        check_size(y.cols(), x.cols(), "pair_dots: columns");
        for (index_t j = 0; j < x.rows(); ++j) {
            const T* a = x.row(j);
            const T* b = y.row(pair_row(order[j], k, y.rows(), "pair_dots"));
            T dot = 0;
            for (index_t c = 0; c < x.cols(); ++c) dot += a[c] * b[c];
            out[order[j]] = dot;
        }
    }
    // The products of an MoE layer's expert groups, whose row counts change from call to call: their
    // bf16 products take the row count at run time (product_shapes::varying_rows).
    static context grouped(const context& ctx) {
        context c = ctx;
        c.shapes = product_shapes::varying_rows;
        return c;
    }
    static void grouped_matmul_nt(const context& ctx_, mat<const T> x, vec<const int> offsets, mat<const Weight> w, mat<T> y, T alpha = T(1),
                                  T beta = T(0)) {
        const auto ctx = grouped(ctx_);
        for_each_expert(offsets, x.rows(), w.rows(), y.cols(), "grouped_matmul_nt", [&](index_t e, index_t begin, index_t end, index_t n) {
            if (begin < end) matmul_nt(ctx, x.rows_range(begin, end), w.rows_range(e * n, (e + 1) * n), y.rows_range(begin, end), alpha, beta);
        });
    }
    static void grouped_matmul_nn(const context& ctx_, mat<const T> x, vec<const int> offsets, mat<const Weight> w, mat<T> y, T alpha = T(1),
                                  T beta = T(0)) {
        const auto ctx = grouped(ctx_);
        for_each_expert(offsets, x.rows(), w.rows(), x.cols(), "grouped_matmul_nn", [&](index_t e, index_t begin, index_t end, index_t n) {
            if (begin < end) matmul_nn(ctx, x.rows_range(begin, end), w.rows_range(e * n, (e + 1) * n), y.rows_range(begin, end), alpha, beta);
        });
    }
    static void grouped_matmul_tn(const context& ctx_, mat<const T> a, mat<const T> b, vec<const int> offsets, mat<T> y, T alpha = T(1),
                                  T beta = T(0)) {
        const auto ctx = grouped(ctx_);
        check_size(a.rows(), b.rows(), "grouped_matmul_tn: rows");
        for_each_expert(offsets, a.rows(), y.rows(), a.cols(), "grouped_matmul_tn", [&](index_t e, index_t begin, index_t end, index_t n) {
            const auto y_e = y.rows_range(e * n, (e + 1) * n);
            if (begin < end) return matmul_tn(ctx, a.rows_range(begin, end), b.rows_range(begin, end), y_e, alpha, beta);
            for (index_t r = 0; r < n; ++r)  // an expert without tokens: its product is 0
                for (index_t c = 0; c < y_e.cols(); ++c) y_e(r, c) = beta == T(0) ? T(0) : beta * y_e(r, c);
        });
    }

    // ---- SwiGLU: out[:, j] = u[:, j] * silu(g[:, j]); split: u is the first `inter` columns of
    // fused, g the next `inter`; interleaved: u_j and g_j are columns 2j and 2j + 1.
    static void swiglu(const context& ctx, mat<const T> fused, mat<T> out, index_t inter, swiglu_layout layout) {
        if constexpr (std::is_same_v<T, float>) return swiglu_rows(ctx, fused, inter, layout, out.data(), out.stride());
        using array = Eigen::Array<T, Eigen::Dynamic, 1>;
        using strided = Eigen::Map<const array, Eigen::Unaligned, Eigen::InnerStride<2>>;
        parallel_for(ctx.threads, fused.rows(), [&](index_t r) {
            Eigen::Map<array> o(out.row(r), inter);
            if (layout == swiglu_layout::interleaved) {
                const strided u(fused.row(r), inter), g(fused.row(r) + 1, inter);
                o = u * g / (T(1) + (-g).exp());
            } else {  // contiguous halves: Eigen's vectorised exp
                const Eigen::Map<const array> u(fused.row(r), inter), g(fused.row(r) + inter, inter);
                o = u * g / (T(1) + (-g).exp());
            }
        });
    }
    // SwiGLU of each row of fused into row r of out at out + r * ld (float or bf16), the rows over
    // the threads.
    template <class Out>
    static void swiglu_rows(const context& ctx, mat<const T> fused, index_t inter, swiglu_layout layout, Out* out, index_t ld) {
        const bool split = layout == swiglu_layout::split;
        parallel_for(ctx.threads, fused.rows(), [&](index_t r) {
            kernels::swiglu(fused.row(r), fused.row(r) + (split ? inter : 1), split ? 1 : 2, inter, out + r * ld);
        });
    }
    // y = alpha * swiglu(fused) . w^T + beta * y: swiglu, then matmul_nt, with `act` ([rows x
    // inter]) as swiglu's output. Where the product runs on bf16 operands through oneDNN, SwiGLU
    // writes its output rounded to bf16 straight into act's memory, the product's operand (the
    // same numbers as rounding the float output: one pass over the activations instead of three).
    static void swiglu_matmul_nt(const context& ctx, mat<const T> fused, mat<T> act, index_t inter, swiglu_layout layout,
                                 mat<const Weight> w, mat<T> y, T alpha = T(1), T beta = T(0)) {
        check_size(fused.rows(), act.rows(), "swiglu_matmul_nt act rows");
        check_size(inter, act.cols(), "swiglu_matmul_nt act cols");
#if defined(VWT_WITH_ONEDNN)
        if constexpr (std::is_same_v<T, float>) {
            if (bf16_products(ctx, fused.rows()) && act.stride() == inter && kernels::bf16_products_pay()) {
                check_product(act.rows(), inter, w.rows(), w.cols() * per_item, y, "swiglu_matmul_nt", true);
                bf16* operand = reinterpret_cast<bf16*>(act.data());  // rows x inter bf16 fill the first half of act
                swiglu_rows(ctx, fused, inter, layout, operand, inter);
                if (onednn::gemm_bf16(*ctx.cache, ctx.threads, 'N', 'T', act.rows(), w.rows(), inter, alpha, operand, inter, w.data(),
                                      w.stride(), beta, y.data(), y.stride(), ctx.shapes))
                    return;
            }
        }
#endif
        swiglu(ctx, fused, act, inter, layout);
        matmul_nt(ctx, act.as_const(), w, y, alpha, beta);
    }
    // The whole SwiGLU MLP: y = alpha * swiglu(x . c_fc^T) . c_proj^T + beta * y, with `fused`
    // ([rows x 2 inter]) and `act` ([rows x inter]) as scratch (an optional op: the MLP layer calls it
    // where the policy has it and nothing needs c_fc's output afterwards). With bf16 or q8 weights and
    // bf16 products through oneDNN, SwiGLU runs inside the products (onednn::swiglu_products_bf16): the
    // gate's product stores silu of its sums, the up product multiplies its sums by them and stores
    // bf16, the operand of c_proj; x is rounded to bf16 once for both. Else matmul_nt, then
    // swiglu_matmul_nt. The numbers are those of rounding the float SwiGLU output, up to the
    // exponential's last bit.
    static void swiglu_mlp(const context& ctx, mat<const T> x, mat<const Weight> c_fc, mat<T> fused, mat<T> act, index_t inter,
                           swiglu_layout layout, mat<const Weight> c_proj, mat<T> y, T alpha = T(1), T beta = T(0)) {
#if defined(VWT_WITH_ONEDNN)
        if constexpr (std::is_same_v<T, float> && !std::is_same_v<Weight, float>) {
            const index_t rows = x.rows(), w = x.cols();
            if (bf16_products(ctx, rows) && ctx.shapes == product_shapes::fixed && fused.stride() == 2 * inter && act.stride() == inter &&
                kernels::bf16_products_pay()) {
                check_product(rows, w, c_fc.rows(), c_fc.cols() * per_item, fused, "swiglu_mlp c_fc", false);
                check_size(2 * inter, c_fc.rows(), "swiglu_mlp c_fc rows");
                check_size(rows, act.rows(), "swiglu_mlp act rows");
                check_product(rows, inter, c_proj.rows(), c_proj.cols() * per_item, y, "swiglu_mlp c_proj", true);
                float* silu_g = fused.data();  // the first rows x inter floats
                bf16* act16 = reinterpret_cast<bf16*>(act.data());  // rows x inter bf16 fill the first half of act
                const bool split = layout == swiglu_layout::split;
                const Weight* u = c_fc.data();
                const Weight* g = split ? c_fc.row(inter) : c_fc.data() + c_fc.stride();
                const index_t ldw = split ? c_fc.stride() : 2 * c_fc.stride();
                if (onednn::swiglu_products_bf16(*ctx.cache, ctx.threads, rows, inter, w, x.data(), x.stride(), u, g, ldw, silu_g, act16) &&
                    onednn::gemm_bf16(*ctx.cache, ctx.threads, 'N', 'T', rows, c_proj.rows(), inter, alpha, act16, inter, c_proj.data(),
                                      c_proj.stride(), beta, y.data(), y.stride(), ctx.shapes))
                    return;
            }
        }
#endif
        matmul_nt(ctx, x, c_fc, fused);
        swiglu_matmul_nt(ctx, fused.as_const(), act, inter, layout, c_proj, y, alpha, beta);
    }
    static void swiglu_backward(const context& ctx, mat<const T> fused, mat<const T> d_out, mat<T> d_fused, index_t inter,
                                swiglu_layout layout) {
        const bool split = layout == swiglu_layout::split;
        const index_t gate = split ? inter : 1, step = split ? 1 : 2;
        parallel_for(ctx.threads, fused.rows(), [&](index_t r) {
            T* d = d_fused.row(r);
            kernels::swiglu_backward(fused.row(r), fused.row(r) + gate, step, d_out.row(r), inter, d, d + gate);
        });
    }

    // ---- embedding: rows of x = scale * table[ids] (columns [0, table.cols)), the rest zero.
    static void embed(const context&, mat<const Weight> table, vec<const int> ids, mat<T> x, T scale) {
        check_size(x.rows(), ids.size(), "embed ids");
        const index_t h = table.cols() * per_item;
        for (index_t r = 0; r < x.rows(); ++r) {
            const Weight* src = table.row(ids[r]);
            T* dst = x.row(r);
            for (index_t c = 0; c < h; ++c) dst[c] = scale * static_cast<T>(weight_at(src, c));
            for (index_t c = h; c < x.cols(); ++c) dst[c] = T(0);
        }
    }
    // table rows += scale * the first table.cols columns of dx's rows, row ids[r] for row r, in row
    // order (repeated ids add up deterministically).
    static void embed_backward(const context&, mat<const T> dx, vec<const int> ids, mat<T> table, T scale) {
        for (index_t r = 0; r < dx.rows(); ++r) {
            const T* src = dx.row(r);
            T* dst = table.row(ids[r]);
            for (index_t c = 0; c < table.cols(); ++c) dst[c] += scale * src[c];
        }
    }

    // ---- softmax cross-entropy of each row of logits against targets[r]: row_losses[r] = -log
    // p(target) (in double), and logits overwritten with grad_scale * (softmax - onehot).
    static void cross_entropy(const context& ctx, mat<T> logits, vec<const int> targets, T grad_scale, vec<double> row_losses) {
        using array = Eigen::Array<T, Eigen::Dynamic, 1>;
        check_size(logits.rows(), targets.size(), "cross_entropy targets");
        check_size(logits.rows(), row_losses.size(), "cross_entropy losses");
        parallel_for(ctx.threads, logits.rows(), [&](index_t r) {
            Eigen::Map<array> z(logits.row(r), logits.cols());
            const T m = z.maxCoeff(), target = z(targets[r]);
            z = (z - m).exp();
            const T sum = z.sum();
            row_losses[r] = std::log(static_cast<double>(sum)) + static_cast<double>(m - target);
            z *= grad_scale / sum;
            z(targets[r]) -= grad_scale;
        });
    }

    // ---- layout moves. The fused qkv rows hold, per kv group, G query heads, its key, its value.
    // Keys and values of bf16 are rounded to the nearest bf16.
    template <index_t D, class E = T>
    static void split_qkv(const context& ctx, mat<const T> qkv, mat<T> q, mat<E> k, mat<E> v, attention_shape<D> shape) {
        const index_t d = shape.head_dim.value();
        const int G = shape.heads / shape.kv_heads;
        parallel_for(ctx.threads, qkv.rows(), [&](index_t r) {
            for (int g = 0; g < shape.kv_heads; ++g) {
                const T* src = qkv.row(r) + g * (G + 2) * d;
                std::copy(src, src + G * d, q.row(r) + g * G * d);
                store_row(src + G * d, d, k.row(r) + g * d);
                store_row(src + (G + 1) * d, d, v.row(r) + g * d);
            }
        });
    }
    template <index_t D>
    static void join_qkv(const context& ctx, mat<const T> q, mat<const T> k, mat<const T> v, mat<T> qkv, attention_shape<D> shape) {
        const index_t d = shape.head_dim.value();
        const int G = shape.heads / shape.kv_heads;
        parallel_for(ctx.threads, qkv.rows(), [&](index_t r) {
            for (int g = 0; g < shape.kv_heads; ++g) {
                T* dst = qkv.row(r) + g * (G + 2) * d;
                std::copy(q.row(r) + g * G * d, q.row(r) + (g + 1) * G * d, dst);
                std::copy(k.row(r) + g * d, k.row(r) + (g + 1) * d, dst + G * d);
                std::copy(v.row(r) + g * d, v.row(r) + (g + 1) * d, dst + (G + 1) * d);
            }
        });
    }
    static void copy(const context& ctx, mat<const T> from, mat<T> to) {
        parallel_for(ctx.threads, from.rows(), [&](index_t r) { std::copy(from.row(r), from.row(r) + from.cols(), to.row(r)); });
    }
    // The mean and the population standard deviation of n values, in double.
    struct moments {
        double mean, std;
    };
    static moments row_moments(const T* row, index_t n) {
        double sum = 0, squares = 0;
        for (index_t c = 0; c < n; ++c) sum += row[c];
        const double mean = sum / static_cast<double>(n);
        for (index_t c = 0; c < n; ++c) squares += (row[c] - mean) * (row[c] - mean);
        return {mean, std::sqrt(squares / static_cast<double>(n))};
    }
    static void fill(const context&, mat<T> x, T value) {
        for (index_t r = 0; r < x.rows(); ++r) std::fill(x.row(r), x.row(r) + x.cols(), value);
    }

    // ---- the gaussian resize: columns [from, to) of row r become mean + std * z, the mean and
    // population standard deviation of its first `from` columns and z = gaussian_noise(key,
    // positions[r], column) (detail/gaussian_noise.hpp); in double.
    static void gaussian_pad(const context& ctx, mat<T> x, index_t from, index_t to, vec<const int> positions, std::uint64_t key) {
        check_size(x.rows(), positions.size(), "gaussian_pad positions");
        parallel_for(ctx.threads, x.rows(), [&](index_t r) {
            T* row = x.row(r);
            const auto [mean, std] = row_moments(row, from);
            for (index_t c = from; c < to; ++c)
                row[c] = static_cast<T>(mean + std * vwt::detail::gaussian_noise(key, positions[r], static_cast<int>(c)));
        });
    }
    // Its backward: dx's columns [from, to) flow into its first `from` through the mean and the
    // standard deviation (x_in: those columns as the pad read them), then are zeroed.
    static void gaussian_pad_backward(const context& ctx, mat<const T> x_in, mat<T> dx, index_t from, index_t to, vec<const int> positions,
                                      std::uint64_t key) {
        check_size(dx.rows(), positions.size(), "gaussian_pad_backward positions");
        parallel_for(ctx.threads, dx.rows(), [&](index_t r) {
            const T* in = x_in.row(r);
            T* d = dx.row(r);
            const auto [mean, std] = row_moments(in, from);
            double d_mean = 0, d_std = 0;
            for (index_t c = from; c < to; ++c) {
                d_mean += d[c];
                d_std += d[c] * vwt::detail::gaussian_noise(key, positions[r], static_cast<int>(c));
                d[c] = T(0);
            }
            const double n = static_cast<double>(from), std_term = std > 0 ? d_std / (n * std) : 0.0;
            for (index_t c = 0; c < from; ++c) d[c] += static_cast<T>(d_mean / n + std_term * (in[c] - mean));
        });
    }

    // ---- the optimizer's vector ops
    // The optimizer's vectors in blocks of vector_block items, over the threads.
    static constexpr index_t vector_block = index_t{1} << 14;
    static void scale(const context& ctx, vec<T> x, T s) {
        const index_t n = x.size();
        parallel_for(ctx.threads, (n + vector_block - 1) / vector_block, [&](index_t b) {
            T* p = x.data() + b * vector_block;
            for (index_t i = 0, end = std::min(vector_block, n - b * vector_block); i < end; ++i) p[i] *= s;
        });
    }
    // out[0] = sum of squares in double: each block of vector_block items in 8 interleaved partial
    // sums (item i into sum i % 8: a vector of doubles instead of one chain of dependent adds, the
    // latency-bound loop that took 2% of a tiny_l8 training step), added pairwise; the blocks'
    // sums added in order. The same value for any thread count.
    static void sum_squares(const context& ctx, vec<const T> x, vec<double> out) {
        const index_t n = x.size(), blocks = (n + vector_block - 1) / vector_block;
        std::vector<double> sums(static_cast<std::size_t>(blocks));
        parallel_for(ctx.threads, blocks, [&](index_t b) {
            const T* p = x.data() + b * vector_block;
            const index_t end = std::min(vector_block, n - b * vector_block);
            double lane[8] = {};
            index_t i = 0;
            for (; i + 8 <= end; i += 8)
                for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(p[i + k]) * static_cast<double>(p[i + k]);
            for (; i < end; ++i) lane[i % 8] += static_cast<double>(p[i]) * static_cast<double>(p[i]);
            sums[static_cast<std::size_t>(b)] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        });
        double sq = 0;
        for (const double s : sums) sq += s;
        out[0] = sq;
    }
    static void adamw(const context& ctx, vec<Weight> params, vec<const T> grads, vec<State> m, vec<State> v, adamw_update u) {
        if constexpr (per_item > 1) {
            vwt::detail::fail("adamw: q8 weights are an inference format; train with float weights and quantize the result");
        } else {
            check_size(params.size(), grads.size(), "adamw gradients");
            const T b1 = static_cast<T>(u.beta1), b2 = static_cast<T>(u.beta2), c1 = static_cast<T>(1 - u.beta1),
                    c2 = static_cast<T>(1 - u.beta2), decay = static_cast<T>(u.decay), step = static_cast<T>(u.step_size),
                    root = static_cast<T>(u.root_bias2), eps = static_cast<T>(u.eps);
            const index_t n = params.size();
            parallel_for((n > 65536) ? ctx.threads : 1, n, [&](index_t i) {
                m[i] = b1 * m[i] + c1 * grads[i];
                v[i] = b2 * v[i] + c2 * grads[i] * grads[i];
                params[i] = Weight(static_cast<T>(params[i]) * decay - step * m[i] / (std::sqrt(v[i]) / root + eps));
            });
        }
    }

private:
    // RoPE's angles: f(r, j0, n, c, s) for each row r and each chunk of n frequencies from j0, c[i]
    // and s[i] the cos and sin of frequency j0 + i (inv_freq_j = theta^(-2j/d)) at positions[r],
    // negated for `inverse`. Rows run in one task per thread (of at least rope_rows rows each); in
    // a task, a row at the position after the previous row's takes its cos/sin from the previous
    // one by the angle-addition formula in double (one step of inv_freq_j), so that the pow and
    // sin/cos calls are per task, not per row (in tasks of 16 rows, split_qkv_rope of a dense_200m
    // prefill took ~5% longer). Each step adds a relative error of ~1e-16, so even thousands of
    // steps stay far inside float's half step of 6e-8.
    template <class F>
    static void rope_angles(const context& ctx, index_t rows, int d, vec<const int> positions, double theta, bool inverse, F&& f) {
        const int half = d / 2;
        const double sign = inverse ? -1.0 : 1.0;
        constexpr int chunk = 64;  // frequencies per pass, their cos/sin on the stack (decode allocates nothing)
        const index_t tasks = std::max<index_t>(1, std::min<index_t>(ctx.threads, (rows + rope_rows - 1) / rope_rows));
        const index_t task_rows = (rows + tasks - 1) / tasks;
        parallel_for(ctx.threads, tasks, [&](index_t task) {
            const index_t r0 = task * task_rows, r1 = std::min(rows, r0 + task_rows);
            for (int j0 = 0; j0 < half; j0 += chunk) {
                const int n = std::min(chunk, half - j0);
                std::array<double, chunk> frequency, step_cos, step_sin, cos_d, sin_d;
                std::array<T, chunk> c, s;
                for (int j = 0; j < n; ++j) {
                    const auto i = static_cast<std::size_t>(j);
                    frequency[i] = std::pow(theta, -2.0 * (j0 + j) / d);
                    step_cos[i] = std::cos(sign * frequency[i]), step_sin[i] = std::sin(sign * frequency[i]);
                }
                for (index_t r = r0; r < r1; ++r) {
                    const bool next = r > r0 && positions[r] == positions[r - 1] + 1;
                    for (int j = 0; j < n; ++j) {
                        const auto i = static_cast<std::size_t>(j);
                        if (next) {
                            const double cr = cos_d[i] * step_cos[i] - sin_d[i] * step_sin[i];
                            sin_d[i] = sin_d[i] * step_cos[i] + cos_d[i] * step_sin[i];
                            cos_d[i] = cr;
                        } else {
                            const double angle = sign * positions[r] * frequency[i];
                            cos_d[i] = std::cos(angle), sin_d[i] = std::sin(angle);
                        }
                        c[i] = static_cast<T>(cos_d[i]), s[i] = static_cast<T>(sin_d[i]);
                    }
                    f(r, j0, n, c.data(), s.data());
                }
            }
        });
    }
    // The rotate-half pairs (j, j + half) for j < n: from `from` into `to` (the same place, or
    // another; a bf16 `to` receives them rounded to the nearest bf16).
    template <class U>
    static void rotate_half(const T* from, U* to, int n, index_t half, const T* c, const T* s) {
        if constexpr (std::is_same_v<T, float> && std::is_same_v<U, float>) return kernels::rotate_half(from, to, n, half, c, s);
        for (int j = 0; j < n; ++j) {
            const T a = from[j], b = from[j + half];
            store_value(to[j], a * c[j] - b * s[j]);
            store_value(to[j + half], b * c[j] + a * s[j]);
        }
    }
    template <class U>
    static void store_value(U& to, T value) {
        if constexpr (std::is_same_v<U, T>) to = value;
        else to = U(static_cast<float>(value));
    }
    // n values into a row of T (copied) or bf16 (rounded to the nearest).
    template <class U>
    static void store_row(const T* from, index_t n, U* to) {
        if constexpr (std::is_same_v<U, T>) std::copy(from, from + n, to);
        else kernels::round_to_bf16(from, n, to);
    }

    // Whether a product of `rows` rows runs on bf16 operands (see product_precision).
    static bool bf16_products(const context& ctx, index_t rows) {
        switch (ctx.products) {
            case product_precision::f32: return false;
            case product_precision::bf16: return true;
            case product_precision::automatic: return !std::is_same_v<Weight, T> && rows > gemv_rows;
        }
        return false;
    }

    // y = alpha * op(a) . op(b) + beta * y on operands rounded to bf16: oneDNN's bf16 matmul where
    // the build and the CPU have one and it outruns float products (kernels::bf16_products_pay),
    // else the same numbers (exact products of bf16 values, float sums) from float copies of the
    // operands rounded to bf16, handed to `f32_product` with a context whose products are f32. q8
    // weights are dequantized, then rounded.
    template <class A, class Bw, class F32Product>
    static void product_bf16(const context& ctx, char trans_a, char trans_b, index_t m, index_t n, index_t k, T alpha, mat<const A> a,
                             mat<const Bw> b, T beta, mat<T> y, F32Product&& f32_product) {
        if constexpr (!std::is_same_v<T, float>) {
            vwt::detail::fail("cpu backend: bf16 products need float compute, not ", sizeof(T) * 8, "-bit");
        } else {
#if defined(VWT_WITH_ONEDNN)
            if (kernels::bf16_products_pay() && onednn::gemm_bf16(*ctx.cache, ctx.threads, trans_a, trans_b, m, n, k, alpha, a.data(),
                                                                 a.stride(), b.data(), b.stride(), beta, y.data(), y.stride(), ctx.shapes))
                return;
#else
            (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)beta, (void)y;
#endif
            auto ra = rounded_to_bf16(ctx, a), rb = rounded_to_bf16(ctx, b);
            context f32 = ctx;
            f32.products = product_precision::f32;
            f32_product(f32, ra.view().as_const(), rb.view().as_const());
        }
    }

#if defined(VWT_WITH_ONEDNN)
    // matmul_nt of more than gemv_rows rows through oneDNN's sgemm: float weights in one call; bf16
    // and q8 weights widened 256 rows at a time (all of k) into a buffer, one call per panel. With
    // bf16_operands, x and the weights are rounded to bf16 first (in float copies: the products of
    // product_precision::bf16, or automatic's against bf16 and q8 weights, on a CPU whose float
    // products outrun its bf16 ones; kernels::bf16_products_pay).
    static void matmul_nt_onednn(const context& ctx, mat<const T> x, mat<const Weight> w, mat<T> y, T alpha, T beta,
                                 bool bf16_operands = false) {
        const index_t m = x.rows(), n = w.rows(), k = x.cols();
        std::vector<T> rounded;
        if (bf16_operands) {
            rounded.resize(static_cast<std::size_t>(m * k));
            parallel_for(ctx.threads, m, [&](index_t r) { kernels::round_through_bf16(x.row(r), k, rounded.data() + r * k); });
            x = mat<const T>{rounded.data(), m, k, k};
        }
        if constexpr (std::is_same_v<Weight, T>)
            if (!bf16_operands)
                return onednn::sgemm(ctx.threads, 'N', 'T', m, n, k, alpha, x.data(), x.stride(), w.data(), w.stride(), beta, y.data(),
                                     y.stride());
        // bf16 weights widen exactly; float and q8 ones (dequantized) are rounded after widening
        constexpr bool round_weights = !std::is_same_v<Weight, bf16>;
        constexpr index_t panel_rows = gemm_n_panel;
        std::vector<T> panel(static_cast<std::size_t>(std::min(panel_rows, n) * std::max<index_t>(k, 1)));
        for (index_t j0 = 0; j0 < n; j0 += panel_rows) {
            const index_t rows = std::min(panel_rows, n - j0);
            parallel_for(std::min<int>(ctx.threads, static_cast<int>(rows)), rows, [&](index_t j) {
                T* row = panel.data() + j * k;
                kernels::widen(w.row(j0 + j), k, row);
                if (round_weights && bf16_operands) kernels::round_through_bf16(row, k, row);
            });
            onednn::sgemm(ctx.threads, 'N', 'T', m, rows, k, alpha, x.data(), x.stride(), panel.data(), std::max<index_t>(k, 1), beta,
                          y.data() + j0, y.stride());
        }
    }
#endif

    // The heads [first, last) of thread t of `threads`: a contiguous block each, so that two threads
    // never share the cache lines of a row of q or out (heads round-robin put both on every line).
    static std::pair<int, int> heads_of_thread(index_t t, int threads, int heads) {
        return {static_cast<int>(t * heads / threads), static_cast<int>((t + 1) * heads / threads)};
    }

    // Attention of one query row (decode). Each thread takes a contiguous block of heads and sweeps
    // the keys, then the values, row by row: every pass reads its heads' columns of each cached row
    // front to back (reading one head down all rows instead strides across pages and ran at a third
    // of the read bandwidth). While it works on one block of rows it asks for the next block's
    // lines, its columns of a row at a time in address order, spread over its heads: the
    // ><former's 16 decode attentions at context 256 (2-core Zen 5, a harness taking turns in one
    // process) took 0.76-0.85 ms against 0.94-1.15 ms when each head asked for its own columns of
    // the next block. scratch: a score row per head.
    template <index_t D, class E>
    static void attention_decode(const context& ctx, mat<const T> q, mat<const E> keys, mat<const E> values, mat<T> out,
                                 attention_shape<D> shape, T scale, vec<T> scratch) {
        using row = Eigen::Array<T, Eigen::Dynamic, 1>;
        const index_t n_ctx = keys.rows(), d = shape.head_dim.value();
        const int group = shape.heads / shape.kv_heads;
        check_size(static_cast<index_t>(shape.heads) * n_ctx, scratch.size(), "attention scratch", true);
        const int threads = std::max(1, std::min(ctx.threads, shape.heads));
        parallel_for(threads, threads, [&](index_t t) {
            const auto [h0, h1] = heads_of_thread(t, threads, shape.heads);
            const auto scores = [&](int h) { return Eigen::Map<row>(scratch.data() + h * n_ctx, n_ctx); };
            // asks for head h's share of `rows` rows from `first` on (this thread's columns of each)
            const int first_head = h0, own_heads = h1 - h0;  // (a lambda may not capture structured bindings before clang 16)
            const index_t column = first_head / group * d, span = ((h1 - 1) / group + 1) * d - column;
            const auto request = [&](const E* first, index_t stride, index_t rows, int h) {
                const index_t per = (rows + own_heads - 1) / own_heads, from = (h - first_head) * per;
                const auto bytes = static_cast<std::size_t>(span) * sizeof(E);
                for (index_t r = from; r < std::min(rows, from + per); ++r) {
                    const E* at = first + r * stride + column;
                    kernels::detail::prefetch_ahead(at, bytes, 0);
                    kernels::detail::prefetch_ahead(at, 1, bytes - 1);  // the line of the span's last byte, where the span does not start on a line
                }
            };
            index_t j = 0;
            if constexpr (std::is_same_v<T, float>)  // 16 keys at a time, reduced together; the next 16 asked for ahead
                for (; j + 16 <= n_ctx; j += 16)
                    for (int h = h0; h < h1; ++h) {
                        const E* k = keys.row(j) + (h / group) * d;
                        if (j + 32 <= n_ctx) request(keys.row(j + 16), keys.stride(), 16, h);
                        kernels::dot16(k, keys.stride(), q.row(0) + h * d, d, scratch.data() + h * n_ctx + j);
                    }
            for (; j < n_ctx; ++j)
                for (int h = h0; h < h1; ++h) scratch[h * n_ctx + j] = head_dot(keys.row(j) + (h / group) * d, q.row(0) + h * d, d);
            for (int h = h0; h < h1; ++h) {
                auto p = scores(h);
                p = ((p - p.maxCoeff()) * scale).exp();
                p /= p.sum();
            }
            T* o = out.row(0);
            std::fill(o + h0 * d, o + h1 * d, T(0));
            constexpr index_t block = 8;  // rows of values per pass: 8 rows of the heads' columns stay in L1
            for (index_t j0 = 0; j0 < n_ctx; j0 += block) {
                const index_t rows = std::min(block, n_ctx - j0);
                for (int h = h0; h < h1; ++h) {
                    const T* p = scratch.data() + h * n_ctx + j0;
                    const E* v = values.row(j0) + (h / group) * d;
                    if (j0 + 2 * block <= n_ctx) request(values.row(j0 + block), values.stride(), block, h);
                    if constexpr (std::is_same_v<T, float>) kernels::weighted_row_sum(p, v, values.stride(), rows, o + h * d, d);
                    else
                        for (index_t i = 0; i < rows; ++i)
                            for (index_t c = 0; c < d; ++c) o[h * d + c] += p[i] * v[i * values.stride() + c];
                }
            }
        });
    }

    // Scratch of one prefill attention thread: with the SIMD kernels, its head's keys transposed,
    // values padded, a block's scores and outputs; else its score tile, and the widened keys and
    // values.
    static index_t attention_thread_scratch(index_t tile, index_t n_ctx, index_t d, bool widen) {
        if constexpr (simd_prefill_attention) return kernels::attention_head_layout{n_ctx, d}.scratch_elements();
        return tile * n_ctx + (widen ? 2 * n_ctx * d : 0);
    }

    // Prefill attention through the SIMD kernels (attention_kernels.hpp): each thread takes its
    // block of heads (heads_of_thread), lays out a head's keys and values once, and runs the query rows in blocks of
    // kernels::attention_block_rows: scores, an exact softmax over the keys each row sees, the
    // weighted sum of values, normalised as it is stored.
    static constexpr bool simd_prefill_attention = kernels::simd_attention && std::is_same_v<T, float>;
    template <index_t D, class E>
    static void attention_prefill(const context& ctx, mat<const T> q, mat<const E> keys, mat<const E> values, mat<T> out,
                                  attention_shape<D> shape, T scale, vec<T> scratch) {
        constexpr index_t block = kernels::attention_block_rows;
        const index_t T_q = q.rows(), n_ctx = keys.rows(), past = n_ctx - T_q, d = shape.head_dim.value();
        const int group = shape.heads / shape.kv_heads;
        const kernels::attention_head_layout layout{n_ctx, d};
        const index_t per_thread = layout.scratch_elements(), ldk = layout.key_stride(), ldv = layout.value_stride();
        const int threads = scratch_threads(std::min(ctx.threads, shape.heads), per_thread, scratch, "attention");
        parallel_for(threads, threads, [&](index_t t) {
            T* kt = scratch.data() + t * per_thread;
            T* vp = kt + layout.key_elements();
            T* p = vp + layout.value_elements();
            T* o = p + layout.score_elements();
            int prepared_group = -1;
            const auto [h0, h1] = heads_of_thread(t, threads, shape.heads);
            for (int h = h0; h < h1; ++h) {
                const int g = h / group;
                if (g != prepared_group) {
                    kernels::transpose_keys(keys.data() + g * d, keys.stride(), layout, kt);
                    kernels::pad_values(values.data() + g * d, values.stride(), layout, vp);
                    prepared_group = g;
                }
                for (index_t r0 = 0; r0 < T_q; r0 += block) {
                    const index_t rows = std::min(block, T_q - r0), visible = past + r0 + rows;
                    kernels::attention_scores(q.row(r0) + h * d, q.stride(), rows, kt, layout, visible, scale, p);
                    T sums[block];
                    for (index_t i = 0; i < rows; ++i) sums[i] = kernels::softmax_row(p + i * ldk, past + r0 + i + 1, visible);
                    kernels::attention_values(p, rows, vp, layout, visible, o, ldv);
                    for (index_t i = 0; i < rows; ++i) {
                        const T inverse = T(1) / sums[i];
                        T* y = out.row(r0 + i) + h * d;
                        for (index_t c = 0; c < d; ++c) y[c] = o[i * ldv + c] * inverse;
                    }
                }
            }
        });
    }

    // Whether attention of `rows` query rows runs its products in bf16 (bf16_attention.hpp):
    // prefill (more than gemv_rows rows) of a model with bf16 or q8 weights and automatic product
    // precision, on a CPU with AMX tiles or AVX512_BF16. Mixed-precision training (bf16 products,
    // float weights) keeps float attention, which its backward recomputes.
    static bool bf16_attention(const context& ctx, index_t rows) {
        return ctx.products == product_precision::automatic && bf16_attention_possible(rows);
    }
    // ... with some product precision (attention_scratch's test: a workspace made with one context
    // serves another's products).
    static bool bf16_attention_possible(index_t rows) {
        if constexpr (std::is_same_v<Weight, T> || !std::is_same_v<T, float>) return false;
        else return rows > gemv_rows && kernels::bf16_attention::fastest_engine().has_value();
    }
    // Scratch of one bf16 attention thread, in elements of T (whole cache lines, so that the next
    // thread's starts on one).
    static index_t bf16_attention_thread_scratch(index_t n_ctx, index_t d) {
        return kernels::bf16_attention::head_layout{n_ctx, d}.scratch_bytes() / index_t(sizeof(T));
    }
    // Prefill attention in bf16 products: each thread takes its block of heads (heads_of_thread),
    // packs a head's keys and values into the engines' layouts once per KV group, and runs its
    // query rows in blocks of 16, on AMX tiles where the process may use them, else on vdpbf16ps.
    template <index_t D, class E>
    static void attention_bf16(const context& ctx, mat<const T> q, mat<const E> keys, mat<const E> values, mat<T> out,
                               attention_shape<D> shape, T scale, vec<T> scratch) {
#if defined(VWT_BF16_ATTENTION)
        namespace kb = kernels::bf16_attention;
        const kb::engine products = *kb::fastest_engine();
        const index_t T_q = q.rows(), n_ctx = keys.rows(), d = shape.head_dim.value();
        const int group = shape.heads / shape.kv_heads;
        const kb::head_layout layout{n_ctx, d};
        const index_t per_thread = bf16_attention_thread_scratch(n_ctx, d);
        const int threads = scratch_threads(std::min(ctx.threads, shape.heads), per_thread, scratch, "attention");
        parallel_for(threads, threads, [&](index_t t) {
            const kb::head_scratch work(reinterpret_cast<std::byte*>(scratch.data() + t * per_thread), layout);
            std::optional<kb::tiles> tiles;
            if (products == kb::engine::tiles) tiles.emplace();
            int packed_group = -1;
            const auto [h0, h1] = heads_of_thread(t, threads, shape.heads);
            for (int h = h0; h < h1; ++h) {
                const int g = h / group;
                if (g != packed_group) {
                    kb::pack_keys(keys.data() + g * d, keys.stride(), layout, work.keys);
                    kb::pack_values(values.data() + g * d, values.stride(), layout, work.values);
                    packed_group = g;
                }
                kb::attend_head(products, q.data() + h * d, q.stride(), T_q, n_ctx - T_q, scale, layout, work, out.data() + h * d,
                                out.stride());
            }
        });
#else
        (void)ctx, (void)q, (void)keys, (void)values, (void)out, (void)shape, (void)scale, (void)scratch;
#endif
    }

    template <class E>
    static T head_dot(const E* a, const T* b, index_t d) {
        if constexpr (std::is_same_v<T, float>) {
            return kernels::dot(a, b, d);
        } else {
            T sum = 0;
            for (index_t c = 0; c < d; ++c) sum += a[c] * b[c];
            return sum;
        }
    }

    // A weight tensor widened to the compute type, for the ops that bf16 storage only passes through
    // (the backward ones: a model with bf16 weights is for inference).
    struct widened_matrix {
        std::vector<T> data;
        index_t rows = 0, cols = 0;
        mat<T> view() { return vec<T>(data.data(), rows * cols).as_matrix(rows, cols); }
    };
    template <class E>
    static widened_matrix widened(mat<const E> w) {
        const index_t cols = w.cols() * elements_per_item<E>;
        widened_matrix out{std::vector<T>(static_cast<std::size_t>(w.rows() * cols)), w.rows(), cols};
        for (index_t r = 0; r < w.rows(); ++r) kernels::widen(w.row(r), cols, out.data.data() + r * cols);
        return out;
    }

    // A matrix of any element type widened to float, each value rounded to bf16, its rows split
    // over the context's threads.
    template <class E>
    static widened_matrix rounded_to_bf16(const context& ctx, mat<const E> m) {
        const index_t cols = m.cols() * elements_per_item<E>;
        widened_matrix out{std::vector<T>(static_cast<std::size_t>(m.rows() * cols)), m.rows(), cols};
        parallel_for(ctx.threads, m.rows(), [&](index_t r) {
            T* row = out.data.data() + r * cols;
            kernels::widen(m.row(r), cols, row);
            kernels::round_through_bf16(row, cols, row);
        });
        return out;
    }

    // f(i) for i in [0, n), split statically over `threads` OpenMP threads; with one thread (or one
    // item) on the calling thread, without entering the OpenMP runtime at all.
    template <class F>
    static void parallel_for(int threads, index_t n, F&& f) {
        if (threads <= 1 || n <= 1) {
            for (index_t i = 0; i < n; ++i) f(i);
            return;
        }
        VWT_OMP(parallel for num_threads(threads) schedule(static))
        for (index_t i = 0; i < n; ++i) f(i);
    }
    static int scratch_threads(int wanted, index_t per_thread, vec<T> scratch, const char* op) {
        const index_t fit = per_thread > 0 ? scratch.size() / per_thread : wanted;
        if (fit < 1) vwt::detail::fail("cpu backend: ", op, ": scratch of ", scratch.size(), " elements, ", per_thread, " needed");
        return static_cast<int>(std::max<index_t>(1, std::min<index_t>(wanted, fit)));
    }
    static int backward_threads(const context& ctx, index_t rows) {
        return std::max(1, std::min<int>(ctx.threads, static_cast<int>((rows + 15) / 16)));
    }
    // The token row of a (row, slot) pair, checked against the rows there are.
    static index_t pair_row(int pair, int k, index_t rows, const char* op) {
        if (pair < 0 || k < 1 || pair / k >= rows) vwt::detail::fail("cpu backend: ", op, ": pair ", pair, " outside ", rows, " rows of ", k);
        return pair / k;
    }
    template <class F>
    static void for_each_expert(vec<const int> offsets, index_t rows, index_t stacked_rows, index_t n, const char* op, F f) {
        vwt::detail::for_each_expert(offsets.data(), offsets.size() - 1, rows, stacked_rows, n, "cpu backend", op, f);
    }
    static void check_size(index_t need, index_t have, const char* what, bool at_least = false) {
        if (at_least ? have < need : have != need)
            vwt::detail::fail("cpu backend: ", what, ": ", have, " elements where ", at_least ? "at least " : "", need, " are needed");
    }
    template <class Y>
    static void check_product(index_t m, index_t k, index_t n, index_t k2, const Y& y, const char* op, bool) {
        if (k != k2 || y.rows() != m || y.cols() != n)
            vwt::detail::fail(op, ": shapes [", m, " x ", k, "] . [", k2, " x ", n, "] -> [", y.rows(), " x ", y.cols(), "] do not match");
    }
};

static_assert(backend_policy<backend<float>>);
static_assert(backend_policy<backend<double>>);
static_assert(backend_policy<backend<float, bf16>>);
static_assert(backend_policy<backend<float, q8_block>>);

}  // namespace vwt::cpu
