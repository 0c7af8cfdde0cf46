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
    template <class U = T>
    using buffer = std::vector<U>;

    using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using map = Eigen::Map<matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    using const_map = Eigen::Map<const matrix, Eigen::Unaligned, Eigen::OuterStride<>>;

    static map eigen(matrix_view<T> v) { return map(v.data, v.rows, v.cols, Eigen::OuterStride<>(v.stride)); }
    static const_map eigen(matrix_view<const T> v) {
        return const_map(v.data, v.rows, v.cols, Eigen::OuterStride<>(v.stride));
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
            if (beta != T(1)) {
                if (beta == T(0)) out.setZero();
                else out *= beta;
            }
            if (x.rows == 1)  // decode: a row-major matrix-vector product streams each weight row once
                out.row(0).transpose().noalias() += alpha * (rhs * lhs.row(0).transpose());
            else
                out.noalias() += alpha * (lhs * rhs.transpose());
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

    // Rotate-half RoPE in place, pairs (j, j + d/2), inv_freq_j = theta^(-2j/d), at each row's
    // position. The rotated heads come in `groups` groups of `heads_per_group` consecutive head
    // vectors of size d, group g starting at column g * group_stride (the fused qkv layout: each kv
    // group's queries and key). One cos/sin per row and frequency serves every head.
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

    // rows of x = scale * table[ids] (columns [0, table.cols)), the rest of each row zero.
    static void embed(const context&, matrix_view<const T> table, const int* ids, matrix_view<T> x, T scale) {
        for (index_t r = 0; r < x.rows; ++r) {
            const T* src = table.row(ids[r]);
            T* dst = x.row(r);
            for (index_t c = 0; c < table.cols; ++c) dst[c] = scale * src[c];
            for (index_t c = table.cols; c < x.cols; ++c) dst[c] = T(0);
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
