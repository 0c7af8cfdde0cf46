// The CPU policy's prefill attention in bf16 products, for models whose weights are bf16 or q8: the
// score and value products in bf16 with float sums, the softmax in float. Two engines run the
// products, chosen at run time: AMX tiles (Intel Xeon since Sapphire Rapids) and, on CPUs with
// AVX512_BF16 but no tiles (AMD Zen 4 and later, Intel Cooper Lake), vdpbf16ps, which sums 16
// pairs of bf16 products into 16 floats per instruction, twice the float FMA's products. Both
// read the same layouts. One head at a time, query rows in blocks of 16 (one tile's rows): the
// block's scores against the keys it sees (16 at a time), a causal softmax of each row rounded to
// bf16, then the weighted sum of values (32 keys at a time).
//
// Numbers (docs/semantics-decisions.md, "Attention in bf16 products"): each query is scaled, then
// rounded to bf16; keys and values are rounded to bf16 (a bf16 KV cache is read as it is); the
// softmax's exponentials, e^(s - max) in (0, 1], are rounded to bf16 as the weights of the values,
// and each output row is divided by the float sum of the exponentials. The engines differ only in
// the order of the float sums.
//
// The bf16 and tile instructions are compiled into functions of their own (target attributes), so
// that the build needs no such flags; which run is decided at run time (tiles_available(),
// dots_available()).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "../../tensor/bf16.hpp"
#include "../../tensor/view.hpp"
#include "attention_kernels.hpp"
#include "cpu_features.hpp"

#if defined(__x86_64__) && defined(__linux__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    (defined(__clang__) || defined(__GNUC__))
#define VWT_BF16_ATTENTION 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace vwt::cpu::kernels::bf16_attention {

// What runs the score and value products.
enum class engine { tiles, dots };

// The layout of one head's operands in the tiles' shapes, and the scratch one thread needs. Keys
// are padded with zeros to whole 32-key chunks, head dims to whole 32-dim chunks (a tile row of
// bf16 pairs; a shorter last chunk would need tiles of their own shape and as many tile products).
struct head_layout {
    index_t n_ctx = 0, d = 0;

    index_t keys() const { return (n_ctx + 31) / 32 * 32; }
    index_t dims() const { return (d + 31) / 32 * 32; }
    index_t chunks() const { return dims() / 32; }           // of a query row: 32 dims, 64 bytes
    index_t pairs() const { return dims() / 2; }
    index_t value_blocks() const { return (d + 15) / 16; }  // 16 output columns per tile
    // Keys: per block of 16 keys, one 64-byte row per pair of dims holding the pair of each key
    // (the tile product's B operand, K transposed): kp[(j * pairs() + p) * 32 + 2 i + e] = key 16 j + i, dim 2 p + e.
    index_t key_elements() const { return keys() * dims(); }
    // Values: per chunk of 32 keys and block of 16 columns, one 64-byte row per pair of keys:
    // vp[((c * value_blocks() + b) * 16 + p) * 32 + 2 i + e] = value 32 c + 2 p + e, column 16 b + i.
    index_t value_elements() const { return keys() * value_blocks() * 16; }

    // The scratch of one thread, in bytes, each part on its own cache lines: keys, values, a block
    // of queries, its float scores, its bf16 weights and its float outputs.
    static constexpr index_t line(index_t bytes) { return (bytes + 63) / 64 * 64; }
    index_t key_bytes() const { return line(key_elements() * 2); }
    index_t value_bytes() const { return line(value_elements() * 2); }
    index_t query_bytes() const { return line(16 * dims() * 2); }
    index_t score_bytes() const { return line(16 * keys() * 4); }
    index_t weight_bytes() const { return line(16 * keys() * 2); }
    index_t output_bytes() const { return line(16 * value_blocks() * 16 * 4); }
    // (one line more than the parts: head_scratch starts them on the first line boundary; tile
    // rows that straddle two lines load and store at a third of the speed)
    index_t scratch_bytes() const {
        return key_bytes() + value_bytes() + query_bytes() + score_bytes() + weight_bytes() + output_bytes() + 64;
    }
};

// One thread's scratch carved into the layout's parts.
struct head_scratch {
    bf16 *keys, *values, *queries, *weights;
    float *scores, *outputs;
    head_scratch(std::byte* scratch, const head_layout& l) {
        std::byte* base = scratch + (64 - reinterpret_cast<std::uintptr_t>(scratch) % 64) % 64;
        keys = reinterpret_cast<bf16*>(base);
        values = reinterpret_cast<bf16*>(base += l.key_bytes());
        queries = reinterpret_cast<bf16*>(base += l.value_bytes());
        scores = reinterpret_cast<float*>(base += l.query_bytes());
        weights = reinterpret_cast<bf16*>(base += l.score_bytes());
        outputs = reinterpret_cast<float*>(base + l.weight_bytes());
    }
};

#if defined(VWT_BF16_ATTENTION)
// Whether this process can run the tile products: the CPU reports AMX-TILE and AMX-BF16 (CPUID
// leaf 7, EDX bits 24 and 22) and AVX512_BF16 (leaf 7.1, EAX bit 5: the roundings), and Linux
// grants the process the tiles' register state (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)).
// Asked once: both last as long as the process.
inline bool tiles_available() {
    static const bool granted = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
        if (!((d >> 24) & 1u) || !((d >> 22) & 1u) || !has_avx512_bf16()) return false;
        constexpr long request_permission = 0x1023, tile_data = 18;
        return syscall(SYS_arch_prctl, request_permission, tile_data) == 0;
    }();
    return granted;
}
// Whether the CPU has vdpbf16ps and the roundings (AVX512_BF16).
inline bool dots_available() { return has_avx512_bf16(); }

namespace detail {
using kernels::detail::first_lanes;  // a mask of the first n of 16 lanes
// 32 values of a row from `p` (the first n, 0 after them) as 16 bf16 pairs, in 32-bit lanes:
// float rounded by vcvtne2ps2bf16 (nearest, ties to even), bf16 as it is.
__attribute__((target("avx512bf16"))) inline __m512i bf16_pairs(const float* p, index_t n) {
    const __m512 low = _mm512_maskz_loadu_ps(first_lanes(n), p);
    const __m512 high = _mm512_maskz_loadu_ps(first_lanes(n - 16), p + 16);
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
}
inline __m512i bf16_pairs(const bf16* p, index_t n) {
    const __mmask32 present = n >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((std::uint64_t(1) << std::max<index_t>(0, n)) - 1);
    return _mm512_maskz_loadu_epi16(present, p);
}
// r[i][j] -> r[j][i] for a 16 x 16 matrix of 32-bit lanes: pairs of rows, then pairs of pairs,
// interleaved; then 128-bit quarters exchanged in two rounds.
inline void transpose_16x16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {  // r[4 i + j], quarter q: column 4 q + j of rows 4 i .. 4 i + 3
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
            t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);      // quarters 0, 2 of each
            t[8 * i + 4 + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);  // quarters 1, 3
        }
    for (int j = 0; j < 4; ++j) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0xdd);
    }
}
}  // namespace detail

// keys: n_ctx rows of d values (float or bf16) at `stride`, into head_layout's key layout: per
// block of 16 keys and chunk of 32 dims, the keys' 16 pairs of dims, transposed.
template <class E>
__attribute__((target("avx512bf16"))) void pack_keys(const E* keys, index_t stride, const head_layout& l, bf16* kp) {
    const index_t pairs = l.pairs();
    __m512i r[16];
    for (index_t j0 = 0; j0 < l.keys(); j0 += 16)
        for (index_t k = 0; k < l.chunks(); ++k) {
            for (index_t i = 0; i < 16; ++i)
                r[i] = j0 + i < l.n_ctx ? detail::bf16_pairs(keys + (j0 + i) * stride + 32 * k, l.d - 32 * k) : _mm512_setzero_si512();
            detail::transpose_16x16(r);
            __m512i* out = reinterpret_cast<__m512i*>(kp + ((j0 / 16) * pairs + 16 * k) * 32);
            for (index_t p = 0; p < 16; ++p) _mm512_storeu_si512(out + p, r[p]);
        }
}
// values: n_ctx rows of d values (float or bf16) at `stride`, into head_layout's value layout:
// each 64-byte row interleaves 16 columns of two consecutive keys.
template <class E>
__attribute__((target("avx512bf16"))) void pack_values(const E* values, index_t stride, const head_layout& l, bf16* vp) {
    const index_t blocks = l.value_blocks();
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20,
                                                4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (index_t j = 0; j < l.keys(); j += 2) {
        __m512i* out = reinterpret_cast<__m512i*>(vp + (j / 32) * blocks * 512 + ((j % 32) / 2) * 32);
        for (index_t b = 0; b < blocks; ++b) {
            const index_t columns = std::min<index_t>(16, l.d - 16 * b);
            // keys j and j + 1 as the two halves of 32 bf16, then interleaved
            __m512i two;
            if constexpr (std::is_same_v<E, bf16>) {
                const auto half = [&](index_t key) {
                    return key < l.n_ctx ? _mm256_maskz_loadu_epi16(detail::first_lanes(columns), values + key * stride + 16 * b)
                                         : _mm256_setzero_si256();
                };
                two = _mm512_inserti64x4(_mm512_castsi256_si512(half(j)), half(j + 1), 1);
            } else {
                const auto half = [&](index_t key) {
                    return key < l.n_ctx ? _mm512_maskz_loadu_ps(detail::first_lanes(columns), values + key * stride + 16 * b)
                                         : _mm512_setzero_ps();
                };
                two = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(half(j + 1), half(j)));
            }
            _mm512_storeu_si512(out + b * 16, _mm512_permutexvar_epi16(interleave, two));
        }
    }
}
// 16 rows of queries times `scale`, rounded to bf16 (vcvtneps2bf16: nearest, ties to even), as
// rows of dims() (the padding dims and the rows from `rows` to 16 zero).
__attribute__((target("avx512bf16"))) inline void pack_queries(const float* q, index_t ldq, index_t rows, float scale,
                                                               const head_layout& l, bf16* out) {
    const index_t dims = l.dims();
    const __m512 s = _mm512_set1_ps(scale);
    for (index_t r = 0; r < 16; ++r) {
        const float* row = q + std::min(r, rows - 1) * ldq;  // rows from `rows` on load nothing
        for (index_t c = 0; c < dims; c += 16) {
            const __mmask16 present = r < rows ? detail::first_lanes(l.d - c) : __mmask16(0);
            const __m256bh half = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_maskz_loadu_ps(present, row + c), s));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * dims + c), reinterpret_cast<__m256i>(half));
        }
    }
}

namespace detail {
// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) tile_config {
    std::uint8_t palette = 1, start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t bytes_per_row[16] = {};
    std::uint8_t rows[16] = {};
};
// GCC's tile loads are asm statements that do not say they read memory: this keeps the packing
// stores before them.
inline void compiler_barrier() { __asm__ __volatile__("" ::: "memory"); }
}  // namespace detail

// The tile registers, configured by the constructor and released by the destructor (on the thread
// that made it): all eight 16 rows of 64 bytes. Scores: tmm0, tmm1 two query chunks (16 rows x 32
// dims), tmm2, tmm3 key chunks (16 pairs of dims x 16 keys), tmm4-7 four blocks of 16 x 16 float
// scores; values: tmm1 the weights (16 rows x 32 keys), tmm2, tmm3 values (16 pairs of keys x 16
// columns), tmm4-7 four blocks of 16 x 16 float outputs. Four independent sums keep the tile unit
// busy: one product's result is ready only several products' time after it starts.
class tiles {
public:
    __attribute__((target("amx-tile"))) tiles() {
        detail::tile_config config;
        for (int t = 0; t < 8; ++t) {
            config.rows[t] = 16;
            config.bytes_per_row[t] = 64;
        }
        detail::compiler_barrier();
        _tile_loadconfig(&config);
    }
    __attribute__((target("amx-tile"))) ~tiles() { _tile_release(); }
    tiles(const tiles&) = delete;
    tiles& operator=(const tiles&) = delete;
};

// scores[r][16 j + i] = query r . key 16 j + i for the 16 query rows and the key blocks j <
// key_blocks (queries: 16 rows of dims() bf16, already scaled; kp: pack_keys' layout). Pairs of
// key blocks alternate between tmm4, tmm5 and tmm6, tmm7, and each pair's sums are stored after the
// next pair's products have started: a sum of two or three products is ready long after its last
// product is issued, and storing it at once left the tile unit idle.
__attribute__((target("amx-tile,amx-bf16"))) inline void score_tiles(const bf16* queries, const bf16* kp, const head_layout& l,
                                                                      index_t key_blocks, float* scores) {
    const index_t chunks = l.chunks(), block_elements = l.pairs() * 32;
    const long query_stride = static_cast<long>(l.dims() * 2), score_stride = static_cast<long>(l.keys() * 4);
    detail::compiler_barrier();
    const bool held = chunks <= 2;  // else each chunk's queries are loaded again into tmm0
    if (held) {
        _tile_loadd(0, queries, query_stride);
        if (chunks == 2) _tile_loadd(1, queries + 32, query_stride);
    }
    // The products of key blocks j0 and j0 + 1 (if two) into tiles C0 and C1 (tile numbers are
    // immediates, hence a macro), and the store of such a pair.
#define VWT_AMX_SCORE_CHUNK(Q, C0, C1)                                 \
    _tile_loadd(2, chunk, 64);                                          \
    _tile_dpbf16ps(C0, Q, 2);                                           \
    if (two) {                                                          \
        _tile_loadd(3, chunk + block_elements, 64);                     \
        _tile_dpbf16ps(C1, Q, 3);                                       \
    }
#define VWT_AMX_SCORE_PAIR(C0, C1)                                      \
    _tile_zero(C0);                                                     \
    _tile_zero(C1);                                                     \
    for (index_t k = 0; k < chunks; ++k) {                              \
        const bf16* chunk = kp + j0 * block_elements + k * 16 * 32;     \
        if (held && k == 1) {                                           \
            VWT_AMX_SCORE_CHUNK(1, C0, C1)                              \
        } else {                                                        \
            if (!held) _tile_loadd(0, queries + 32 * k, query_stride);  \
            VWT_AMX_SCORE_CHUNK(0, C0, C1)                              \
        }                                                               \
    }
#define VWT_AMX_SCORE_STORE(C0, C1)                                                \
    _tile_stored(C0, scores + 16 * stored_j0, score_stride);                        \
    if (stored_two) _tile_stored(C1, scores + 16 * (stored_j0 + 1), score_stride);
    index_t stored_j0 = -1;  // the pair whose sums are still in the tiles
    bool stored_two = false;
    for (index_t j0 = 0; j0 < key_blocks; j0 += 2) {
        const bool two = j0 + 1 < key_blocks, first_tiles = (j0 / 2) % 2 == 0;
        if (first_tiles) {
            VWT_AMX_SCORE_PAIR(4, 5)
            if (stored_j0 >= 0) {
                VWT_AMX_SCORE_STORE(6, 7)
            }
        } else {
            VWT_AMX_SCORE_PAIR(6, 7)
            VWT_AMX_SCORE_STORE(4, 5)
        }
        stored_j0 = j0;
        stored_two = two;
    }
    if (stored_j0 >= 0) {
        if ((stored_j0 / 2) % 2 == 0) {
            VWT_AMX_SCORE_STORE(4, 5)
        } else {
            VWT_AMX_SCORE_STORE(6, 7)
        }
    }
#undef VWT_AMX_SCORE_CHUNK
#undef VWT_AMX_SCORE_PAIR
#undef VWT_AMX_SCORE_STORE
}

// outputs[r][c] = sum over the keys of key_chunks chunks of 32 of weights[r][j] * value j (c < 16 *
// value_blocks(); weights: 16 rows of keys() bf16; vp: pack_values' layout).
__attribute__((target("amx-tile,amx-bf16"))) inline void value_tiles(const bf16* weights, const bf16* vp, const head_layout& l,
                                                                      index_t key_chunks, float* outputs) {
    const index_t blocks = l.value_blocks();
    const long weight_stride = static_cast<long>(l.keys() * 2), output_stride = static_cast<long>(blocks * 16 * 4);
    detail::compiler_barrier();
    for (index_t b0 = 0; b0 < blocks; b0 += 4) {
        const index_t n = std::min<index_t>(4, blocks - b0);
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        for (index_t c = 0; c < key_chunks; ++c) {
            const bf16* v = vp + (c * blocks + b0) * 512;
            _tile_loadd(1, weights + 32 * c, weight_stride);
            _tile_loadd(2, v, 64);
            _tile_dpbf16ps(4, 1, 2);
            if (n > 1) {
                _tile_loadd(3, v + 512, 64);
                _tile_dpbf16ps(5, 1, 3);
            }
            if (n > 2) {
                _tile_loadd(2, v + 1024, 64);
                _tile_dpbf16ps(6, 1, 2);
            }
            if (n > 3) {
                _tile_loadd(3, v + 1536, 64);
                _tile_dpbf16ps(7, 1, 3);
            }
        }
        float* out = outputs + 16 * b0;
        _tile_stored(4, out, output_stride);
        if (n > 1) _tile_stored(5, out + 16, output_stride);
        if (n > 2) _tile_stored(6, out + 32, output_stride);
        if (n > 3) _tile_stored(7, out + 48, output_stride);
    }
}

namespace detail {
// The bf16 pair at p (two consecutive bf16, 32 bits) in every 32-bit lane.
__attribute__((target("avx512bf16"))) inline __m512bh broadcast_pair(const bf16* p) {
    std::int32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(bits));
}
// Where pair_products finds its operands: `runs` runs of `run_pairs` pair steps. Row r's pair k
// of a is at a + r * lda + 2 k (a row of consecutive pairs); block c's 16 pairs of step k of run g
// at b + c * ldb + g * run_stride + k * 32 (each step one 64-byte row).
struct pair_operands {
    const bf16* a;
    index_t lda;
    const bf16* b;
    index_t ldb, runs, run_pairs, run_stride;
};
// out[r][16 c + i] = the sum over all steps of the pair products of a's row r and b's block c,
// lane i, for R rows and C blocks: R x C sums in registers, each loaded block and broadcast pair
// serving several products.
template <int R, int C>
__attribute__((target("avx512bf16"))) inline void pair_products(const pair_operands& o, float* out, index_t ldo) {
    __m512 acc[R][C];
    for (auto& row : acc)
        for (auto& x : row) x = _mm512_setzero_ps();
    for (index_t g = 0; g < o.runs; ++g) {
        const bf16* a = o.a + 2 * g * o.run_pairs;
        const bf16* b = o.b + g * o.run_stride;
        for (index_t k = 0; k < o.run_pairs; ++k) {
            __m512bh v[C];
            for (int c = 0; c < C; ++c) v[c] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + c * o.ldb + 32 * k));
            for (int r = 0; r < R; ++r) {
                const __m512bh w = broadcast_pair(a + r * o.lda + 2 * k);
                for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], w, v[c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + r * ldo + 16 * c, acc[r][c]);
}
// pair_products over `rows` rows (<= 16) and `blocks` blocks: up to 8 rows and `widest` blocks
// (at most 3: 8 x 3 sums, 3 blocks and a broadcast fill 28 of the 32 registers) at a time.
template <int widest>
__attribute__((target("avx512bf16"))) inline void pair_products_over(pair_operands o, index_t rows, index_t blocks, float* out, index_t ldo) {
    static_assert(widest >= 1 && widest <= 3);
    const pair_operands whole = o;
    for (index_t r0 = 0; r0 < rows; r0 += 8)
        for (index_t c0 = 0; c0 < blocks; c0 += widest) {
            o.a = whole.a + r0 * whole.lda;
            o.b = whole.b + c0 * whole.ldb;
            float* to = out + r0 * ldo + 16 * c0;
            const index_t m = std::min<index_t>(widest, blocks - c0);
            kernels::detail::with_rows(std::min<index_t>(8, rows - r0), [&]<int R>() {
                if constexpr (widest >= 3)
                    if (m == 3) return pair_products<R, 3>(o, to, ldo);
                if constexpr (widest >= 2)
                    if (m == 2) return pair_products<R, 2>(o, to, ldo);
                pair_products<R, 1>(o, to, ldo);
            });
        }
}
}  // namespace detail

// score_tiles' scores by vdpbf16ps, for the first `rows` query rows only (the rest of s.scores is
// not written); the pairs of dims past d, zero in both operands, are skipped.
__attribute__((target("avx512bf16"))) inline void score_dots(const bf16* queries, const bf16* kp, const head_layout& l, index_t key_blocks,
                                                             index_t rows, float* scores) {
    const detail::pair_operands o{queries, l.dims(), kp, l.pairs() * 32, 1, (l.d + 1) / 2, 0};
    detail::pair_products_over<2>(o, rows, key_blocks, scores, l.keys());
}
// value_tiles' outputs by vdpbf16ps, for the first `rows` rows only: per chunk of 32 keys, 16
// steps of a pair of keys (the chunk's rows of pack_values' layout).
__attribute__((target("avx512bf16"))) inline void value_dots(const bf16* weights, const bf16* vp, const head_layout& l, index_t key_chunks,
                                                             index_t rows, float* outputs) {
    const index_t blocks = l.value_blocks();
    const detail::pair_operands o{weights, l.keys(), vp, 16 * 32, key_chunks, 16, blocks * 16 * 32};
    detail::pair_products_over<3>(o, rows, blocks, outputs, blocks * 16);
}

namespace detail {
// 2^t for t <= 0, to a relative 6e-5 (far inside bf16's half step of 2^-9, which is all the
// result keeps): t = n + f with n an integer and |f| <= 1/2, 2^f = e^(f ln2) by its Taylor
// polynomial of degree 4, times 2^n (which is 0 for the most negative t).
inline __m512 exp2_to_bf16_precision(__m512 t) {
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(9.61812911e-3f), f, _mm512_set1_ps(5.55041087e-2f));  // ln2^4 / 24, ln2^3 / 6
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.40226507e-1f));                                     // ln2^2 / 2
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.93147181e-1f));                                     // ln2
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
}  // namespace detail

// A block's causal softmax from float scores to bf16 weights: row r < rows (scores and weights
// `ld` apart) sees seen0 + r keys, w[r][j] = bf16(e^(s[r][j] - max of s[r][0, seen0 + r))) for
// the keys it sees (vcvtneps2bf16: nearest, ties to even) and 0 up to `width` (a multiple of 16);
// sums[r] = the sum of its exponentials. The weights' rows from `rows` to 16 (a tile's rows past
// the last query) are 0 up to `width`. Each phase runs over all rows before the next, so that the
// rows' horizontal reductions, a chain of dependent steps each, overlap (row by row they were the
// critical path: 17% slower on 16 rows of up to 256 keys).
__attribute__((target("avx512bf16"))) inline void softmax_block_bf16(const float* s, index_t ld, index_t rows, index_t seen0, index_t width,
                                                                     bf16* w, float* sums) {
    const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512 log2e = _mm512_set1_ps(1.44269504f);
    __m512 partial[16];  // each row's lane maxima, then its lane sums
    for (index_t r = 0; r < rows; ++r) {
        const float* row = s + r * ld;
        const index_t seen = seen0 + r, full = seen / 16 * 16;
        __m512 top0 = lowest, top1 = lowest;  // two running maxima: half the dependent chain
        index_t j = 0;
        for (; j + 32 <= full; j += 32) {
            top0 = _mm512_max_ps(top0, _mm512_loadu_ps(row + j));
            top1 = _mm512_max_ps(top1, _mm512_loadu_ps(row + j + 16));
        }
        if (j < full) top0 = _mm512_max_ps(top0, _mm512_loadu_ps(row + j));
        const __mmask16 tail = detail::first_lanes(seen - full);
        top1 = _mm512_mask_max_ps(top1, tail, top1, _mm512_maskz_loadu_ps(tail, row + full));
        partial[r] = _mm512_max_ps(top0, top1);
    }
    float shift[16];  // e^(s - max) = 2^(s log2e - max log2e): one fused multiply-add per vector
    for (index_t r = 0; r < rows; ++r) shift[r] = -_mm512_reduce_max_ps(partial[r]) * 1.44269504f;
    for (index_t r = 0; r < rows; ++r) {
        const float* row = s + r * ld;
        bf16* out = w + r * ld;
        const index_t seen = seen0 + r, full = seen / 16 * 16;
        const __m512 offset = _mm512_set1_ps(shift[r]);
        __m512 sum = _mm512_setzero_ps();
        index_t j = 0;
        for (; j < full; j += 16) {
            const __m512 e = detail::exp2_to_bf16_precision(_mm512_fmadd_ps(_mm512_loadu_ps(row + j), log2e, offset));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
            sum = _mm512_add_ps(sum, e);
        }
        if (const __mmask16 tail = detail::first_lanes(seen - full)) {
            const __m512 e = _mm512_maskz_mov_ps(tail, detail::exp2_to_bf16_precision(_mm512_fmadd_ps(_mm512_loadu_ps(row + full), log2e, offset)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + full), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
            sum = _mm512_add_ps(sum, e);
            j += 16;
        }
        for (; j < width; j += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm256_setzero_si256());
        partial[r] = sum;
    }
    for (index_t r = rows; r < 16; ++r)
        for (index_t j = 0; j < width; j += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + r * ld + j), _mm256_setzero_si256());
    for (index_t r = 0; r < rows; ++r) sums[r] = _mm512_reduce_add_ps(partial[r]);
}

// Causal attention of one head: query rows [0, rows) of q (row stride ldq, query i at position
// past + i, seeing keys 0 .. past + i) against keys and values packed in s.keys and s.values;
// out[i][c] for c < d, row stride ldo; the products on `products` (with the tiles, the calling
// thread holds `tiles`).
__attribute__((target("avx512bf16"))) inline void attend_head(engine products, const float* q, index_t ldq, index_t rows, index_t past,
                                                              float scale, const head_layout& l, const head_scratch& s, float* out,
                                                              index_t ldo) {
    const index_t keys = l.keys(), ldo_tile = l.value_blocks() * 16;
    for (index_t r0 = 0; r0 < rows; r0 += 16) {
        const index_t block = std::min<index_t>(16, rows - r0), visible = past + r0 + block;
        // The next block's rows of this head, one row of the whole q and out apart: fetched while
        // this block computes (the hardware prefetchers do not follow that stride).
        for (index_t r = r0 + 16; r < std::min(rows, r0 + 32); ++r)
            for (index_t c = 0; c < l.d; c += 16) {
                _mm_prefetch(reinterpret_cast<const char*>(q + r * ldq + c), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char*>(out + r * ldo + c), _MM_HINT_T0);
            }
        pack_queries(q + r0 * ldq, ldq, block, scale, l, s.queries);
        if (products == engine::tiles) score_tiles(s.queries, s.keys, l, (visible + 15) / 16, s.scores);
        else score_dots(s.queries, s.keys, l, (visible + 15) / 16, block, s.scores);
        const index_t chunks = (visible + 31) / 32;
        float sums[16];
        softmax_block_bf16(s.scores, keys, block, past + r0 + 1, chunks * 32, s.weights, sums);
        if (products == engine::tiles) value_tiles(s.weights, s.values, l, chunks, s.outputs);
        else value_dots(s.weights, s.values, l, chunks, block, s.outputs);
        for (index_t r = 0; r < block; ++r) {
            const float inverse = 1.0f / sums[r];
            const float* o = s.outputs + r * ldo_tile;
            float* y = out + (r0 + r) * ldo;
            for (index_t c = 0; c < l.d; c += 16)
                _mm512_mask_storeu_ps(y + c, detail::first_lanes(l.d - c), _mm512_mul_ps(_mm512_loadu_ps(o + c), _mm512_set1_ps(inverse)));
        }
    }
}
#else
inline bool tiles_available() { return false; }
inline bool dots_available() { return false; }
#endif

// The engine this process runs bf16 attention on: the tiles where both can run, none where neither,
// and none where vdpbf16ps is slower than attention in float (Intel's cores without AMX, see
// bf16_products_pay: 0.66-0.72x float on a 2-core Xeon VM, head dims 40 and 72).
inline std::optional<engine> fastest_engine() {
    if (tiles_available()) return engine::tiles;
    if (dots_available() && bf16_products_pay()) return engine::dots;
    return std::nullopt;
}

}  // namespace vwt::cpu::kernels::bf16_attention
