// vwt::cpu: the Eigen backend policy. Every op the layers call, on host memory, in scalar type T.
// Threads: each call takes a cpu::context whose thread count the caller sets; no global state.
#pragma once

// Eigen's own OpenMP parallelism is controlled by a process-wide setting; vwt splits work itself
// (OpenMP num_threads per call) and runs each piece single-threaded in Eigen.
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "../../detail/aligned.hpp"
#include "../../residual_view.hpp"

// OpenMP when the build enables it (vwt::vwt links OpenMP::OpenMP_CXX); serial otherwise.
#if defined(_OPENMP)
#define VWT_OMP(...) _Pragma(VWT_OMP_STR(omp __VA_ARGS__))
#define VWT_OMP_STR(x) #x
#else
#define VWT_OMP(...)
#endif

namespace vwt::cpu {

struct context {
    int threads = 1;  // OpenMP threads for this call; 1 runs on the calling thread only
};

template <class T>
struct backend {
    using scalar = T;
    using context_type = context;
    // Host memory on 64-byte boundaries: a reduction's order (and so its rounding) depends on
    // where its data starts, so aligned buffers make results repeat run after run.
    template <class U = T>
    using buffer = aligned_vector<U>;

    using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using map = Eigen::Map<matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    using const_map = Eigen::Map<const matrix, Eigen::Unaligned, Eigen::OuterStride<>>;

    static map eigen(matrix_view<T> v) { return map(v.data, v.rows, v.cols, Eigen::OuterStride<>(v.stride)); }
    static const_map eigen(matrix_view<const T> v) {
        return const_map(v.data, v.rows, v.cols, Eigen::OuterStride<>(v.stride));
    }

    // out = beta * out, with beta 0 clearing (never reading) what was there.
    template <class Out>
    static void scale_output(Out& out, T beta) {
        if (beta == T(0)) out.setZero();
        else if (beta != T(1)) out *= beta;
    }

    // The longest stretch of the inner dimension handed to one Eigen product. Above ~800, Eigen's
    // blocking halves k and makes the weight block as tall as the whole product, which ran 10-15%
    // slower here (2-core AVX-512 Xeon, M = 256) than two products of k <= 768 summed; the split
    // into equal panels, a multiple of 16 floats wide, keeps every product in the fast regime.
    static constexpr index_t gemm_k_panel = 768;
    static index_t k_panel_width(index_t k) {
        if (k <= gemm_k_panel) return k;
        const index_t panels = (k + gemm_k_panel - 1) / gemm_k_panel;
        return ((k + panels - 1) / panels + 15) / 16 * 16;
    }

    // y = alpha * x . w^T + beta * y, with w an [n x k] row-major weight (torch's Linear layout).
    // The output columns (weight rows) are split across threads, so each thread streams its own
    // slice of the weight: the right split for decode (one row) and for prefill alike.
    static void matmul_nt(const context& ctx, matrix_view<const T> x, matrix_view<const T> w, matrix_view<T> y,
                          T alpha = T(1), T beta = T(0)) {
        const index_t n = w.rows;
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((n + 63) / 64)));
        const index_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
VWT_OMP(parallel for num_threads(threads) schedule(static) if (threads > 1))
        for (int t = 0; t < threads; ++t) {
            const index_t begin = t * chunk;
            const index_t end = std::min(n, begin + chunk);
            if (begin >= end) continue;
            auto out = eigen(y.cols_range(begin, end));
            const auto lhs = eigen(x);
            const auto rhs = eigen(w.rows_range(begin, end));
            scale_output(out, beta);
            if (x.rows == 1)  // decode: a row-major matrix-vector product streams each weight row once
                out.row(0).transpose().noalias() += alpha * (rhs * lhs.row(0).transpose());
            else
                for (index_t k0 = 0, width = k_panel_width(x.cols); k0 < x.cols; k0 += width) {
                    const index_t kk = std::min(width, x.cols - k0);
                    out.noalias() += alpha * (lhs.middleCols(k0, kk) * rhs.middleCols(k0, kk).transpose());
                }
        }
    }

    // y = alpha * x . w + beta * y, with w [k x n] row-major: the input gradient of a Linear layer
    // (dx = dy . W). The rows of x are split across threads.
    static void matmul_nn(const context& ctx, matrix_view<const T> x, matrix_view<const T> w, matrix_view<T> y,
                          T alpha = T(1), T beta = T(0)) {
        const index_t m = x.rows;
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((m + 15) / 16)));
        const index_t chunk = (m + threads - 1) / threads;
VWT_OMP(parallel for num_threads(threads) schedule(static) if (threads > 1))
        for (int t = 0; t < threads; ++t) {
            const index_t begin = t * chunk, end = std::min(m, begin + chunk);
            if (begin >= end) continue;
            auto out = eigen(y.rows_range(begin, end));
            scale_output(out, beta);
            out.noalias() += alpha * (eigen(x.rows_range(begin, end)) * eigen(w));
        }
    }

    // y = alpha * a^T . b + beta * y, a [m x n], b [m x k], y [n x k]: the weight gradient of a
    // Linear layer (dW += dy^T . x), summed over the m rows. The rows of y are split across threads.
    static void matmul_tn(const context& ctx, matrix_view<const T> a, matrix_view<const T> b, matrix_view<T> y,
                          T alpha = T(1), T beta = T(0)) {
        const index_t n = a.cols;
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((n + 15) / 16)));
        const index_t chunk = ((n + threads - 1) / threads + 7) / 8 * 8;
VWT_OMP(parallel for num_threads(threads) schedule(static) if (threads > 1))
        for (int t = 0; t < threads; ++t) {
            const index_t begin = t * chunk, end = std::min(n, begin + chunk);
            if (begin >= end) continue;
            auto out = eigen(y.rows_range(begin, end));
            scale_output(out, beta);
            out.noalias() += alpha * (eigen(a.cols_range(begin, end)).transpose() * eigen(b));
        }
    }

    // y = x / sqrt(mean(x^2) + eps) * g, row by row; the mean runs over all x.cols coordinates.
    static void rmsnorm(const context& ctx, matrix_view<const T> x, const T* gain, matrix_view<T> y, T eps) {
VWT_OMP(parallel for num_threads(ctx.threads) schedule(static) if (ctx.threads > 1 && x.rows > 1))
        for (index_t r = 0; r < x.rows; ++r) {
            const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> in(x.row(r), x.cols), g(gain, x.cols);
            const T inv = T(1) / std::sqrt(in.square().sum() / static_cast<T>(x.cols) + eps);
            Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(y.row(r), x.cols) = in * inv * g;
        }
    }

    // The backward of rmsnorm: dx += d(y)/d(x)^T dy and dgain += sum over rows of dy * x / rms.
    // Each thread sums its rows' gain gradient apart; the partial sums are added in thread order.
    static void rmsnorm_backward(const context& ctx, matrix_view<const T> x, const T* gain, matrix_view<const T> dy,
                                 matrix_view<T> dx, T* dgain, T eps) {
        using array = Eigen::Array<T, Eigen::Dynamic, 1>;
        const index_t n = x.cols;
        const int threads = std::max(1, std::min<int>(ctx.threads, static_cast<int>((x.rows + 15) / 16)));
        std::vector<array> partial(static_cast<std::size_t>(threads), array::Zero(n));
        const index_t chunk = (x.rows + threads - 1) / threads;
VWT_OMP(parallel for num_threads(threads) schedule(static) if (threads > 1))
        for (int t = 0; t < threads; ++t) {
            const Eigen::Map<const array> g(gain, n);
            for (index_t r = t * chunk; r < std::min(x.rows, (t + 1) * chunk); ++r) {
                const Eigen::Map<const array> in(x.row(r), n), d(dy.row(r), n);
                Eigen::Map<array> out(dx.row(r), n);
                const T inv = T(1) / std::sqrt(in.square().sum() / static_cast<T>(n) + eps);
                const T dot = (d * g * in).sum();
                partial[static_cast<std::size_t>(t)] += d * in * inv;
                out += inv * d * g - in * (inv * inv * inv * dot / static_cast<T>(n));
            }
        }
        Eigen::Map<array> dg(dgain, n);
        for (const auto& p : partial) dg += p;
    }

    // Rotate-half RoPE in place, pairs (j, j + d/2), inv_freq_j = theta^(-2j/d), at each row's
    // position. The rotated heads come in `groups` groups of `heads_per_group` consecutive head
    // vectors of size d, group g starting at column g * group_stride (the fused qkv layout: each kv
    // group's queries and key). One cos/sin per row and frequency serves every head. The rotation
    // is orthogonal, so its backward is the same call at the negated positions.
    static void rope(const context& ctx, matrix_view<T> x, int groups, int heads_per_group, index_t group_stride, int d,
                     const int* positions, double theta) {
        const int half = d / 2;
        std::vector<double> inv_freq(static_cast<std::size_t>(half));
        for (int j = 0; j < half; ++j) inv_freq[static_cast<std::size_t>(j)] = std::pow(theta, -2.0 * j / d);
        VWT_OMP(parallel for num_threads(ctx.threads) schedule(static) if (ctx.threads > 1 && x.rows > 1))
        for (index_t r = 0; r < x.rows; ++r) {
            T* row = x.row(r);
            for (int j = 0; j < half; ++j) {
                const double angle = positions[r] * inv_freq[static_cast<std::size_t>(j)];
                const T c = static_cast<T>(std::cos(angle)), s = static_cast<T>(std::sin(angle));
                for (int g = 0; g < groups; ++g) {
                    for (int h = 0; h < heads_per_group; ++h) {
                        T* v = row + g * group_stride + static_cast<index_t>(h) * d;
                        const T a = v[j], b = v[j + half];
                        v[j] = a * c - b * s;
                        v[j + half] = b * c + a * s;
                    }
                }
            }
        }
    }

    // Causal attention of one sequence. q: [T x H*d] (head h at column h*d, stride q.stride);
    // keys/values: [n_ctx x Hkv*d] each, the first n_ctx - T positions are the past. Query row i
    // sits at position n_ctx - T + i and sees keys 0..that position. out: [T x H*d].
    static void attention(const context& ctx, matrix_view<const T> q, matrix_view<const T> keys,
                          matrix_view<const T> values, matrix_view<T> out, int heads, int kv_heads, int d,
                          T scale) {
        const index_t T_q = q.rows, n_ctx = keys.rows, past = n_ctx - T_q;
        const int group = heads / kv_heads;
        constexpr index_t block = 64;  // query rows per score tile: bounds scratch memory and masked work
VWT_OMP(parallel for num_threads(ctx.threads) schedule(dynamic) if (ctx.threads > 1))
        for (int h = 0; h < heads; ++h) {
            const int g = h / group;
            matrix scores;
            const auto K = eigen(matrix_view<const T>{keys.data + g * d, n_ctx, d, keys.stride});
            const auto V = eigen(matrix_view<const T>{values.data + g * d, n_ctx, d, values.stride});
            for (index_t r0 = 0; r0 < T_q; r0 += block) {
                const index_t rows = std::min(block, T_q - r0);
                const index_t visible = past + r0 + rows;  // keys the last row of the tile sees
                const auto Q = eigen(matrix_view<const T>{q.data + r0 * q.stride + h * d, rows, d, q.stride});
                scores.resize(rows, visible);
                scores.noalias() = (Q * K.topRows(visible).transpose()) * scale;
                for (index_t i = 0; i < rows; ++i) {
                    const index_t seen = past + r0 + i + 1;
                    auto s = scores.row(i);
                    const T m = s.head(seen).maxCoeff();
                    s.head(seen) = (s.head(seen).array() - m).exp();
                    s.head(seen) /= s.head(seen).sum();
                    if (seen < visible) s.tail(visible - seen).setZero();
                }
                auto O = eigen(matrix_view<T>{out.data + r0 * out.stride + h * d, rows, d, out.stride});
                O.noalias() = scores * V.topRows(visible);
            }
        }
    }

    // The backward of attention() for one sequence without a past (training): from q, keys, values
    // and d_out, writes dq [T x H*d] and dk, dv [T x Hkv*d]. The probabilities are recomputed tile
    // by tile rather than stored. kv groups run in parallel; the heads of a group add into its dk
    // and dv in head order.
    static void attention_backward(const context& ctx, matrix_view<const T> q, matrix_view<const T> keys,
                                   matrix_view<const T> values, matrix_view<const T> d_out, matrix_view<T> dq,
                                   matrix_view<T> dk, matrix_view<T> dv, int heads, int kv_heads, int d, T scale) {
        const index_t n = q.rows;
        const int group = heads / kv_heads;
        constexpr index_t block = 64;
VWT_OMP(parallel for num_threads(ctx.threads) schedule(dynamic) if (ctx.threads > 1))
        for (int g = 0; g < kv_heads; ++g) {
            matrix p, dp;
            const auto K = eigen(matrix_view<const T>{keys.data + g * d, n, d, keys.stride});
            const auto V = eigen(matrix_view<const T>{values.data + g * d, n, d, values.stride});
            auto dK = eigen(matrix_view<T>{dk.data + g * d, n, d, dk.stride});
            auto dV = eigen(matrix_view<T>{dv.data + g * d, n, d, dv.stride});
            dK.setZero();
            dV.setZero();
            for (int h = g * group; h < (g + 1) * group; ++h)
                for (index_t r0 = 0; r0 < n; r0 += block) {
                    const index_t rows = std::min(block, n - r0), visible = r0 + rows;
                    const auto Q = eigen(matrix_view<const T>{q.data + r0 * q.stride + h * d, rows, d, q.stride});
                    const auto dO = eigen(matrix_view<const T>{d_out.data + r0 * d_out.stride + h * d, rows, d, d_out.stride});
                    auto dQ = eigen(matrix_view<T>{dq.data + r0 * dq.stride + h * d, rows, d, dq.stride});
                    p.resize(rows, visible);
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
                    dp.resize(rows, visible);
                    dp.noalias() = dO * V.topRows(visible).transpose();
                    // d scores = P o (dP - rowsum(P o dP)), times the score scale
                    const auto centred = (dp.array().colwise() - (dp.array() * p.array()).rowwise().sum()).eval();
                    dp = (p.array() * centred * scale).matrix();
                    dQ.noalias() = dp * K.topRows(visible);
                    dK.topRows(visible).noalias() += dp.transpose() * Q;
                }
        }
    }

    // out[:, j] = u[:, j] * silu(g[:, j]). split: u is the first `inter` columns of `fused`, g the
    // next `inter`; interleaved: u_j and g_j are columns 2j and 2j + 1.
    static void swiglu(const context& ctx, matrix_view<const T> fused, matrix_view<T> out, index_t inter,
                       bool interleaved = false) {
        using array = Eigen::Array<T, Eigen::Dynamic, 1>;
        using strided = Eigen::Map<const array, Eigen::Unaligned, Eigen::InnerStride<2>>;
        VWT_OMP(parallel for num_threads(ctx.threads) schedule(static) if (ctx.threads > 1 && fused.rows > 1))
        for (index_t r = 0; r < fused.rows; ++r) {
            Eigen::Map<array> o(out.row(r), inter);
            if (interleaved) {
                const strided u(fused.row(r), inter), g(fused.row(r) + 1, inter);
                o = u * g / (T(1) + (-g).exp());
            } else {  // contiguous halves: Eigen's vectorised exp
                const Eigen::Map<const array> u(fused.row(r), inter), g(fused.row(r) + inter, inter);
                o = u * g / (T(1) + (-g).exp());
            }
        }
    }

    // The backward of swiglu(): d_fused from fused and d_out (same layouts as the forward).
    static void swiglu_backward(const context& ctx, matrix_view<const T> fused, matrix_view<const T> d_out,
                                matrix_view<T> d_fused, index_t inter, bool interleaved = false) {
        using array = Eigen::Array<T, Eigen::Dynamic, 1>;
        using cstrided = Eigen::Map<const array, Eigen::Unaligned, Eigen::InnerStride<>>;
        using strided = Eigen::Map<array, Eigen::Unaligned, Eigen::InnerStride<>>;
        const index_t step = interleaved ? 2 : 1, gate = interleaved ? 1 : inter;
        VWT_OMP(parallel for num_threads(ctx.threads) schedule(static) if (ctx.threads > 1 && fused.rows > 1))
        for (index_t r = 0; r < fused.rows; ++r) {
            const cstrided u(fused.row(r), inter, Eigen::InnerStride<>(step)), g(fused.row(r) + gate, inter, Eigen::InnerStride<>(step));
            strided du(d_fused.row(r), inter, Eigen::InnerStride<>(step)), dg(d_fused.row(r) + gate, inter, Eigen::InnerStride<>(step));
            const Eigen::Map<const array> d(d_out.row(r), inter);
            const array sig = T(1) / (T(1) + (-g).exp());
            du = d * g * sig;
            dg = d * u * sig * (T(1) + g * (T(1) - sig));
        }
    }

    // rows of x = scale * table[ids] (columns [0, table.cols)), the rest of each row zero.
    static void embed(const context&, matrix_view<const T> table, const int* ids, matrix_view<T> x, T scale) {
        for (index_t r = 0; r < x.rows; ++r) {
            const T* src = table.row(ids[r]);
            T* dst = x.row(r);
            for (index_t c = 0; c < table.cols; ++c) dst[c] = scale * src[c];
            for (index_t c = table.cols; c < x.cols; ++c) dst[c] = T(0);
        }
    }

    // The backward of embed(): table rows += scale * the first table.cols columns of dx's rows,
    // row ids[r] for row r, in row order (repeated ids add up deterministically).
    static void embed_backward(const context&, matrix_view<const T> dx, const int* ids, matrix_view<T> table,
                               T scale) {
        for (index_t r = 0; r < dx.rows; ++r) {
            const T* src = dx.row(r);
            T* dst = table.row(ids[r]);
            for (index_t c = 0; c < table.cols; ++c) dst[c] += scale * src[c];
        }
    }

    // Softmax cross-entropy of each row of logits against targets[r]. Returns the sum over rows of
    // -log p(target) (in double) and overwrites logits with grad_scale * (softmax - onehot), the
    // gradient of grad_scale * that sum.
    static double cross_entropy(const context& ctx, matrix_view<T> logits, const int* targets, T grad_scale) {
        using array = Eigen::Array<T, Eigen::Dynamic, 1>;
        std::vector<double> loss(static_cast<std::size_t>(logits.rows));
        VWT_OMP(parallel for num_threads(ctx.threads) schedule(static) if (ctx.threads > 1 && logits.rows > 1))
        for (index_t r = 0; r < logits.rows; ++r) {
            Eigen::Map<array> z(logits.row(r), logits.cols);
            const T m = z.maxCoeff(), target = z(targets[r]);
            z = (z - m).exp();
            const T sum = z.sum();
            loss[static_cast<std::size_t>(r)] = std::log(static_cast<double>(sum)) + static_cast<double>(m - target);
            z *= grad_scale / sum;
            z(targets[r]) -= grad_scale;
        }
        double total = 0;
        for (double l : loss) total += l;
        return total;
    }

    // Splits rows of the fused qkv layout (per kv group: G query heads, its key, its value, each d
    // wide) into dense q [rows x H*d], k and v [rows x Hkv*d]; join_qkv is its inverse.
    static void split_qkv(matrix_view<const T> qkv, matrix_view<T> q, matrix_view<T> k, matrix_view<T> v, int heads,
                          int kv_heads, index_t d) {
        const int G = heads / kv_heads;
        for (index_t r = 0; r < qkv.rows; ++r)
            for (int g = 0; g < kv_heads; ++g) {
                const T* src = qkv.row(r) + g * (G + 2) * d;
                std::copy(src, src + G * d, q.row(r) + g * G * d);
                std::copy(src + G * d, src + (G + 1) * d, k.row(r) + g * d);
                std::copy(src + (G + 1) * d, src + (G + 2) * d, v.row(r) + g * d);
            }
    }
    static void join_qkv(matrix_view<const T> q, matrix_view<const T> k, matrix_view<const T> v, matrix_view<T> qkv,
                         int heads, int kv_heads, index_t d) {
        const int G = heads / kv_heads;
        for (index_t r = 0; r < qkv.rows; ++r)
            for (int g = 0; g < kv_heads; ++g) {
                T* dst = qkv.row(r) + g * (G + 2) * d;
                std::copy(q.row(r) + g * G * d, q.row(r) + (g + 1) * G * d, dst);
                std::copy(k.row(r) + g * d, k.row(r) + (g + 1) * d, dst + G * d);
                std::copy(v.row(r) + g * d, v.row(r) + (g + 1) * d, dst + (G + 1) * d);
            }
    }

    static void fill(matrix_view<T> x, T value) {
        for (index_t r = 0; r < x.rows; ++r) std::fill(x.row(r), x.row(r) + x.cols, value);
    }

    static void copy(matrix_view<const T> from, matrix_view<T> to) {
        for (index_t r = 0; r < from.rows; ++r) std::copy(from.row(r), from.row(r) + from.cols, to.row(r));
    }
};

}  // namespace vwt::cpu
