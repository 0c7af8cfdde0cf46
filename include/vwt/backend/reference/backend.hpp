// vwt::reference: the oracle policy. Plain loops with double accumulation, written from
// semantics.md, in a memory space of its own that host code cannot read except by download.
#pragma once

// Two jobs: op tests compare every other policy with it (tests/backend_ops.cpp), and the whole
// model (inference and a training step) runs on it, which proves that layers, models, sessions and
// training reach policy memory only through ops, upload and download (a host read of its views
// does not compile). New buffers hold NaN (floating point) or INT_MIN (integers), so reading memory
// no op has written shows up in results instead of passing by luck. Single-threaded and slow:
// simplicity over speed.

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "../../detail/gaussian_noise.hpp"
#include "../../error.hpp"
#include "../buffer.hpp"
#include "../policy.hpp"
#include "../../tensor/bf16.hpp"

namespace vwt::reference {

// The reference policy's memory: ordinary RAM, but typed so that host code cannot touch it.
struct memory {
    static constexpr bool host_accessible = false;
};

struct context {};

struct poisoning_allocator {
    template <class U>
    static U* allocate(index_t n) {
        U* p = new U[static_cast<std::size_t>(n)];
        U poison{};
        if constexpr (std::is_floating_point_v<U>) poison = std::numeric_limits<U>::quiet_NaN();
        else if constexpr (std::is_integral_v<U>) poison = std::numeric_limits<U>::min();
        std::fill(p, p + n, poison);
        return p;
    }
    template <class U>
    static void deallocate(U* p, index_t) {
        delete[] p;
    }
};

template <class Compute, class Weight = Compute, class State = Compute>
struct backend {
    using T = Compute;
    using compute_type = Compute;
    using weight_type = Weight;
    using state_type = State;
    using memory = reference::memory;
    using context = vwt::reference::context;
    template <class U>
    using buffer = owning_buffer<U, memory, poisoning_allocator>;
    template <class U, index_t C = dynamic_extent>
    using mat = matrix_view<U, memory, C>;
    template <class U>
    using vec = vector_view<U, memory>;

    template <class U>
    static void upload(const context&, std::span<const U> host, vec<U> dst) {
        require(static_cast<index_t>(host.size()) == dst.size(), "upload: sizes differ");
        std::copy(host.begin(), host.end(), ptr(dst));
    }
    template <class U>
    static void upload(const context& ctx, std::span<U> host, vec<std::remove_const_t<U>> dst) {
        upload(ctx, std::span<const std::remove_const_t<U>>(host), dst);
    }
    template <class U>
    static void download(const context&, vec<const U> src, std::span<U> host) {
        require(static_cast<index_t>(host.size()) == src.size(), "download: sizes differ");
        std::copy(ptr(src), ptr(src) + src.size(), host.begin());
    }

    // y = alpha x w^T + beta y
    static void matmul_nt(const context&, mat<const T> x, mat<const Weight> w, mat<T> y, T alpha = T(1), T beta = T(0)) {
        require(x.cols() == w.cols() && y.rows() == x.rows() && y.cols() == w.rows(), "matmul_nt: shapes");
        product(y, x.cols(), [&](index_t i, index_t k) { return at(x, i, k); }, [&](index_t k, index_t j) { return at(w, j, k); },
                alpha, beta);
    }
    // y = alpha x w + beta y
    static void matmul_nn(const context&, mat<const T> x, mat<const Weight> w, mat<T> y, T alpha = T(1), T beta = T(0)) {
        require(x.cols() == w.rows() && y.rows() == x.rows() && y.cols() == w.cols(), "matmul_nn: shapes");
        product(y, x.cols(), [&](index_t i, index_t k) { return at(x, i, k); }, [&](index_t k, index_t j) { return at(w, k, j); },
                alpha, beta);
    }
    // y = alpha a^T b + beta y
    static void matmul_tn(const context&, mat<const T> a, mat<const T> b, mat<T> y, T alpha = T(1), T beta = T(0)) {
        require(a.rows() == b.rows() && y.rows() == a.cols() && y.cols() == b.cols(), "matmul_tn: shapes");
        product(y, a.rows(), [&](index_t i, index_t k) { return at(a, k, i); }, [&](index_t k, index_t j) { return at(b, k, j); },
                alpha, beta);
    }

    // y = x / sqrt(mean(x^2) + eps) * g
    template <index_t C>
    static void rmsnorm(const context&, mat<const T, C> x, vec<const Weight> gain, mat<T, C> y, T eps) {
        const index_t n = x.cols();
        require(gain.size() == n && y.cols() == n && y.rows() == x.rows(), "rmsnorm: shapes");
        for (index_t r = 0; r < x.rows(); ++r) {
            const double inv = inverse_rms(x, r, eps);
            for (index_t c = 0; c < n; ++c) at(y, r, c) = T(double(at(x, r, c)) * inv * double(ptr(gain)[c]));
        }
    }
    static void rmsnorm(const context& ctx, mat<const T> x, vec<const Weight> gain, mat<T> y, T eps) {
        rmsnorm<dynamic_extent>(ctx, x, gain, y, eps);
    }
    static index_t rmsnorm_backward_scratch(const context&, index_t, index_t) { return 0; }
    // With s = 1/rms: dy/dx_j = s g_j e_j - x_j s^3 (x . (g o dy)) / n per row.
    template <index_t C>
    static void rmsnorm_backward(const context&, mat<const T, C> x, vec<const Weight> gain, mat<const T, C> dy, mat<T, C> dx,
                                 vec<T> dgain, T eps, vec<T>) {
        const index_t n = x.cols();
        for (index_t c = 0; c < n; ++c) {
            double sum = 0;
            for (index_t r = 0; r < x.rows(); ++r) sum += double(at(dy, r, c)) * double(at(x, r, c)) * inverse_rms(x, r, eps);
            ptr(dgain)[c] = T(double(ptr(dgain)[c]) + sum);
        }
        for (index_t r = 0; r < x.rows(); ++r) {
            const double s = inverse_rms(x, r, eps);
            double dot = 0;
            for (index_t c = 0; c < n; ++c) dot += double(at(x, r, c)) * double(ptr(gain)[c]) * double(at(dy, r, c));
            for (index_t c = 0; c < n; ++c)
                at(dx, r, c) = T(double(at(dx, r, c)) + s * double(ptr(gain)[c]) * double(at(dy, r, c)) -
                                 double(at(x, r, c)) * s * s * s * dot / double(n));
        }
    }
    static void rmsnorm_backward(const context& ctx, mat<const T> x, vec<const Weight> gain, mat<const T> dy, mat<T> dx,
                                 vec<T> dgain, T eps, vec<T> scratch) {
        rmsnorm_backward<dynamic_extent>(ctx, x, gain, dy, dx, dgain, eps, scratch);
    }

    // Rotate-half RoPE: for j < d/2, (a, b) = (v_j, v_{j+d/2}) becomes (a cos - b sin, b cos + a sin)
    // at angle position * theta^(-2j/d); inverse: the negated angle.
    template <index_t D>
    static void rope(const context&, mat<T> x, rope_layout<D> layout, vec<const int> positions, double theta, bool inverse = false) {
        const index_t d = layout.head_dim.value();
        require(positions.size() == x.rows() && d % 2 == 0, "rope: positions or head dim");
        for (index_t r = 0; r < x.rows(); ++r)
            for (int g = 0; g < layout.groups; ++g)
                for (int h = 0; h < layout.heads_per_group; ++h) {
                    const index_t base = g * layout.group_stride + h * d;
                    for (index_t j = 0; j < d / 2; ++j) {
                        const double angle = (inverse ? -1.0 : 1.0) * double(ptr(positions)[r]) * std::pow(theta, -2.0 * double(j) / double(d));
                        const double a = at(x, r, base + j), b = at(x, r, base + j + d / 2);
                        at(x, r, base + j) = T(a * std::cos(angle) - b * std::sin(angle));
                        at(x, r, base + j + d / 2) = T(b * std::cos(angle) + a * std::sin(angle));
                    }
                }
    }

    // Keys and values may be kept in bf16: split_qkv rounds them to the nearest bf16 (through float),
    // attention reads them exactly.
    static constexpr bool kv_bf16 = true;

    template <index_t D>
    static index_t attention_scratch(const context&, index_t, index_t, attention_shape<D>, kv_dtype = kv_dtype::compute) { return 0; }
    // out_i = sum_{t <= past + i} softmax_t(scale q_i . k_t) v_t per head, head h using kv head h / (H / Hkv).
    template <index_t D, class E = T>
    static void attention(const context&, mat<const T> q, mat<const E> keys, mat<const E> values, mat<T> out,
                          attention_shape<D> shape, T scale, vec<T>) {
        const index_t d = shape.head_dim.value(), n_ctx = keys.rows(), past = n_ctx - q.rows();
        require(past >= 0 && values.rows() == n_ctx, "attention: shapes");
        const int group = shape.heads / shape.kv_heads;
        std::vector<double> p(static_cast<std::size_t>(n_ctx));
        for (index_t i = 0; i < q.rows(); ++i)
            for (int h = 0; h < shape.heads; ++h) {
                const index_t kv = (h / group) * d, seen = past + i + 1;
                double top = -std::numeric_limits<double>::infinity(), z = 0;
                for (index_t t = 0; t < seen; ++t) {
                    double s = 0;
                    for (index_t c = 0; c < d; ++c) s += double(at(q, i, h * d + c)) * as_double(at(keys, t, kv + c));
                    p[static_cast<std::size_t>(t)] = s * double(scale);
                    top = std::max(top, p[static_cast<std::size_t>(t)]);
                }
                for (index_t t = 0; t < seen; ++t) z += (p[static_cast<std::size_t>(t)] = std::exp(p[static_cast<std::size_t>(t)] - top));
                for (index_t c = 0; c < d; ++c) {
                    double o = 0;
                    for (index_t t = 0; t < seen; ++t) o += p[static_cast<std::size_t>(t)] / z * as_double(at(values, t, kv + c));
                    at(out, i, h * d + c) = T(o);
                }
            }
    }
    template <index_t D>
    static index_t attention_backward_scratch(const context&, index_t, attention_shape<D>) { return 0; }
    // With P the causal softmax and dP = dO V^T: dS = P o (dP - rowsum(P o dP)) * scale,
    // dQ = dS K, dK = dS^T Q, dV = P^T dO, summed over the heads that share a kv head.
    template <index_t D>
    static void attention_backward(const context&, mat<const T> q, mat<const T> keys, mat<const T> values, mat<const T> d_out,
                                   mat<T> dq, mat<T> dk, mat<T> dv, attention_shape<D> shape, T scale, vec<T>) {
        const index_t n = q.rows(), d = shape.head_dim.value();
        const int group = shape.heads / shape.kv_heads;
        std::vector<double> dk_acc(static_cast<std::size_t>(n * shape.kv_heads * d)), dv_acc(dk_acc.size());
        std::vector<double> p(static_cast<std::size_t>(n)), dp(static_cast<std::size_t>(n));
        for (int h = 0; h < shape.heads; ++h) {
            const index_t kv = (h / group) * d;
            for (index_t i = 0; i < n; ++i) {
                double top = -std::numeric_limits<double>::infinity(), z = 0, centre = 0;
                for (index_t t = 0; t <= i; ++t) {
                    double s = 0;
                    for (index_t c = 0; c < d; ++c) s += double(at(q, i, h * d + c)) * double(at(keys, t, kv + c));
                    p[std::size_t(t)] = s * double(scale);
                    top = std::max(top, p[std::size_t(t)]);
                }
                for (index_t t = 0; t <= i; ++t) z += (p[std::size_t(t)] = std::exp(p[std::size_t(t)] - top));
                for (index_t t = 0; t <= i; ++t) {
                    p[std::size_t(t)] /= z;
                    double s = 0;
                    for (index_t c = 0; c < d; ++c) s += double(at(d_out, i, h * d + c)) * double(at(values, t, kv + c));
                    dp[std::size_t(t)] = s;
                    centre += p[std::size_t(t)] * s;
                }
                for (index_t c = 0; c < d; ++c) {
                    double g = 0;
                    for (index_t t = 0; t <= i; ++t) {
                        const double ds = p[std::size_t(t)] * (dp[std::size_t(t)] - centre) * double(scale);
                        g += ds * double(at(keys, t, kv + c));
                        dk_acc[std::size_t(t * shape.kv_heads * d + kv + c)] += ds * double(at(q, i, h * d + c));
                        dv_acc[std::size_t(t * shape.kv_heads * d + kv + c)] += p[std::size_t(t)] * double(at(d_out, i, h * d + c));
                    }
                    at(dq, i, h * d + c) = T(g);
                }
            }
        }
        for (index_t t = 0; t < n; ++t)
            for (index_t c = 0; c < shape.kv_heads * d; ++c) {
                at(dk, t, c) = T(dk_acc[std::size_t(t * shape.kv_heads * d + c)]);
                at(dv, t, c) = T(dv_acc[std::size_t(t * shape.kv_heads * d + c)]);
            }
    }

    // ---- mixture of experts (semantics.md section 6)

    // Per row of router logits [R x E]: its k experts, the largest logits with ties to the lower
    // expert index, and their weights, a softmax over the k chosen logits; then the R k (row, slot)
    // pairs sorted by expert, rows in order within an expert: order[j] = row * k + slot of the
    // j-th pair, offsets[e] its first j for expert e, offsets[E] = R k.
    static void moe_route(const context&, mat<const T> logits, int k, vec<int> experts, vec<T> weights, vec<int> order,
                          vec<int> offsets) {
        const index_t R = logits.rows(), E = logits.cols();
        require(k >= 1 && k <= E && experts.size() == R * k && weights.size() == R * k && order.size() == R * k && offsets.size() == E + 1,
                "moe_route: shapes");
        for (index_t r = 0; r < R; ++r) {
            std::vector<bool> taken(std::size_t(E), false);
            double top = -std::numeric_limits<double>::infinity();
            for (int slot = 0; slot < k; ++slot) {
                index_t best = -1;
                for (index_t e = 0; e < E; ++e)
                    if (!taken[std::size_t(e)] && (best < 0 || double(at(logits, r, e)) > double(at(logits, r, best)))) best = e;
                taken[std::size_t(best)] = true;
                ptr(experts)[r * k + slot] = int(best);
                top = std::max(top, double(at(logits, r, best)));
            }
            double z = 0;
            for (int slot = 0; slot < k; ++slot) z += std::exp(double(at(logits, r, ptr(experts)[r * k + slot])) - top);
            for (int slot = 0; slot < k; ++slot)
                ptr(weights)[r * k + slot] = T(std::exp(double(at(logits, r, ptr(experts)[r * k + slot])) - top) / z);
        }
        index_t j = 0;
        for (index_t e = 0; e < E; ++e) {
            ptr(offsets)[e] = int(j);
            for (index_t pair = 0; pair < R * k; ++pair)
                if (ptr(experts)[pair] == e) ptr(order)[j++] = int(pair);
        }
        ptr(offsets)[E] = int(j);
    }
    // The gradient of moe_route's weights with respect to the logits: for the chosen experts of a
    // row, d_logit = w (d_w - sum_s w_s d_w_s) (the softmax over the chosen ones), 0 elsewhere.
    static void moe_route_backward(const context&, vec<const int> experts, vec<const T> weights, vec<const T> d_weights, mat<T> d_logits) {
        const index_t R = d_logits.rows(), E = d_logits.cols(), k = R > 0 ? experts.size() / R : 0;
        require(experts.size() == R * k && weights.size() == R * k && d_weights.size() == R * k, "moe_route_backward: shapes");
        for (index_t r = 0; r < R; ++r) {
            double centre = 0;
            for (index_t s = 0; s < k; ++s) centre += double(ptr(weights)[r * k + s]) * double(ptr(d_weights)[r * k + s]);
            for (index_t e = 0; e < E; ++e) at(d_logits, r, e) = T(0);
            for (index_t s = 0; s < k; ++s) {
                const int e = ptr(experts)[r * k + s];
                require(e >= 0 && e < E, "moe_route_backward: expert outside the router");
                at(d_logits, r, e) = T(double(ptr(weights)[r * k + s]) * (double(ptr(d_weights)[r * k + s]) - centre));
            }
        }
    }
    // The router's auxiliary loss of one MoE layer over R tokens (semantics.md section 6):
    // out[0] = E sum_e f_e p_e + 0.1 mean_r(logsumexp(logits_r)^2), p the mean over tokens of
    // softmax(logits_r), f the share of the R k assignments in `experts` that went to e; and
    // d_logits += scale * its gradient, f held fixed (a count: piecewise constant).
    static void moe_aux_loss(const context&, mat<const T> logits, vec<const int> experts, T scale, mat<T> d_logits, vec<double> out) {
        const index_t R = logits.rows(), E = logits.cols();
        require(R > 0 && experts.size() % R == 0 && d_logits.rows() == R && d_logits.cols() == E && out.size() == 1, "moe_aux_loss: shapes");
        std::vector<double> f(static_cast<std::size_t>(E), 0.0), p(static_cast<std::size_t>(E), 0.0);
        std::vector<double> soft(static_cast<std::size_t>(R * E)), lse(static_cast<std::size_t>(R));
        for (index_t j = 0; j < experts.size(); ++j) {
            require(ptr(experts)[j] >= 0 && ptr(experts)[j] < E, "moe_aux_loss: expert outside the router");
            f[std::size_t(ptr(experts)[j])] += 1.0 / double(experts.size());
        }
        double z_loss = 0;
        for (index_t r = 0; r < R; ++r) {
            double top = -std::numeric_limits<double>::infinity(), sum = 0;
            for (index_t e = 0; e < E; ++e) top = std::max(top, double(at(logits, r, e)));
            for (index_t e = 0; e < E; ++e) sum += std::exp(double(at(logits, r, e)) - top);
            lse[std::size_t(r)] = top + std::log(sum);
            for (index_t e = 0; e < E; ++e) {
                const double s = std::exp(double(at(logits, r, e)) - lse[std::size_t(r)]);
                soft[std::size_t(r * E + e)] = s;
                p[std::size_t(e)] += s / double(R);
            }
            z_loss += lse[std::size_t(r)] * lse[std::size_t(r)] / double(R);
        }
        double balance = 0;
        for (index_t e = 0; e < E; ++e) balance += f[std::size_t(e)] * p[std::size_t(e)];
        ptr(out)[0] = double(E) * balance + 0.1 * z_loss;
        for (index_t r = 0; r < R; ++r) {
            double fs = 0;
            for (index_t e = 0; e < E; ++e) fs += f[std::size_t(e)] * soft[std::size_t(r * E + e)];
            for (index_t e = 0; e < E; ++e) {
                const double s = soft[std::size_t(r * E + e)];
                const double g = double(E) / double(R) * s * (f[std::size_t(e)] - fs) + 0.1 * 2.0 * lse[std::size_t(r)] * s / double(R);
                at(d_logits, r, e) = T(double(at(d_logits, r, e)) + double(scale) * g);
            }
        }
    }
    // out[j] = alpha * weights[order[j]] * x[order[j] / k] (weights empty: 1): the rows of the
    // pairs, in expert order.
    static void gather_rows(const context&, mat<const T> x, vec<const int> order, int k, vec<const T> weights, T alpha, mat<T> out) {
        require(out.rows() == order.size() && out.cols() == x.cols() && k >= 1 && (weights.empty() || weights.size() == order.size()),
                "gather_rows: shapes");
        for (index_t j = 0; j < out.rows(); ++j) {
            const index_t pair = ptr(order)[j], r = pair / k;
            require(pair >= 0 && r < x.rows(), "gather_rows: pair outside the rows");
            const double f = double(alpha) * (weights.empty() ? 1.0 : double(ptr(weights)[pair]));
            for (index_t c = 0; c < x.cols(); ++c) at(out, j, c) = T(f * double(at(x, r, c)));
        }
    }
    // y[order[j] / k] += alpha * weights[order[j]] * x[j] (weights empty: 1), pairs in order.
    static void scatter_add_rows(const context&, mat<const T> x, vec<const int> order, int k, vec<const T> weights, mat<T> y, T alpha) {
        require(x.rows() == order.size() && x.cols() == y.cols() && k >= 1 && (weights.empty() || weights.size() == order.size()),
                "scatter_add_rows: shapes");
        for (index_t j = 0; j < x.rows(); ++j) {
            const index_t pair = ptr(order)[j], r = pair / k;
            require(pair >= 0 && r < y.rows(), "scatter_add_rows: pair outside the rows");
            const double f = double(alpha) * (weights.empty() ? 1.0 : double(ptr(weights)[pair]));
            for (index_t c = 0; c < x.cols(); ++c) at(y, r, c) = T(double(at(y, r, c)) + f * double(at(x, j, c)));
        }
    }
    // out[order[j]] = x[j] . y[order[j] / k]: per pair, a row of x against its token's row of y.
    static void pair_dots(const context&, mat<const T> x, vec<const int> order, int k, mat<const T> y, vec<T> out) {
        require(x.rows() == order.size() && x.cols() == y.cols() && out.size() == order.size() && k >= 1, "pair_dots: shapes");
        for (index_t j = 0; j < x.rows(); ++j) {
            const index_t pair = ptr(order)[j];
            double dot = 0;
            for (index_t c = 0; c < x.cols(); ++c) dot += double(at(x, j, c)) * double(at(y, pair / k, c));
            ptr(out)[pair] = T(dot);
        }
    }
    // Per expert e, over its rows [offsets[e], offsets[e+1]) of x and y, with w stacked on a
    // leading expert axis (expert e's matrix is rows [e n, (e+1) n) of w):
    //   grouped_matmul_nt: y_e = alpha x_e w_e^T + beta y_e   (n = y.cols())
    //   grouped_matmul_nn: y_e = alpha x_e w_e + beta y_e     (n = x.cols())
    //   grouped_matmul_tn: w_e = alpha a_e^T b_e + beta w_e, into y stacked like w (n = a.cols())
    static void grouped_matmul_nt(const context& ctx, mat<const T> x, vec<const int> offsets, mat<const Weight> w, mat<T> y, T alpha = T(1),
                                  T beta = T(0)) {
        for_each_expert(offsets, x.rows(), w.rows(), y.cols(), "grouped_matmul_nt", [&](index_t e, index_t begin, index_t end, index_t n) {
            matmul_nt(ctx, x.rows_range(begin, end), w.rows_range(e * n, (e + 1) * n), y.rows_range(begin, end), alpha, beta);
        });
    }
    static void grouped_matmul_nn(const context& ctx, mat<const T> x, vec<const int> offsets, mat<const Weight> w, mat<T> y, T alpha = T(1),
                                  T beta = T(0)) {
        for_each_expert(offsets, x.rows(), w.rows(), x.cols(), "grouped_matmul_nn", [&](index_t e, index_t begin, index_t end, index_t n) {
            matmul_nn(ctx, x.rows_range(begin, end), w.rows_range(e * n, (e + 1) * n), y.rows_range(begin, end), alpha, beta);
        });
    }
    static void grouped_matmul_tn(const context& ctx, mat<const T> a, mat<const T> b, vec<const int> offsets, mat<T> y, T alpha = T(1),
                                  T beta = T(0)) {
        require(b.rows() == a.rows(), "grouped_matmul_tn: shapes");
        for_each_expert(offsets, a.rows(), y.rows(), a.cols(), "grouped_matmul_tn", [&](index_t e, index_t begin, index_t end, index_t n) {
            matmul_tn(ctx, a.rows_range(begin, end), b.rows_range(begin, end), y.rows_range(e * n, (e + 1) * n), alpha, beta);
        });
    }

    // out_j = u_j * g_j * sigmoid(g_j)
    static void swiglu(const context&, mat<const T> fused, mat<T> out, index_t inter, swiglu_layout layout) {
        for (index_t r = 0; r < fused.rows(); ++r)
            for (index_t j = 0; j < inter; ++j) {
                const double u = at(fused, r, up_col(j, inter, layout)), g = at(fused, r, gate_col(j, inter, layout));
                at(out, r, j) = T(u * g / (1.0 + std::exp(-g)));
            }
    }
    static void swiglu_backward(const context&, mat<const T> fused, mat<const T> d_out, mat<T> d_fused, index_t inter,
                                swiglu_layout layout) {
        for (index_t r = 0; r < fused.rows(); ++r)
            for (index_t j = 0; j < inter; ++j) {
                const index_t uc = up_col(j, inter, layout), gc = gate_col(j, inter, layout);
                const double u = at(fused, r, uc), g = at(fused, r, gc), d = at(d_out, r, j);
                const double sig = 1.0 / (1.0 + std::exp(-g));
                at(d_fused, r, uc) = T(d * g * sig);
                at(d_fused, r, gc) = T(d * u * (sig + g * sig * (1.0 - sig)));
            }
    }

    static void embed(const context&, mat<const Weight> table, vec<const int> ids, mat<T> x, T scale) {
        require(ids.size() == x.rows() && x.cols() >= table.cols(), "embed: shapes");
        for (index_t r = 0; r < x.rows(); ++r) {
            const int id = ptr(ids)[r];
            require(id >= 0 && id < table.rows(), "embed: id outside the table");
            for (index_t c = 0; c < x.cols(); ++c) at(x, r, c) = c < table.cols() ? T(double(scale) * double(at(table, id, c))) : T(0);
        }
    }
    static void embed_backward(const context&, mat<const T> dx, vec<const int> ids, mat<T> table, T scale) {
        for (index_t r = 0; r < dx.rows(); ++r) {
            const int id = ptr(ids)[r];
            require(id >= 0 && id < table.rows(), "embed_backward: id outside the table");
            for (index_t c = 0; c < table.cols(); ++c) at(table, id, c) = T(double(at(table, id, c)) + double(scale) * double(at(dx, r, c)));
        }
    }
    // row loss = logsumexp(z) - z_target; logits become grad_scale * (softmax - onehot).
    static void cross_entropy(const context&, mat<T> logits, vec<const int> targets, T grad_scale, vec<double> row_losses) {
        for (index_t r = 0; r < logits.rows(); ++r) {
            const int target = ptr(targets)[r];
            require(target >= 0 && target < logits.cols(), "cross_entropy: target outside the vocabulary");
            double top = -std::numeric_limits<double>::infinity(), z = 0;
            for (index_t c = 0; c < logits.cols(); ++c) top = std::max(top, double(at(logits, r, c)));
            for (index_t c = 0; c < logits.cols(); ++c) z += std::exp(double(at(logits, r, c)) - top);
            ptr(row_losses)[r] = std::log(z) + top - double(at(logits, r, target));
            for (index_t c = 0; c < logits.cols(); ++c)
                at(logits, r, c) = T(double(grad_scale) * (std::exp(double(at(logits, r, c)) - top) / z - (c == target ? 1.0 : 0.0)));
        }
    }

    // qkv columns per kv group g: [G query heads | key | value], each head_dim wide.
    template <index_t D, class E = T>
    static void split_qkv(const context&, mat<const T> qkv, mat<T> q, mat<E> k, mat<E> v, attention_shape<D> shape) {
        for_each_qkv(shape, qkv.rows(), [&](index_t r, index_t from, char part, index_t to) {
            if (part == 'q') at(q, r, to) = at(qkv, r, from);
            else (part == 'k' ? at(k, r, to) : at(v, r, to)) = stored_as<E>(at(qkv, r, from));
        });
    }
    template <index_t D>
    static void join_qkv(const context&, mat<const T> q, mat<const T> k, mat<const T> v, mat<T> qkv, attention_shape<D> shape) {
        for_each_qkv(shape, qkv.rows(), [&](index_t r, index_t to, char part, index_t from) {
            at(qkv, r, to) = part == 'q' ? at(q, r, from) : part == 'k' ? at(k, r, from) : at(v, r, from);
        });
    }
    static void copy(const context&, mat<const T> from, mat<T> to) {
        require(from.rows() == to.rows() && from.cols() == to.cols(), "copy: shapes");
        for (index_t r = 0; r < from.rows(); ++r)
            for (index_t c = 0; c < from.cols(); ++c) at(to, r, c) = at(from, r, c);
    }
    static void fill(const context&, mat<T> x, T value) {
        for (index_t r = 0; r < x.rows(); ++r)
            for (index_t c = 0; c < x.cols(); ++c) at(x, r, c) = value;
    }
    // The gaussian resize: columns [from, to) of row r = mean + std * z over its first `from`
    // (population standard deviation), z = gaussian_noise(key, positions[r], column).
    static void gaussian_pad(const context&, mat<T> x, index_t from, index_t to, vec<const int> positions, std::uint64_t key) {
        for (index_t r = 0; r < x.rows(); ++r) {
            double mean = 0, var = 0;
            for (index_t c = 0; c < from; ++c) mean += static_cast<double>(at(x, r, c));
            mean /= static_cast<double>(from);
            for (index_t c = 0; c < from; ++c) var += (static_cast<double>(at(x, r, c)) - mean) * (static_cast<double>(at(x, r, c)) - mean);
            const double std = std::sqrt(var / static_cast<double>(from));
            for (index_t c = from; c < to; ++c)
                at(x, r, c) = static_cast<T>(mean + std * vwt::detail::gaussian_noise(key, ptr(positions)[r], static_cast<int>(c)));
        }
    }
    // d mean = sum of the padded columns' gradient, d std = its sum times z; then to each of the
    // first `from`: d mean / n + d std (x - mean) / (n std). The padded columns' gradient is consumed.
    static void gaussian_pad_backward(const context&, mat<const T> x_in, mat<T> dx, index_t from, index_t to, vec<const int> positions,
                                      std::uint64_t key) {
        for (index_t r = 0; r < dx.rows(); ++r) {
            double mean = 0, var = 0;
            for (index_t c = 0; c < from; ++c) mean += static_cast<double>(at(x_in, r, c));
            mean /= static_cast<double>(from);
            for (index_t c = 0; c < from; ++c) var += (static_cast<double>(at(x_in, r, c)) - mean) * (static_cast<double>(at(x_in, r, c)) - mean);
            const double n = static_cast<double>(from), std = std::sqrt(var / n);
            double d_mean = 0, d_std = 0;
            for (index_t c = from; c < to; ++c) {
                d_mean += static_cast<double>(at(dx, r, c));
                d_std += static_cast<double>(at(dx, r, c)) * vwt::detail::gaussian_noise(key, ptr(positions)[r], static_cast<int>(c));
                at(dx, r, c) = T(0);
            }
            for (index_t c = 0; c < from; ++c)
                at(dx, r, c) += static_cast<T>(d_mean / n + (std > 0 ? d_std * (static_cast<double>(at(x_in, r, c)) - mean) / (n * std) : 0.0));
        }
    }
    static void scale(const context&, vec<T> x, T s) {
        for (index_t i = 0; i < x.size(); ++i) ptr(x)[i] = T(double(ptr(x)[i]) * double(s));
    }
    static void sum_squares(const context&, vec<const T> x, vec<double> out) {
        double sum = 0;
        for (index_t i = 0; i < x.size(); ++i) sum += double(ptr(x)[i]) * double(ptr(x)[i]);
        ptr(out)[0] = sum;
    }
    static void adamw(const context&, vec<Weight> params, vec<const T> grads, vec<State> m, vec<State> v, adamw_update u) {
        for (index_t i = 0; i < params.size(); ++i) {
            const double g = ptr(grads)[i];
            const double mi = u.beta1 * double(ptr(m)[i]) + (1 - u.beta1) * g;
            const double vi = u.beta2 * double(ptr(v)[i]) + (1 - u.beta2) * g * g;
            ptr(m)[i] = State(mi);
            ptr(v)[i] = State(vi);
            ptr(params)[i] = Weight(double(ptr(params)[i]) * u.decay - u.step_size * mi / (std::sqrt(vi) / u.root_bias2 + u.eps));
        }
    }

private:
    template <class F>
    static void for_each_expert(vec<const int> offsets, index_t rows, index_t stacked_rows, index_t n, const char* op, F f) {
        vwt::detail::for_each_expert(ptr(offsets), offsets.size() - 1, rows, stacked_rows, n, "reference backend", op, f);
    }
    static void require(bool ok, const char* what) {
        if (!ok) vwt::detail::fail("reference backend: ", what);
    }
    template <class U, index_t C>
    static U* ptr(const mat<U, C>& v) { return policy_access::data(v); }
    template <class U>
    static U* ptr(const vec<U>& v) { return policy_access::data(v); }
    template <class U, index_t C>
    static U& at(const mat<U, C>& v, index_t r, index_t c) {
        return ptr(v)[r * v.stride() + c];
    }
    // y(i, j) = alpha * sum_k lhs(i, k) rhs(k, j) + beta * y(i, j), in double; beta 0 never reads y.
    template <class Lhs, class Rhs>
    static void product(mat<T> y, index_t depth, Lhs lhs, Rhs rhs, T alpha, T beta) {
        for (index_t i = 0; i < y.rows(); ++i)
            for (index_t j = 0; j < y.cols(); ++j) {
                double sum = 0;
                for (index_t k = 0; k < depth; ++k) sum += double(lhs(i, k)) * double(rhs(k, j));
                at(y, i, j) = T(double(alpha) * sum + (beta == T(0) ? 0.0 : double(beta) * double(at(y, i, j))));
            }
    }
    static double as_double(T x) { return double(x); }
    static double as_double(bf16 x) { return double(static_cast<float>(x)); }
    template <class E>
    static E stored_as(T x) {
        if constexpr (std::is_same_v<E, T>) return x;
        else return E(static_cast<float>(x));
    }
    template <index_t C>
    static double inverse_rms(mat<const T, C> x, index_t r, T eps) {
        double sq = 0;
        for (index_t c = 0; c < x.cols(); ++c) sq += double(at(x, r, c)) * double(at(x, r, c));
        return 1.0 / std::sqrt(sq / double(x.cols()) + double(eps));
    }
    static index_t up_col(index_t j, index_t, swiglu_layout l) { return l == swiglu_layout::split ? j : 2 * j; }
    static index_t gate_col(index_t j, index_t inter, swiglu_layout l) { return l == swiglu_layout::split ? inter + j : 2 * j + 1; }
    // f(row, fused column, 'q' | 'k' | 'v', column in q, k or v)
    template <index_t D, class F>
    static void for_each_qkv(attention_shape<D> shape, index_t rows, F f) {
        const index_t d = shape.head_dim.value();
        const int G = shape.heads / shape.kv_heads;
        for (index_t r = 0; r < rows; ++r)
            for (int g = 0; g < shape.kv_heads; ++g) {
                const index_t base = g * (G + 2) * d;
                for (index_t c = 0; c < G * d; ++c) f(r, base + c, 'q', g * G * d + c);
                for (index_t c = 0; c < d; ++c) f(r, base + G * d + c, 'k', g * d + c);
                for (index_t c = 0; c < d; ++c) f(r, base + (G + 1) * d + c, 'v', g * d + c);
            }
    }
};

static_assert(backend_policy<backend<float>>);
static_assert(backend_policy<backend<double>>);

}  // namespace vwt::reference
