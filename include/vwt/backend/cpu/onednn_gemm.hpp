// The CPU policy's optional GEMM through oneDNN (define VWT_WITH_ONEDNN and link DNNL::dnnl, as
// the vwt::onednn CMake target does). oneDNN picks its kernel at run time for the CPU it runs on
// (AVX-512, AVX2, AMX), which a header-only library compiled with its user's flags cannot do; on the
// model's prefill shapes its sgemm measured 1.3-1.4x Eigen's, and its bf16 matmul 2x its sgemm, on
// a 2-core Zen 4. Without it, the policy uses Eigen.
#pragma once

#if defined(VWT_WITH_ONEDNN)
#include <array>
#include <bit>
#include <type_traits>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "../../error.hpp"
#include "../../tensor/view.hpp"
#include "context.hpp"
#include "weight_kernels.hpp"

namespace vwt::cpu::onednn {

namespace detail {
// Runs f with the calling thread's OpenMP thread count set to `threads`, restoring it after (oneDNN
// threads with OpenMP and reads that count).
template <class F>
void with_threads(int threads, F&& f) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    struct restore {
        int n;
        ~restore() { omp_set_num_threads(n); }
    } guard{saved};
    f();
}
}  // namespace detail

// y = alpha * op(a) . op(b) + beta * y, row-major, op = transpose where the flag is 'T', on
// `threads` threads: oneDNN threads with OpenMP, so the calling thread's OpenMP thread count is
// set for the call and restored after it (inside an enclosing parallel region oneDNN runs on the
// calling thread alone). beta 0 does not read y.
inline void sgemm(int threads, char trans_a, char trans_b, index_t m, index_t n, index_t k, float alpha, const float* a,
                  index_t lda, const float* b, index_t ldb, float beta, float* y, index_t ldy) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // nothing to multiply: y = beta * y (oneDNN wants leading dimensions >= 1)
        for (index_t r = 0; r < m; ++r)
            for (index_t c = 0; c < n; ++c) y[r * ldy + c] = beta == 0.0f ? 0.0f : beta * y[r * ldy + c];
        return;
    }
    dnnl_status_t status = dnnl_success;
    detail::with_threads(threads, [&] { status = dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, y, ldy); });
    if (status != dnnl_success)
        vwt::detail::fail("oneDNN sgemm (", trans_a, trans_b, ") of [", m, " x ", k, "] by [", k, " x ", n, "] failed with status ",
                          static_cast<int>(status));
}

namespace detail {
// The operand `rows x cols` at p (leading dimension ld, in stored items) as bf16: itself when it
// is bf16, else rounded into `copy` (packed, leading dimension cols) on `threads` threads; q8
// blocks are dequantized, then rounded.
template <class E>
const bf16* as_bf16(int threads, const E* p, index_t rows, index_t cols, index_t& ld, product_cache::buffer<bf16>& copy) {
    if constexpr (std::is_same_v<E, bf16>) {
        return p;
    } else {
        static_assert(std::is_same_v<E, float> || std::is_same_v<E, q8_block>, "bf16 products take float, bf16 or q8 operands");
        copy.resize(static_cast<std::size_t>(rows * cols));
        const index_t from = ld;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && rows > 1)
        for (index_t r = 0; r < rows; ++r) kernels::round_to_bf16(p + r * from, cols, copy.data() + r * cols);
        ld = cols;
        return copy.data();
    }
}
}  // namespace detail

// What a bf16 product does with its float sums s before they reach y (oneDNN post-ops, applied as
// each tile of y is stored).
enum class epilogue {
    none,   // y = alpha s + beta y, float
    silu,   // y = s / (1 + e^-s), float (alpha 1, beta 0)
    times,  // y = bf16(s * f), f a dense float [m x n] operand; y bf16 (alpha 1, beta 0)
};

namespace detail {
// gemm_bf16 with the cache's lock held, into a dense y (leading dimension n): float, or bf16 for
// epilogue::times, whose other factor is `factor`.
template <class A, class B>
bool gemm_bf16_dense(product_cache& cache, int threads, char trans_a, char trans_b, index_t m, index_t n, index_t k, float alpha,
                     const A* a, index_t lda, const B* b, index_t ldb, float beta, void* y, product_shapes shapes,
                     epilogue after = epilogue::none, const float* factor = nullptr) {
    const bool varying = shapes == product_shapes::varying_rows;
    constexpr index_t runtime = DNNL_RUNTIME_DIM_VAL;
    const index_t key_m = varying && trans_a == 'N' ? -1 : m, key_k = varying && trans_a == 'T' ? -1 : k;
    const product_cache::key key{trans_a, trans_b, key_m, n, key_k, lda, ldb, std::bit_cast<std::int32_t>(alpha),
                                 std::bit_cast<std::int32_t>(beta), static_cast<std::int64_t>(after)};
    // The primitive reads the operands in place: strides say which is transposed. Float operands
    // are rounded into packed copies, which changes their leading dimension, not the key's. (No
    // packed leading dimension is the token count, so a run-time token count keeps them fixed.)
    const index_t packed_lda = trans_a == 'N' ? k : m, packed_ldb = trans_b == 'N' ? n : k;
    const index_t ld_a = std::is_same_v<A, bf16> ? lda : packed_lda, ld_b = std::is_same_v<B, bf16> ? ldb : packed_ldb;
    using dims = dnnl::memory::dims;
    using dt = dnnl::memory::data_type;
    const auto descs = [&](index_t rows_m, index_t rows_k) {
        return std::array{dnnl::memory::desc({rows_m, rows_k}, dt::bf16, trans_a == 'N' ? dims{ld_a, 1} : dims{1, ld_a}),
                          dnnl::memory::desc({rows_k, n}, dt::bf16, trans_b == 'N' ? dims{ld_b, 1} : dims{1, ld_b}),
                          dnnl::memory::desc({rows_m, n}, after == epilogue::times ? dt::bf16 : dt::f32, dims{n, 1}),
                          dnnl::memory::desc({rows_m, n}, dt::f32, dims{n, 1})};  // the factor of epilogue::times
    };
    const auto actual = descs(m, k);
    const auto& a_desc = actual[0];
    const auto& b_desc = actual[1];
    const auto& y_desc = actual[2];
    if (!cache.engine()) cache.engine() = std::make_shared<dnnl::engine>(dnnl::engine::kind::cpu, 0);
    auto& engine = *static_cast<dnnl::engine*>(cache.engine().get());
    const auto primitive = std::static_pointer_cast<dnnl::matmul>(cache.find_or_make(key, [&]() -> std::shared_ptr<void> {
        dnnl::primitive_attr attr;
        if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
        const auto made = descs(key_m < 0 ? runtime : m, key_k < 0 ? runtime : k);
        dnnl::post_ops ops;
        if (beta != 0.0f) ops.append_sum(beta);
        if (after == epilogue::silu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
        if (after == epilogue::times) ops.append_binary(dnnl::algorithm::binary_mul, made[3]);
        attr.set_post_ops(ops);
        try {
            return std::make_shared<dnnl::matmul>(dnnl::matmul::primitive_desc(dnnl::matmul::desc(made[0], made[1], made[2]), attr, engine));
        } catch (const dnnl::error& e) {
            if (e.status == dnnl_unimplemented) return nullptr;
            vwt::detail::fail("oneDNN bf16 matmul of [", m, " x ", k, "] by [", k, " x ", n, "]: ", e.what());
        }
    }));
    if (!primitive) return false;
    index_t la = lda, lb = ldb;
    const bf16* a16 = detail::as_bf16(threads, a, trans_a == 'N' ? m : k, trans_a == 'N' ? k : m, la, cache.operand(0));
    const bf16* b16 = detail::as_bf16(threads, b, trans_b == 'N' ? k : n, trans_b == 'N' ? n : k, lb, cache.operand(1));
    // oneDNN's C++ API takes non-const handles; the primitive only reads its source and weights.
    dnnl::memory a_mem(a_desc, engine, const_cast<bf16*>(a16)), b_mem(b_desc, engine, const_cast<bf16*>(b16)), y_mem(y_desc, engine, y);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, y_mem}};
    if (after == epilogue::times)
        args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, dnnl::memory(actual[3], engine, const_cast<float*>(factor)));
    detail::with_threads(threads, [&] {
        dnnl::stream stream(engine);
        try {
            primitive->execute(stream, args);
            stream.wait();
        } catch (const dnnl::error& e) {
            vwt::detail::fail("oneDNN bf16 matmul of [", m, " x ", k, "] by [", k, " x ", n, "] failed: ", e.what());
        }
    });
    return true;
}
}  // namespace detail

// y = alpha * op(a) . op(b) + beta * y with bf16 operands (float and q8 ones rounded to bf16 first,
// ties to even), float sums and a float y, row-major, op = transpose where the flag is 'T'. It runs a
// oneDNN matmul primitive kept in `cache`: made on the first call of each shape, or with
// varying_rows on the first call of each shape but its token count (m where a is not transposed,
// k where it is), which the primitive takes at run time. Returns false, having done nothing, where
// oneDNN has no bf16 matmul for this CPU (one without AVX-512); the caller then multiplies another
// way.
template <class A, class B>
bool gemm_bf16(product_cache& cache, int threads, char trans_a, char trans_b, index_t m, index_t n, index_t k, float alpha,
               const A* a, index_t lda, const B* b, index_t ldb, float beta, float* y, index_t ldy,
               product_shapes shapes = product_shapes::fixed) {
    if (m == 0 || n == 0 || k == 0) {  // nothing to multiply: sgemm's own handling
        sgemm(threads, 'N', 'N', m, n, 0, alpha, nullptr, 1, nullptr, 1, beta, y, ldy);
        return true;
    }
    const std::scoped_lock lock(cache.mutex());
    if (ldy == n) return detail::gemm_bf16_dense(cache, threads, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, y, shapes);
    // A destination with a stride wider than its rows (a narrow layer's columns of the residual
    // stream) sends oneDNN 2.6 from its AMX/brgemm kernels to gemm:jit, which ran 2-5x slower on the
    // ><former's shapes: multiply into a dense buffer, then add that into y.
    auto& dense = cache.dense_output();
    dense.resize(static_cast<std::size_t>(m * n));
    if (!detail::gemm_bf16_dense(cache, threads, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, dense.data(), shapes))
        return false;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && m > 1)
    for (index_t r = 0; r < m; ++r) {
        const float* t = dense.data() + r * n;
        float* row = y + r * ldy;
        if (beta == 0.0f)
            for (index_t c = 0; c < n; ++c) row[c] = alpha * t[c];
        else
            for (index_t c = 0; c < n; ++c) row[c] = alpha * t[c] + beta * row[c];
    }
    return true;
}

// The first layer of a SwiGLU MLP on bf16 operands, with SwiGLU applied by the products as they
// store their sums: silu_g = silu(a . g^T) (float, [m x n] dense), then act = bf16((a . u^T) *
// silu_g) ([m x n] dense). a: [m x k] (row stride lda), float (rounded to bf16 once, for both
// products) or bf16; u, g: [n x k] (row stride ldw, in stored items), bf16 or q8 blocks (each
// dequantized and rounded into the cache's copy for its product). One product of n columns writes
// float, the other reads it back: half the memory traffic of writing both halves' float sums and
// running SwiGLU over them. Returns false where oneDNN has no such matmul on this CPU; silu_g and
// act are then unspecified and the caller computes act another way.
template <class A, class W>
bool swiglu_products_bf16(product_cache& cache, int threads, index_t m, index_t n, index_t k, const A* a, index_t lda, const W* u,
                          const W* g, index_t ldw, float* silu_g, bf16* act) {
    if (m == 0 || n == 0) return true;
    if (k == 0) return false;  // nothing to multiply: the caller's way
    const std::scoped_lock lock(cache.mutex());
    const bf16* a16 = detail::as_bf16(threads, a, m, k, lda, cache.operand(0));
    return detail::gemm_bf16_dense(cache, threads, 'N', 'T', m, n, k, 1.0f, a16, lda, g, ldw, 0.0f, silu_g, product_shapes::fixed,
                                   epilogue::silu) &&
           detail::gemm_bf16_dense(cache, threads, 'N', 'T', m, n, k, 1.0f, a16, lda, u, ldw, 0.0f, act, product_shapes::fixed,
                                   epilogue::times, silu_g);
}

}  // namespace vwt::cpu::onednn
#endif
