// The CUDA policy's kernels: everything but the GEMMs (cuBLASLt). Grid-stride loops over
// elements (one thread each) or over rows (one warp each); see device.cuh for the rules that keep
// them runnable by the CPU emulation.
#pragma once

#include "device.cuh"
#include "vwt/detail/gaussian_noise.hpp"

namespace vwt::cuda::kernels {
namespace {

using index = std::ptrdiff_t;

// Error bits a kernel records in the context's error word (raised by the host at the next wait).
enum error_bit : int { bad_embed_id = 1, bad_embed_backward_id = 2, bad_target = 4 };

// Attention keeps a row's output (and gradient) head vectors in registers: lane l holds dims l,
// l + 32, ..., so R = 8 registers cover head dims up to 256.
constexpr int max_head_registers = 8;

VWT_DEVICE unsigned lane() { return thread_x() % 32; }
VWT_DEVICE index first_thread() { return static_cast<index>(block_x()) * block_dim_x() + thread_x(); }
VWT_DEVICE index thread_count() { return static_cast<index>(grid_dim_x()) * block_dim_x(); }
VWT_DEVICE index first_warp() { return first_thread() / 32; }
VWT_DEVICE index warp_count() { return thread_count() / 32; }

// ---- elementwise

VWT_KERNEL void copy_kernel(const float* from, index from_stride, float* to, index to_stride, index rows, index cols) {
    for (index i = first_thread(); i < rows * cols; i += thread_count()) to[(i / cols) * to_stride + i % cols] = from[(i / cols) * from_stride + i % cols];
}

VWT_KERNEL void fill_kernel(float* x, index stride, index rows, index cols, float value) {
    for (index i = first_thread(); i < rows * cols; i += thread_count()) x[(i / cols) * stride + i % cols] = value;
}

// ---- the gaussian resize (vwt/detail/gaussian_noise.hpp), one thread per row, in double

VWT_DEVICE void row_moments(const float* row, index n, double& mean, double& std) {
    double sum = 0, squares = 0;
    for (index c = 0; c < n; ++c) sum += row[c];
    mean = sum / static_cast<double>(n);
    for (index c = 0; c < n; ++c) squares += (row[c] - mean) * (row[c] - mean);
    std = ::sqrt(squares / static_cast<double>(n));
}

VWT_KERNEL void gaussian_pad_kernel(float* x, index stride, index rows, index from, index to, const int* positions, std::uint64_t key) {
    for (index r = first_thread(); r < rows; r += thread_count()) {
        float* row = x + r * stride;
        double mean = 0, std = 0;
        row_moments(row, from, mean, std);
        for (index c = from; c < to; ++c)
            row[c] = static_cast<float>(mean + std * vwt::detail::gaussian_noise(key, positions[r], static_cast<int>(c)));
    }
}

VWT_KERNEL void gaussian_pad_backward_kernel(const float* x_in, index in_stride, float* dx, index stride, index rows, index from, index to,
                                             const int* positions, std::uint64_t key) {
    for (index r = first_thread(); r < rows; r += thread_count()) {
        const float* in = x_in + r * in_stride;
        float* d = dx + r * stride;
        double mean = 0, std = 0;
        row_moments(in, from, mean, std);
        double d_mean = 0, d_std = 0;
        for (index c = from; c < to; ++c) {
            d_mean += d[c];
            d_std += d[c] * vwt::detail::gaussian_noise(key, positions[r], static_cast<int>(c));
            d[c] = 0.0f;
        }
        const double n = static_cast<double>(from), std_term = std > 0 ? d_std / (n * std) : 0.0;
        for (index c = 0; c < from; ++c) d[c] += static_cast<float>(d_mean / n + std_term * (in[c] - mean));
    }
}

// y = beta y, beta 0 clearing (never reading) what was there: a product with an empty inner dimension.
VWT_KERNEL void scale_matrix_kernel(float* y, index stride, index rows, index cols, float beta) {
    for (index i = first_thread(); i < rows * cols; i += thread_count()) {
        float& e = y[(i / cols) * stride + i % cols];
        e = beta == 0.0f ? 0.0f : beta * e;
    }
}

VWT_KERNEL void scale_kernel(float* x, index n, float factor) {
    for (index i = first_thread(); i < n; i += thread_count()) x[i] *= factor;
}

// out[0] += sum x^2 (out cleared by the host first): per-thread partial sums in double, a warp
// sum, one atomic per warp.
VWT_KERNEL void sum_squares_kernel(const float* x, index n, double* out) {
    double partial = 0;
    for (index i = first_thread(); i < n; i += thread_count()) partial += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    const double total = warp_sum(partial);
    if (lane() == 0) atomic_add(out, total);
}

// AdamW in double arithmetic (torch's formula, see vwt::adamw_update).
VWT_KERNEL void adamw_kernel(float* params, const float* grads, float* m, float* v, index n, double beta1, double beta2, double eps,
                             double decay, double step_size, double root_bias2) {
    for (index i = first_thread(); i < n; i += thread_count()) {
        const double g = grads[i];
        const double mi = beta1 * static_cast<double>(m[i]) + (1 - beta1) * g;
        const double vi = beta2 * static_cast<double>(v[i]) + (1 - beta2) * g * g;
        m[i] = static_cast<float>(mi);
        v[i] = static_cast<float>(vi);
        params[i] = static_cast<float>(static_cast<double>(params[i]) * decay - step_size * mi / (sqrt(vi) / root_bias2 + eps));
    }
}

// out_j = u_j g_j sigmoid(g_j), with u and g two halves of the fused row or alternating.
VWT_DEVICE index up_column(index j, bool interleaved) { return interleaved ? 2 * j : j; }
VWT_DEVICE index gate_column(index j, index inter, bool interleaved) { return interleaved ? 2 * j + 1 : inter + j; }

VWT_KERNEL void swiglu_kernel(const float* fused, index fs, float* out, index os, index rows, index inter, bool interleaved) {
    for (index i = first_thread(); i < rows * inter; i += thread_count()) {
        const index r = i / inter, j = i % inter;
        const float u = fused[r * fs + up_column(j, interleaved)], g = fused[r * fs + gate_column(j, inter, interleaved)];
        out[r * os + j] = u * g / (1.0f + expf(-g));
    }
}

VWT_KERNEL void swiglu_backward_kernel(const float* fused, index fs, const float* d_out, index ds, float* d_fused, index dfs, index rows,
                                       index inter, bool interleaved) {
    for (index i = first_thread(); i < rows * inter; i += thread_count()) {
        const index r = i / inter, j = i % inter;
        const index uc = up_column(j, interleaved), gc = gate_column(j, inter, interleaved);
        const float u = fused[r * fs + uc], g = fused[r * fs + gc], d = d_out[r * ds + j];
        const float sig = 1.0f / (1.0f + expf(-g));
        d_fused[r * dfs + uc] = d * g * sig;
        d_fused[r * dfs + gc] = d * u * (sig + g * sig * (1.0f - sig));
    }
}

// Fused qkv columns per kv group g: [G query heads | key | value], each head_dim wide. Calls
// f(fused column, part 0/1/2 for q/k/v, column in that part) for fused column c.
template <class F>
VWT_DEVICE void qkv_column(index c, int group, index d, F f) {
    const index per_group = (group + 2) * d, g = c / per_group, within = c % per_group;
    if (within < group * d) f(0, g * group * d + within);
    else if (within < (group + 1) * d) f(1, g * d + within - group * d);
    else f(2, g * d + within - (group + 1) * d);
}

VWT_KERNEL void split_qkv_kernel(const float* qkv, index qkvs, float* q, index qs, float* k, index ks, float* v, index vs, index rows,
                                 index cols, int group, index d) {
    for (index i = first_thread(); i < rows * cols; i += thread_count()) {
        const index r = i / cols, c = i % cols;
        const float x = qkv[r * qkvs + c];
        qkv_column(c, group, d, [&](int part, index to) { (part == 0 ? q[r * qs + to] : part == 1 ? k[r * ks + to] : v[r * vs + to]) = x; });
    }
}

VWT_KERNEL void join_qkv_kernel(const float* q, index qs, const float* k, index ks, const float* v, index vs, float* qkv, index qkvs,
                                index rows, index cols, int group, index d) {
    for (index i = first_thread(); i < rows * cols; i += thread_count()) {
        const index r = i / cols, c = i % cols;
        qkv_column(c, group, d, [&](int part, index from) {
            qkv[r * qkvs + c] = part == 0 ? q[r * qs + from] : part == 1 ? k[r * ks + from] : v[r * vs + from];
        });
    }
}

// ---- embedding (an id outside the table leaves the row zero and records the error)

VWT_KERNEL void embed_kernel(const float* table, index ts, index vocab, index width, const int* ids, float* x, index xs, index rows,
                             index cols, float scale, int* error) {
    for (index i = first_thread(); i < rows * cols; i += thread_count()) {
        const index r = i / cols, c = i % cols;
        const int id = ids[r];
        const bool valid = id >= 0 && id < vocab;
        if (!valid && c == 0) atomic_or(error, bad_embed_id);
        x[r * xs + c] = valid && c < width ? scale * table[id * ts + c] : 0.0f;
    }
}

VWT_KERNEL void embed_backward_kernel(const float* dx, index dxs, const int* ids, float* table, index ts, index vocab, index rows,
                                      index width, float scale, int* error) {
    for (index i = first_thread(); i < rows * width; i += thread_count()) {
        const index r = i / width, c = i % width;
        const int id = ids[r];
        if (id < 0 || id >= vocab) {
            if (c == 0) atomic_or(error, bad_embed_backward_id);
            continue;
        }
        atomic_add(&table[id * ts + c], scale * dx[r * dxs + c]);
    }
}

// ---- one warp per row

// y = x / sqrt(mean(x^2) + eps) * g. Four columns per lane in flight (decode runs one row: one
// warp, whose loads would otherwise wait one after another).
VWT_KERNEL void rmsnorm_kernel(const float* x, index xs, const float* gain, float* y, index ys, index rows, index cols, float eps) {
    for (index r = first_warp(); r < rows; r += warp_count()) {
        const float* xr = x + r * xs;
        float* yr = y + r * ys;
        float sq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        index c = lane();
        for (; c + 96 < cols; c += 128) {
            const float a = xr[c], b = xr[c + 32], e = xr[c + 64], f = xr[c + 96];
            sq[0] += a * a;
            sq[1] += b * b;
            sq[2] += e * e;
            sq[3] += f * f;
        }
        for (; c < cols; c += 32) sq[0] += xr[c] * xr[c];
        const float inv = 1.0f / sqrtf(warp_sum((sq[0] + sq[1]) + (sq[2] + sq[3])) / static_cast<float>(cols) + eps);
        c = lane();
        for (; c + 96 < cols; c += 128) {
            const float a = xr[c], b = xr[c + 32], e = xr[c + 64], f = xr[c + 96];
            const float ga = gain[c], gb = gain[c + 32], ge = gain[c + 64], gf = gain[c + 96];
            yr[c] = a * inv * ga;
            yr[c + 32] = b * inv * gb;
            yr[c + 64] = e * inv * ge;
            yr[c + 96] = f * inv * gf;
        }
        for (; c < cols; c += 32) yr[c] = xr[c] * inv * gain[c];
    }
}

// dx += s g dy - x s^3 (x . (g o dy)) / n with s = 1/rms per row; s goes to inverse_rms[r] for
// the gain's gradient (rmsnorm_gain_backward_kernel).
VWT_KERNEL void rmsnorm_backward_kernel(const float* x, index xs, const float* gain, const float* dy, index dys, float* dx, index dxs,
                                        index rows, index cols, float eps, float* inverse_rms) {
    for (index r = first_warp(); r < rows; r += warp_count()) {
        float sq = 0, dot = 0;
        for (index c = lane(); c < cols; c += 32) {
            const float xv = x[r * xs + c];
            sq += xv * xv;
            dot += xv * gain[c] * dy[r * dys + c];
        }
        const float s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(cols) + eps);
        const float correction = s * s * s * warp_sum(dot) / static_cast<float>(cols);
        for (index c = lane(); c < cols; c += 32) dx[r * dxs + c] += s * gain[c] * dy[r * dys + c] - x[r * xs + c] * correction;
        if (lane() == 0) inverse_rms[r] = s;
    }
}

// dgain_c += sum_r dy_rc x_rc s_r in two passes, deterministic: partial sums over chunks of
// gain_chunk_rows rows (one thread per chunk and column, rows in order), then the chunks' sums in
// order (one thread per column).
constexpr index gain_chunk_rows = 64;
VWT_KERNEL void rmsnorm_gain_partial_kernel(const float* x, index xs, const float* dy, index dys, const float* inverse_rms, float* partial,
                                            index rows, index cols) {
    const index chunks = (rows + gain_chunk_rows - 1) / gain_chunk_rows;
    for (index i = first_thread(); i < chunks * cols; i += thread_count()) {
        const index c = i % cols, begin = (i / cols) * gain_chunk_rows;
        const index end = begin + gain_chunk_rows < rows ? begin + gain_chunk_rows : rows;
        float sum = 0;
        for (index r = begin; r < end; ++r) sum += dy[r * dys + c] * x[r * xs + c] * inverse_rms[r];
        partial[i] = sum;
    }
}
VWT_KERNEL void rmsnorm_gain_backward_kernel(const float* partial, float* dgain, index chunks, index cols) {
    for (index c = first_thread(); c < cols; c += thread_count()) {
        float sum = 0;
        for (index chunk = 0; chunk < chunks; ++chunk) sum += partial[chunk * cols + c];
        dgain[c] += sum;
    }
}

// Loss and gradient of softmax cross-entropy per row: loss = logsumexp(z) - z_target, and the
// row becomes grad_scale * (softmax(z) - onehot(target)). Three passes over the vocabulary.
VWT_KERNEL void cross_entropy_kernel(float* logits, index ls, index rows, index vocab, const int* targets, float grad_scale,
                                     double* row_losses, int* error) {
    for (index r = first_warp(); r < rows; r += warp_count()) {
        float* z = logits + r * ls;
        const int target = targets[r];
        if (target < 0 || target >= vocab) {
            if (lane() == 0) {
                atomic_or(error, bad_target);
                row_losses[r] = NAN;
            }
            continue;
        }
        const float z_target = z[target];  // read by every lane before any lane writes (warp_max syncs)
        float top = -INFINITY;
        for (index c = lane(); c < vocab; c += 32) top = fmaxf(top, z[c]);
        top = warp_max(top);
        float sum = 0;
        for (index c = lane(); c < vocab; c += 32) sum += expf(z[c] - top);
        sum = warp_sum(sum);
        if (lane() == 0) row_losses[r] = static_cast<double>(logf(sum)) + static_cast<double>(top) - static_cast<double>(z_target);
        const float inv = 1.0f / sum;
        for (index c = lane(); c < vocab; c += 32) z[c] = grad_scale * (expf(z[c] - top) * inv - (c == target ? 1.0f : 0.0f));
    }
}

// ---- RoPE: one thread per rotated pair

// (a, b) = (v_j, v_{j+d/2}) becomes (a cos - b sin, b cos + a sin) at angle position * theta^(-2j/d)
// (negated for the inverse). The angle in double: positions reach 2^31.
VWT_KERNEL void rope_kernel(float* x, index xs, index rows, int groups, int heads_per_group, index group_stride, index d,
                            const int* positions, double theta, bool inverse) {
    const index half = d / 2, per_row = static_cast<index>(groups) * heads_per_group * half;
    for (index i = first_thread(); i < rows * per_row; i += thread_count()) {
        const index r = i / per_row, within = i % per_row;
        const index pair = within % half, head = within / half;
        const index g = head / heads_per_group, h = head % heads_per_group;
        float* v = x + r * xs + g * group_stride + h * d;
        const double angle = (inverse ? -1.0 : 1.0) * static_cast<double>(positions[r]) *
                             pow(theta, -2.0 * static_cast<double>(pair) / static_cast<double>(d));
        const double c = cos(angle), s = sin(angle);
        const double a = v[pair], b = v[pair + half];
        v[pair] = static_cast<float>(a * c - b * s);
        v[pair + half] = static_cast<float>(b * c + a * s);
    }
}

// ---- attention: one warp per (query row, head[, key split]) or (key row, kv head), over blocks of
// 32 keys (or queries). Every load is a coalesced row: lane l holds dims l, l + 32, ... of a head
// vector; the 32 dot products of a block are summed across the lanes together (31 shuffles), so
// that lane l ends with row l's.

// Loads head vector dims lane + 32 j of row `p` (R registers), times `factor`; zero past d.
template <int R>
VWT_DEVICE void load_head(const float* p, index d, float factor, float (&to)[R]) {
    VWT_UNROLL for (int j = 0; j < R; ++j) {
        const index c = lane() + 32 * j;
        to[j] = c < d ? p[c] * factor : 0.0f;
    }
}

// part[src] = this lane's share of a . rows[src] (0 for src >= n; n the same in every lane).
template <int R>
VWT_DEVICE void partial_dots(const float (&a)[R], const float* rows, index stride, index n, index d, float (&part)[32]) {
    VWT_UNROLL for (int src = 0; src < 32; ++src) {
        float sum = 0.0f;
        if (src < n) {
            const float* row = rows + src * stride;
            VWT_UNROLL for (int j = 0; j < R; ++j) {
                const index c = lane() + 32 * j;
                if (c < d) sum += a[j] * row[c];
            }
        }
        part[src] = sum;
    }
}

// One halving step of transpose_sum: lanes with bit `half` set keep the upper half of their
// values and send the lower half to their partner, which does the opposite.
template <int half>
VWT_DEVICE void transpose_sum_step(float (&part)[32]) {
    const bool upper = (lane() & half) != 0;
    VWT_UNROLL for (int i = 0; i < half; ++i) {
        const float send = upper ? part[i] : part[i + half], keep = upper ? part[i + half] : part[i];
        part[i] = keep + warp_shuffle_xor(send, half);
    }
}
// Lane l gets the warp's sum of part[l] (every lane's 32 values are consumed).
VWT_DEVICE float transpose_sum(float (&part)[32]) {
    transpose_sum_step<16>(part);
    transpose_sum_step<8>(part);
    transpose_sum_step<4>(part);
    transpose_sum_step<2>(part);
    transpose_sum_step<1>(part);
    return part[0];
}

// Lane l gets a . rows[l] for l < n (summed over the warp), 0 beyond.
template <int R>
VWT_DEVICE float block_dots(const float (&a)[R], const float* rows, index stride, index n, index d) {
    float part[32];
    partial_dots(a, rows, stride, n, d, part);
    return transpose_sum(part);
}

// o[j] += sum_{src < n} w_src rows[src][lane + 32 j] over the dims below d, w_src being lane
// src's `w` (n <= 32, the same in every lane).
template <int R>
VWT_DEVICE void accumulate_rows(float w, const float* rows, index stride, index n, index d, float (&o)[R]) {
    for (index src = 0; src < n; ++src) {
        const float ws = warp_shuffle(w, static_cast<int>(src));
        const float* row = rows + src * stride;
        VWT_UNROLL for (int j = 0; j < R; ++j) {
            const index c = lane() + 32 * j;
            if (c < d) o[j] += ws * row[c];
        }
    }
}

VWT_DEVICE index block_of_32(index begin, index end) { return end - begin < 32 ? end - begin : 32; }

// Causal attention of `rows` queries against n_ctx keys (the last `rows` of which are the
// queries' own positions): out_i = sum_{t <= past + i} softmax_t(scale q_i . k_t) v_t, with an
// online softmax over blocks of 32 keys (lane l scores key t0 + l). Keys are split into `splits`
// chunks of `chunk`: with one split the result goes to out; otherwise each (row, head, split)
// writes its unnormalised output, its maximum and its sum to partial (d + 2 floats), and
// attention_combine_kernel merges them.
template <int R>
VWT_KERNEL void attention_kernel(const float* q, index qs, const float* k, index ks, const float* v, index vs, float* out, index os,
                                 index rows, index n_ctx, int heads, int group, index d, float scale, int splits, index chunk,
                                 float* partial) {
    const index past = n_ctx - rows, total = rows * heads * splits;
    for (index w = first_warp(); w < total; w += warp_count()) {
        const int split = static_cast<int>(w % splits), h = static_cast<int>((w / splits) % heads);
        const index i = w / (static_cast<index>(splits) * heads);
        const index kv = static_cast<index>(h / group) * d, seen = past + i + 1;
        const index begin = split * chunk, end = begin + chunk < seen ? begin + chunk : seen;
        float qr[R], o[R];
        load_head(q + i * qs + h * d, d, scale, qr);
        for (int j = 0; j < R; ++j) o[j] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        for (index t0 = begin; t0 < end; t0 += 32) {
            const index n = block_of_32(t0, end);
            const bool valid = lane() < n;
            const float dot = block_dots(qr, k + t0 * ks + kv, ks, n, d), s = valid ? dot : -INFINITY;
            const float m_new = fmaxf(m, warp_max(s));
            const float correction = expf(m - m_new), p = valid ? expf(s - m_new) : 0.0f;
            l = l * correction + warp_sum(p);
            for (int j = 0; j < R; ++j) o[j] *= correction;
            accumulate_rows(p, v + t0 * vs + kv, vs, n, d, o);
            m = m_new;
        }
        if (splits == 1) {
            for (int j = 0; j < R; ++j)
                if (lane() + 32 * j < d) out[i * os + h * d + lane() + 32 * j] = o[j] / l;
        } else {
            float* to = partial + ((i * heads + h) * splits + split) * (d + 2);
            for (int j = 0; j < R; ++j)
                if (lane() + 32 * j < d) to[lane() + 32 * j] = o[j];
            if (lane() == 0) {
                to[d] = m;
                to[d + 1] = l;
            }
        }
    }
}

VWT_KERNEL void attention_combine_kernel(const float* partial, float* out, index os, index rows, int heads, index d, int splits) {
    for (index w = first_warp(); w < rows * heads; w += warp_count()) {
        const float* from = partial + w * splits * (d + 2);
        const index i = w / heads, h = w % heads;
        float top = -INFINITY;
        for (int s = 0; s < splits; ++s) top = fmaxf(top, from[s * (d + 2) + d]);
        float sum = 0;
        for (int s = 0; s < splits; ++s) sum += from[s * (d + 2) + d + 1] * expf(from[s * (d + 2) + d] - top);
        for (index c = lane(); c < d; c += 32) {
            float o = 0;
            for (int s = 0; s < splits; ++s) o += from[s * (d + 2) + c] * expf(from[s * (d + 2) + d] - top);
            out[i * os + h * d + c] = o / sum;
        }
    }
}

// Backward, without the T x T probabilities: with P the causal softmax and dP = dO V^T,
// dS = P o (dP - c) * scale where c_i = sum_t P_it dP_it; dQ = dS K, dK = dS^T Q, dV = P^T dO.
// Pass 1 stores per (row, head) the softmax maximum m, its sum l and c (3 floats).
template <int R>
VWT_KERNEL void attention_stats_kernel(const float* q, index qs, const float* k, index ks, const float* v, index vs, const float* d_out,
                                       index dos, index rows, int heads, int group, index d, float scale, float* stats) {
    for (index w = first_warp(); w < rows * heads; w += warp_count()) {
        const index i = w / heads;
        const int h = static_cast<int>(w % heads);
        const index kv = static_cast<index>(h / group) * d;
        float qr[R], dor[R];
        load_head(q + i * qs + h * d, d, scale, qr);
        load_head(d_out + i * dos + h * d, d, 1.0f, dor);
        float m = -INFINITY, l = 0.0f, centre = 0.0f;
        for (index t0 = 0; t0 <= i; t0 += 32) {
            const index n = block_of_32(t0, i + 1);
            const bool valid = lane() < n;
            const float dot = block_dots(qr, k + t0 * ks + kv, ks, n, d), s = valid ? dot : -INFINITY;
            const float dp = block_dots(dor, v + t0 * vs + kv, vs, n, d);
            const float m_new = fmaxf(m, warp_max(s));
            const float correction = expf(m - m_new), p = valid ? expf(s - m_new) : 0.0f;
            l = l * correction + warp_sum(p);
            centre = centre * correction + warp_sum(p * dp);
            m = m_new;
        }
        if (lane() == 0) {
            stats[w * 3] = m;
            stats[w * 3 + 1] = l;
            stats[w * 3 + 2] = centre / l;
        }
    }
}

// Pass 2: dQ_i = sum_{t <= i} dS_it k_t per (row, head).
template <int R>
VWT_KERNEL void attention_dq_kernel(const float* q, index qs, const float* k, index ks, const float* v, index vs, const float* d_out,
                                    index dos, float* dq, index dqs, index rows, int heads, int group, index d, float scale,
                                    const float* stats) {
    for (index w = first_warp(); w < rows * heads; w += warp_count()) {
        const index i = w / heads;
        const int h = static_cast<int>(w % heads);
        const index kv = static_cast<index>(h / group) * d;
        const float m = stats[w * 3], l = stats[w * 3 + 1], centre = stats[w * 3 + 2];
        float qr[R], dor[R], g[R];
        load_head(q + i * qs + h * d, d, scale, qr);
        load_head(d_out + i * dos + h * d, d, 1.0f, dor);
        for (int j = 0; j < R; ++j) g[j] = 0.0f;
        for (index t0 = 0; t0 <= i; t0 += 32) {
            const index n = block_of_32(t0, i + 1);
            const float s = block_dots(qr, k + t0 * ks + kv, ks, n, d), dp = block_dots(dor, v + t0 * vs + kv, vs, n, d);
            const float ds = lane() < n ? expf(s - m) / l * (dp - centre) * scale : 0.0f;
            accumulate_rows(ds, k + t0 * ks + kv, ks, n, d, g);
        }
        for (int j = 0; j < R; ++j)
            if (lane() + 32 * j < d) dq[i * dqs + h * d + lane() + 32 * j] = g[j];
    }
}

// Pass 3: per (key row t, kv head), over the heads that share it and the rows i >= t (32 at a
// time, one per lane): dK_t = sum dS_it q_i, dV_t = sum P_it dO_i.
template <int R>
VWT_KERNEL void attention_dkdv_kernel(const float* q, index qs, const float* k, index ks, const float* v, index vs, const float* d_out,
                                      index dos, float* dk, index dks, float* dv, index dvs, index rows, int heads, int group, index d,
                                      float scale, const float* stats) {
    const int kv_heads = heads / group;
    for (index w = first_warp(); w < rows * kv_heads; w += warp_count()) {
        const index t = w / kv_heads;
        const int g = static_cast<int>(w % kv_heads);
        const index kv = static_cast<index>(g) * d;
        float kr[R], vr[R], gk[R], gv[R];
        load_head(k + t * ks + kv, d, scale, kr);
        load_head(v + t * vs + kv, d, 1.0f, vr);
        for (int j = 0; j < R; ++j) gk[j] = gv[j] = 0.0f;
        for (int h = g * group; h < (g + 1) * group; ++h)
            for (index i0 = t; i0 < rows; i0 += 32) {
                const index n = block_of_32(i0, rows);
                const float s = block_dots(kr, q + i0 * qs + h * d, qs, n, d), dp = block_dots(vr, d_out + i0 * dos + h * d, dos, n, d);
                float p = 0.0f, ds = 0.0f;
                if (lane() < n) {
                    const float* stat = stats + ((i0 + lane()) * heads + h) * 3;
                    p = expf(s - stat[0]) / stat[1];
                    ds = p * (dp - stat[2]) * scale;
                }
                accumulate_rows(ds, q + i0 * qs + h * d, qs, n, d, gk);
                accumulate_rows(p, d_out + i0 * dos + h * d, dos, n, d, gv);
            }
        for (int j = 0; j < R; ++j)
            if (lane() + 32 * j < d) {
                dk[t * dks + kv + lane() + 32 * j] = gk[j];
                dv[t * dvs + kv + lane() + 32 * j] = gv[j];
            }
    }
}

}  // namespace
}  // namespace vwt::cuda::kernels
