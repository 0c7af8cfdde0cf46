// Every op of the backend_policy concept, forward and backward, on every policy, against the
// reference policy in double precision (the oracle): odd sizes, one row, inner dimensions on both
// sides of the CPU's k-panel split, strided views, GQA groups, positions far from 0, a past in
// the KV cache, static extents. The CUDA policy's kernels run here through its CPU emulation;
// built with VWT_TEST_CUDA (target cuda_ops), the file tests the CUDA policy itself on a GPU and
// skips each case with a message where there is none.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <random>
#include <vector>

#include <vwt/backend/cuda/backend.hpp>
#include <vwt/vwt.hpp>

namespace {

using oracle = vwt::reference::backend<double>;
using vwt::index_t;

// Whether policy B can run on this machine (the CUDA policy needs a GPU).
template <class B>
bool runs_here() {
    if constexpr (requires { B::context::available(); }) return B::context::available();
    else return true;
}
#define SKIP_WITHOUT_DEVICE()                                   \
    if (!runs_here<TestType>()) {                               \
        WARN("no CUDA device on this machine: case skipped");   \
        return;                                                 \
    }

// Whether a policy's context has a thread count (the loops over 1 and 2 threads repeat otherwise).
template <class B>
constexpr bool has_threads() {
    return requires(typename B::context c) { c.threads; };
}

template <class B>
typename B::context context_of(int threads) {
    typename B::context ctx{};
    if constexpr (requires { ctx.threads; }) ctx.threads = threads;
    return ctx;
}

// Host values (double) in a policy's memory, as a [rows x cols] matrix with a row stride of
// cols + pad (pad > 0: a view into a wider buffer).
template <class B, class U = typename B::compute_type>
struct on {
    index_t rows, cols, stride;
    typename B::template buffer<U> buffer;
    typename B::context ctx;
    on(typename B::context c, const std::vector<double>& host, index_t r, index_t k, index_t pad = 0)
        : rows(r), cols(k), stride(k + pad), buffer(r * (k + pad)), ctx(c) {
        REQUIRE(static_cast<index_t>(host.size()) == r * k);
        std::vector<U> padded(static_cast<std::size_t>(rows * stride), U(0));
        for (index_t i = 0; i < rows; ++i)
            for (index_t j = 0; j < cols; ++j) padded[static_cast<std::size_t>(i * stride + j)] = static_cast<U>(host[static_cast<std::size_t>(i * cols + j)]);
        B::upload(ctx, std::span<const U>(padded), buffer.view());
    }
    vwt::matrix_view<U, typename B::memory> m() { return buffer.view().as_matrix(rows, stride).first_cols(cols); }
    vwt::vector_view<U, typename B::memory> v() { return buffer.view(); }
    std::vector<double> get() {
        std::vector<U> padded(static_cast<std::size_t>(rows * stride));
        B::download(ctx, vwt::vector_view<const U, typename B::memory>(buffer.view()), std::span<U>(padded));
        std::vector<double> out(static_cast<std::size_t>(rows * cols));
        for (index_t i = 0; i < rows; ++i)
            for (index_t j = 0; j < cols; ++j) out[static_cast<std::size_t>(i * cols + j)] = static_cast<double>(padded[static_cast<std::size_t>(i * stride + j)]);
        return out;
    }
};

std::vector<double> random_values(std::size_t n, std::uint32_t seed, double scale = 1.0) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, scale);
    std::vector<double> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}
std::vector<double> values(index_t n, std::uint32_t seed, double scale = 1.0) { return random_values(static_cast<std::size_t>(n), seed, scale); }
// x rounded to the nearest bf16 (through float), as a bf16 operand holds it.
double rounded_to_bf16(double x) { return static_cast<double>(static_cast<float>(vwt::bf16(static_cast<float>(x)))); }

// max |got - want| <= tol * max(1, max |want|): float policies to single precision, double ones
// (and the oracle against itself) to double.
template <class B>
void same(const std::vector<double>& got, const std::vector<double>& want, double float_tol = 2e-5) {
    REQUIRE(got.size() == want.size());
    const double tol = std::is_same_v<typename B::compute_type, float> ? float_tol : 1e-11;
    double scale = 1, err = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::abs(want[i]));
        err = std::max(err, std::abs(got[i] - want[i]));
        REQUIRE(std::isfinite(got[i]));
    }
    CHECK(err <= tol * scale);
}

// Runs `f.template operator()<P>(ctx)` on the policy under test and on the oracle, and compares
// every output vector.
template <class B, class F>
void against_oracle(F f, int threads = 2, double float_tol = 2e-5) {
    const auto got = f.template operator()<B>(context_of<B>(threads));
    const auto want = f.template operator()<oracle>(context_of<oracle>(threads));
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("output " << i);
        same<B>(got[i], want[i], float_tol);
    }
}

using outputs = std::vector<std::vector<double>>;

}  // namespace

#if defined(VWT_TEST_CUDA)
#define POLICIES vwt::cuda::backend<float>
#else
#define POLICIES vwt::cpu::backend<float>, vwt::cpu::backend<double>, vwt::reference::backend<float>, vwt::cuda::emulated_backend<float>
#endif

TEMPLATE_TEST_CASE("ops: the three matrix products", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    for (const index_t k : {1, 17, 768, 769})
        for (const index_t m : {1, 7, 65})
            for (const int threads : {1, 2}) {
                if (threads > 1 && !has_threads<TestType>()) continue;
                INFO("k " << k << " m " << m << " threads " << threads);
                const index_t n = 37;
                const auto x = values(m * k, 1), w = values(n * k, 2), y0 = values(m * n, 3), wn = values(n * k, 4), a = values(m * n, 5);
                against_oracle<TestType>(
                    [&]<class P>(typename P::context ctx) {
                        on<P> X(ctx, x, m, k, 3), Wt(ctx, w, n, k), Y(ctx, y0, m, n, 1), Wn(ctx, wn, n, k), Y2(ctx, y0, m, n);
                        on<P> A(ctx, a, m, n), G(ctx, values(n * k, 6), n, k, 2);
                        P::matmul_nt(ctx, X.m(), Wt.m(), Y.m(), 0.5, 0.25);  // alpha, beta: both terms
                        P::matmul_nn(ctx, Y2.m(), Wn.m(), X.m(), 1, 0);     // [m x n] . [n x k]; beta 0 never reads X
                        P::matmul_tn(ctx, A.m(), X.m(), G.m(), 2, 1);
                        return outputs{Y.get(), X.get(), G.get()};
                    },
                    threads, k > 700 ? 6e-5 : 2e-5);
            }
}

TEMPLATE_TEST_CASE("ops: rmsnorm and its backward, dynamic and static extents", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    for (const index_t rows : {1, 5, 40})
        for (const int threads : {1, 2}) {
            if (threads > 1 && !has_threads<TestType>()) continue;
            INFO("rows " << rows << " threads " << threads);
            constexpr index_t n = 24;
            const auto x = values(rows * n, 7, 3.0), g = values(n, 8), dy = values(rows * n, 9), dx0 = values(rows * n, 10),
                       dg0 = values(n, 11);
            against_oracle<TestType>(
                [&]<class P>(typename P::context ctx) {
                    using T = typename P::compute_type;
                    on<P> X(ctx, x, rows, n, 2), G(ctx, g, 1, n), Y(ctx, values(rows * n, 12), rows, n), S(ctx, values(rows * n, 13), rows, n);
                    on<P> DY(ctx, dy, rows, n), DX(ctx, dx0, rows, n), DG(ctx, dg0, 1, n);
                    on<P> scratch(ctx, std::vector<double>(static_cast<std::size_t>(P::rmsnorm_backward_scratch(ctx, rows, n) + 1)),
                                  1, P::rmsnorm_backward_scratch(ctx, rows, n) + 1);
                    const vwt::vector_view<const T, typename P::memory> gain = G.v();
                    P::rmsnorm(ctx, X.m().as_const(), gain, Y.m(), T(1e-5));
                    P::rmsnorm(ctx, X.m().as_const().template with_cols<n>(), gain, S.m().template with_cols<n>(), T(1e-5));
                    P::rmsnorm_backward(ctx, X.m().as_const(), gain, DY.m().as_const(), DX.m(), DG.v(), T(1e-5), scratch.v());
                    return outputs{Y.get(), S.get(), DX.get(), DG.get()};
                },
                threads);
        }
}

TEMPLATE_TEST_CASE("ops: RoPE at positions far from 0, and its inverse", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    // qkv layout of H = 6 query heads over Hkv = 2 kv groups (G = 3), head dim 10: per group
    // 3 queries, 1 key (rotated), 1 value (left alone).
    const int H = 6, Hkv = 2, d = 10, G = H / Hkv;
    const index_t rows = 5, cols = (H + 2 * Hkv) * d;
    const auto x = values(rows * cols, 14);
    const std::vector<int> positions{0, 1, 7, 100000, 2'000'000'000 / 3};
    against_oracle<TestType>([&]<class P>(typename P::context ctx) {
        on<P> X(ctx, x, rows, cols, 4), Back(ctx, x, rows, cols);
        typename P::template buffer<int> pos(rows);
        P::upload(ctx, std::span<const int>(positions), pos.view());
        const vwt::rope_layout<> layout{Hkv, G + 1, static_cast<index_t>(G + 2) * d, vwt::extent<vwt::dynamic_extent>(d)};
        P::rope(ctx, X.m(), layout, pos.view(), 10000.0, false);
        P::rope(ctx, Back.m(), vwt::rope_layout<d>{Hkv, G + 1, static_cast<index_t>(G + 2) * d, {}}, pos.view(), 500.0, true);
        return outputs{X.get(), Back.get()};
    }, 2, 1e-4);
    // The inverse undoes the rotation.
    const auto ctx = context_of<TestType>(2);
    on<TestType> X(ctx, x, rows, cols);
    typename TestType::template buffer<int> pos(rows);
    TestType::upload(ctx, std::span<const int>(positions), pos.view());
    const vwt::rope_layout<> layout{Hkv, G + 1, static_cast<index_t>(G + 2) * d, vwt::extent<vwt::dynamic_extent>(d)};
    TestType::rope(ctx, X.m(), layout, pos.view(), 10000.0, false);
    TestType::rope(ctx, X.m(), layout, pos.view(), 10000.0, true);
    same<TestType>(X.get(), x, 1e-5);
}

// A prompt's rows: long runs of consecutive positions (which the CPU policy continues by angle
// addition instead of a sin/cos per row), broken once, starting far from 0; a head dim with more
// than 64 frequencies. Checked against cos/sin of each row's own angle, computed here.
TEMPLATE_TEST_CASE("ops: RoPE over runs of consecutive positions", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    const int H = 2, Hkv = 1, d = 140, G = H / Hkv, half = d / 2;
    const index_t rows = 45, cols = (H + 2 * Hkv) * d;
    const auto x = values(rows * cols, 24);
    std::vector<int> positions;
    for (int i = 0; i < 30; ++i) positions.push_back(70000 + i);
    for (int i = 0; i < 15; ++i) positions.push_back(5 + i);
    std::vector<double> expected(x.begin(), x.end());
    for (index_t r = 0; r < rows; ++r)
        for (int h = 0; h <= G; ++h)  // the G queries and the key; the value stays
            for (int j = 0; j < half; ++j) {
                const double angle = positions[static_cast<std::size_t>(r)] * std::pow(10000.0, -2.0 * j / d);
                const auto at = static_cast<std::size_t>(r * cols + h * d + j);
                const double a = x[at], b = x[at + half];
                expected[at] = a * std::cos(angle) - b * std::sin(angle);
                expected[at + half] = b * std::cos(angle) + a * std::sin(angle);
            }
    for (const int threads : {1, 2}) {
        if (threads > 1 && !has_threads<TestType>()) continue;
        const auto ctx = context_of<TestType>(threads);
        on<TestType> X(ctx, x, rows, cols);
        typename TestType::template buffer<int> pos(rows);
        TestType::upload(ctx, std::span<const int>(positions), pos.view());
        TestType::rope(ctx, X.m(), vwt::rope_layout<>{Hkv, G + 1, static_cast<index_t>(G + 2) * d, vwt::extent<vwt::dynamic_extent>(d)},
                       pos.view(), 10000.0, false);
        same<TestType>(X.get(), expected, 2e-5);
    }
}

TEMPLATE_TEST_CASE("ops: causal attention with a past, GQA, and its backward", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    for (const auto& heads : std::vector<std::pair<int, int>>{{4, 4}, {6, 2}, {4, 1}})
        for (const index_t past : {0, 3})
            for (const index_t T_q : {1, 7, 9, 11, 70})  // blocks of 8 (4 on AVX2) query rows and every remainder
                for (const int threads : {1, 2}) {
                    if (threads > 1 && !has_threads<TestType>()) continue;
                    const int H = heads.first, Hkv = heads.second;  // not a structured binding: lambdas capture these
                    const index_t d = 8, n_ctx = past + T_q;
                    INFO("H " << H << " Hkv " << Hkv << " past " << past << " rows " << T_q << " threads " << threads);
                    const auto q = values(T_q * H * d, 15), k = values(n_ctx * Hkv * d, 16), v = values(n_ctx * Hkv * d, 17);
                    const auto d_out = values(T_q * H * d, 18);
                    against_oracle<TestType>(
                        [&]<class P>(typename P::context ctx) {
                            using T = typename P::compute_type;
                            const vwt::attention_shape<> shape{H, Hkv, vwt::extent<vwt::dynamic_extent>(d)};
                            const vwt::attention_shape<d> fixed{H, Hkv, {}};
                            on<P> Q(ctx, q, T_q, H * d, 2), K(ctx, k, n_ctx, Hkv * d, 1), V(ctx, v, n_ctx, Hkv * d), O(ctx, values(T_q * H * d, 19), T_q, H * d, 3);
                            on<P> O2(ctx, values(T_q * H * d, 20), T_q, H * d);
                            const index_t need = P::attention_scratch(ctx, T_q, n_ctx, shape);
                            on<P> scratch(ctx, std::vector<double>(static_cast<std::size_t>(need + 1)), 1, need + 1);
                            P::attention(ctx, Q.m().as_const(), K.m().as_const(), V.m().as_const(), O.m(), shape, T(0.3), scratch.v());
                            P::attention(ctx, Q.m().as_const(), K.m().as_const(), V.m().as_const(), O2.m(), fixed, T(0.3), scratch.v());
                            outputs out{O.get(), O2.get()};
                            if (past == 0) {  // training: no past
                                on<P> dO(ctx, d_out, T_q, H * d), dQ(ctx, values(T_q * H * d, 21), T_q, H * d, 1);
                                on<P> dK(ctx, values(T_q * Hkv * d, 22), T_q, Hkv * d), dV(ctx, values(T_q * Hkv * d, 23), T_q, Hkv * d, 2);
                                const index_t need_b = P::attention_backward_scratch(ctx, T_q, shape);
                                on<P> sb(ctx, std::vector<double>(static_cast<std::size_t>(need_b + 1)), 1, need_b + 1);
                                P::attention_backward(ctx, Q.m().as_const(), K.m().as_const(), V.m().as_const(), dO.m().as_const(), dQ.m(),
                                                      dK.m(), dV.m(), shape, T(0.3), sb.v());
                                out.push_back(dQ.get());
                                out.push_back(dK.get());
                                out.push_back(dV.get());
                            }
                            return out;
                        },
                        threads, 5e-5);
                }
}

// Prefill and decode over a longer past and head dims that are not a multiple of the vector width
// (the paper's narrow layers have d = 12, 22, 38, ...), with query rows that are not a multiple of
// the CPU kernels' block of 8 (4 on AVX2).
TEMPLATE_TEST_CASE("ops: prefill and decode attention over long pasts and odd head dims", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    for (const auto& heads : std::vector<std::pair<int, int>>{{5, 5}, {6, 2}})
        for (const index_t d : {3, 22, 72})
            for (const index_t past : {8, 41, 300})  // 301 cached rows: decode over a long past, ending in a partial block of keys
                for (const index_t T_q : {1, 6, 20, 37, 42})
                for (const int threads : {1, 2}) {
                    if (threads > 1 && !has_threads<TestType>()) continue;
                    if (past == 300 && T_q != 1) continue;
                    const int H = heads.first, Hkv = heads.second;
                    const index_t n_ctx = past + T_q;
                    INFO("H " << H << " Hkv " << Hkv << " d " << d << " past " << past << " rows " << T_q << " threads " << threads);
                    const auto q = values(T_q * H * d, 31), k = values(n_ctx * Hkv * d, 32), v = values(n_ctx * Hkv * d, 33);
                    against_oracle<TestType>(
                        [&]<class P>(typename P::context ctx) {
                            const vwt::attention_shape<> shape{H, Hkv, vwt::extent<vwt::dynamic_extent>(d)};
                            on<P> Q(ctx, q, T_q, H * d, 2), K(ctx, k, n_ctx, Hkv * d, 1), V(ctx, v, n_ctx, Hkv * d, 3);
                            on<P> O(ctx, values(T_q * H * d, 34), T_q, H * d, 1);
                            const index_t need = P::attention_scratch(ctx, T_q, n_ctx, shape);
                            on<P> scratch(ctx, std::vector<double>(static_cast<std::size_t>(need)), 1, need);
                            P::attention(ctx, Q.m().as_const(), K.m().as_const(), V.m().as_const(), O.m(), shape,
                                         typename P::compute_type(0.3), scratch.v());
                            return outputs{O.get()};
                        },
                        threads, 5e-5);
                }
}

// The CPU policy's optional split_qkv_rope (the attention layer's one pass where the policy has it)
// against the reference policy's RoPE, then its split_qkv; its bf16 keys and values are its float
// ones rounded to the nearest bf16.
#if !defined(VWT_TEST_CUDA)
TEMPLATE_TEST_CASE("ops: split_qkv_rope equals RoPE, then split_qkv", "[ops]", vwt::cpu::backend<float>, vwt::cpu::backend<double>) {
    using P = TestType;
    STATIC_REQUIRE(vwt::splits_with_rope<P, vwt::dynamic_extent>);
    STATIC_REQUIRE(!vwt::splits_with_rope<oracle, vwt::dynamic_extent>);
    const index_t rows = 21;
    std::vector<int> positions;
    for (index_t r = 0; r < rows; ++r) positions.push_back(r < 12 ? 5 + static_cast<int>(r) : r == 16 ? 3 : 100000 + static_cast<int>(r));
    for (const auto& heads : std::vector<std::pair<int, int>>{{4, 4}, {6, 2}})
        for (const index_t d : {10, 136})  // 136: 68 frequencies, two passes of 64
            for (const int threads : {1, 2}) {
                const int H = heads.first, Hkv = heads.second, G = H / Hkv;
                const index_t cols = (H + 2 * Hkv) * d;
                INFO("H " << H << " Hkv " << Hkv << " d " << d << " threads " << threads);
                const auto qkv = values(rows * cols, 71);
                const vwt::attention_shape<> shape{H, Hkv, vwt::extent<vwt::dynamic_extent>(d)};
                const auto ctx = context_of<P>(threads);
                on<P> QKV(ctx, qkv, rows, cols, 1), Q(ctx, values(rows * H * d, 72), rows, H * d, 3);
                on<P> K(ctx, values(rows * Hkv * d, 73), rows, Hkv * d), V(ctx, values(rows * Hkv * d, 74), rows, Hkv * d, 2);
                typename P::template buffer<int> pos(rows);
                P::upload(ctx, std::span<const int>(positions), pos.view());
                P::split_qkv_rope(ctx, QKV.m().as_const(), Q.m(), K.m(), V.m(), shape, pos.view(), 10000.0);

                const auto octx = context_of<oracle>(1);
                on<oracle> OQKV(octx, qkv, rows, cols), OQ(octx, values(rows * H * d, 1), rows, H * d);
                on<oracle> OK(octx, values(rows * Hkv * d, 2), rows, Hkv * d), OV(octx, values(rows * Hkv * d, 3), rows, Hkv * d);
                oracle::buffer<int> opos(rows);
                oracle::upload(octx, std::span<const int>(positions), opos.view());
                oracle::rope(octx, OQKV.m(), vwt::rope_layout<>{Hkv, G + 1, static_cast<index_t>(G + 2) * d, vwt::extent<vwt::dynamic_extent>(d)},
                             opos.view(), 10000.0, false);
                oracle::split_qkv(octx, OQKV.m().as_const(), OQ.m(), OK.m(), OV.m(), shape);
                same<P>(Q.get(), OQ.get(), 1e-4);
                same<P>(K.get(), OK.get(), 1e-4);
                same<P>(V.get(), OV.get());
                CHECK(QKV.get() == on<P>(ctx, qkv, rows, cols).get());  // qkv itself is left as it was

                if constexpr (std::is_same_v<typename P::compute_type, float>) {
                    typename P::template buffer<vwt::bf16> kb(rows * Hkv * d), vb(rows * Hkv * d);
                    P::split_qkv_rope(ctx, QKV.m().as_const(), Q.m(), kb.view().as_matrix(rows, Hkv * d), vb.view().as_matrix(rows, Hkv * d),
                                      shape, pos.view(), 10000.0);
                    const auto k = K.get(), v = V.get();
                    for (std::size_t i = 0; i < k.size(); ++i) {
                        INFO("element " << i);
                        REQUIRE(kb.view()[static_cast<index_t>(i)] == vwt::bf16(static_cast<float>(k[i])));
                        REQUIRE(vb.view()[static_cast<index_t>(i)] == vwt::bf16(static_cast<float>(v[i])));
                    }
                }
            }
}
#endif

// A KV cache in bf16: split_qkv stores keys and values rounded to the nearest bf16, and attention
// (prefill with a past, and decode) reads them exactly. The oracle rounds on the host with
// vwt::bf16 (tested against the IEEE rule in backend_matmul.cpp) and attends in double.
#if !defined(VWT_TEST_CUDA)
TEMPLATE_TEST_CASE("ops: keys and values kept in bf16 are rounded by split_qkv and read exactly by attention", "[ops]",
                   vwt::cpu::backend<float>, vwt::reference::backend<float>) {
    STATIC_REQUIRE(vwt::supports_kv_bf16<TestType>);
    STATIC_REQUIRE(!vwt::supports_kv_bf16<vwt::cuda::emulated_backend<float>>);
    using P = TestType;
    for (const auto& heads : std::vector<std::pair<int, int>>{{4, 4}, {6, 2}})
        for (const index_t d : {8, 22})
            for (const index_t past : {0, 37, 200})
                for (const index_t T_q : {1, 9, 70})
                    for (const int threads : {1, 2}) {
                        if (threads > 1 && !has_threads<P>()) continue;
                        if (past == 200 && T_q != 1) continue;  // decode over 201 rows, ending in a partial block of keys
                        const int H = heads.first, Hkv = heads.second, G = H / Hkv;
                        const index_t n_ctx = past + T_q, cols = (H + 2 * Hkv) * d;
                        INFO("H " << H << " Hkv " << Hkv << " d " << d << " past " << past << " rows " << T_q << " threads " << threads);
                        const auto qkv = values(n_ctx * cols, 61);
                        const vwt::attention_shape<> shape{H, Hkv, vwt::extent<vwt::dynamic_extent>(d)};
                        const auto ctx = context_of<P>(threads);
                        on<P> QKV(ctx, qkv, n_ctx, cols, 1), Q(ctx, values(n_ctx * H * d, 62), n_ctx, H * d);
                        on<P> O(ctx, values(T_q * H * d, 63), T_q, H * d, 2);
                        typename P::template buffer<vwt::bf16> kb(n_ctx * Hkv * d), vb(n_ctx * Hkv * d);
                        const auto K = kb.view().as_matrix(n_ctx, Hkv * d), V = vb.view().as_matrix(n_ctx, Hkv * d);
                        P::split_qkv(ctx, QKV.m().as_const(), Q.m(), K, V, shape);
                        const index_t need = P::attention_scratch(ctx, T_q, n_ctx, shape, vwt::kv_dtype::bf16);
                        on<P> scratch(ctx, std::vector<double>(static_cast<std::size_t>(need)), 1, need);
                        P::attention(ctx, Q.m().as_const().rows_range(past, n_ctx), K.as_const(), V.as_const(), O.m(), shape,
                                     typename P::compute_type(0.3), scratch.v());

                        // the oracle: the same split with rounding on the host, attention in double
                        std::vector<double> q(static_cast<std::size_t>(T_q * H * d)), k(static_cast<std::size_t>(n_ctx * Hkv * d)), v(k.size());
                        std::vector<std::uint16_t> k_bits(k.size()), v_bits(k.size());
                        for (index_t r = 0; r < n_ctx; ++r)
                            for (int g = 0; g < Hkv; ++g)
                                for (index_t c = 0; c < d; ++c) {
                                    const auto at = [&](index_t col) { return qkv[static_cast<std::size_t>(r * cols + g * (G + 2) * d + col)]; };
                                    const auto i = static_cast<std::size_t>(r * Hkv * d + g * d + c);
                                    k[i] = rounded_to_bf16(at(G * d + c));
                                    v[i] = rounded_to_bf16(at((G + 1) * d + c));
                                    k_bits[i] = vwt::bf16(static_cast<float>(at(G * d + c))).bits;
                                    v_bits[i] = vwt::bf16(static_cast<float>(at((G + 1) * d + c))).bits;
                                    if (r < past) continue;
                                    for (int h = 0; h < G; ++h)
                                        q[static_cast<std::size_t>((r - past) * H * d + (g * G + h) * d + c)] = at(h * d + c);
                                }
                        const auto octx = context_of<oracle>(1);
                        on<oracle> oq(octx, q, T_q, H * d), ok(octx, k, n_ctx, Hkv * d), ov(octx, v, n_ctx, Hkv * d), oo(octx, values(T_q * H * d, 64), T_q, H * d);
                        oracle::attention(octx, oq.m().as_const(), ok.m().as_const(), ov.m().as_const(), oo.m(), shape, 0.3, oq.v());
                        same<P>(O.get(), oo.get(), 5e-5);

                        std::vector<vwt::bf16> stored_k(k.size()), stored_v(k.size());
                        P::download(ctx, vwt::vector_view<const vwt::bf16, typename P::memory>(kb.view()), std::span<vwt::bf16>(stored_k));
                        P::download(ctx, vwt::vector_view<const vwt::bf16, typename P::memory>(vb.view()), std::span<vwt::bf16>(stored_v));
                        bool exact = true;
                        for (std::size_t i = 0; i < k.size(); ++i) exact = exact && stored_k[i].bits == k_bits[i] && stored_v[i].bits == v_bits[i];
                        CHECK(exact);
                    }
}
#endif

// Prefill attention of a model with bf16 or q8 weights runs its products in bf16 on AMX tiles or
// vdpbf16ps where the CPU has them (bf16_attention.hpp): the same numbers as attention in double
// on the query times the scale rounded to bf16 and keys and values rounded to bf16, up to the
// softmax weights' own rounding to bf16 (a relative 2^-9 each); float keys and values or a bf16
// cache, the kernels' 16-row blocks, 32-key chunks, 32-dim chunks, 4-tile groups, 8-row and
// 3-block register blocks and odd head dims, with every remainder. Decode-sized batches (<= 4
// rows), and every batch on a CPU with neither, attend in float.
#if !defined(VWT_TEST_CUDA)
TEMPLATE_TEST_CASE("ops: prefill attention with bf16 or q8 weights: bf16 products where the CPU has them, else float", "[ops]",
                   (vwt::cpu::backend<float, vwt::bf16>), (vwt::cpu::backend<float, vwt::q8_block>)) {
    using P = TestType;
    namespace kb = vwt::cpu::kernels::bf16_attention;
    const auto engine = kb::fastest_engine();
    if (!engine) WARN("neither AMX nor AVX512_BF16 on this CPU: prefill attention checked in float only");
    else WARN("bf16 attention products on " << (*engine == kb::engine::tiles ? "AMX tiles" : "vdpbf16ps"));
    const float scale = 0.3f;
    for (const auto& heads : std::vector<std::pair<int, int>>{{4, 4}, {6, 2}})
        for (const index_t d : {12, 13, 40, 64, 72, 130})
            for (const index_t past : {0, 37})
                for (const index_t T_q : {3, 5, 16, 17, 70})
                    for (const bool bf16_cache : {false, true})
                        for (const int threads : {1, 2}) {
                            const int H = heads.first, Hkv = heads.second;
                            const index_t n_ctx = past + T_q;
                            const bool bf16_products = engine && T_q > 4;
                            INFO("H " << H << " Hkv " << Hkv << " d " << d << " past " << past << " rows " << T_q << " bf16 cache "
                                      << bf16_cache << " threads " << threads << " bf16 products " << bf16_products);
                            auto q = values(T_q * H * d, 71), k = values(n_ctx * Hkv * d, 72), v = values(n_ctx * Hkv * d, 73);
                            if (bf16_cache)  // what a bf16 cache holds
                                for (auto* m : {&k, &v})
                                    for (auto& x : *m) x = rounded_to_bf16(x);
                            const vwt::attention_shape<> shape{H, Hkv, vwt::extent<vwt::dynamic_extent>(d)};
                            const auto ctx = context_of<P>(threads);
                            on<P> Q(ctx, q, T_q, H * d, 3), O(ctx, values(T_q * H * d, 74), T_q, H * d, 1);
                            on<P> K(ctx, k, n_ctx, Hkv * d, 2), V(ctx, v, n_ctx, Hkv * d, 1);
                            on<P, vwt::bf16> K16(ctx, k, n_ctx, Hkv * d, 2), V16(ctx, v, n_ctx, Hkv * d, 1);
                            const auto kv = bf16_cache ? vwt::kv_dtype::bf16 : vwt::kv_dtype::compute;
                            const index_t need = P::attention_scratch(ctx, T_q, n_ctx, shape, kv);
                            on<P> scratch(ctx, std::vector<double>(static_cast<std::size_t>(need)), 1, need);
                            if (bf16_cache)
                                P::attention(ctx, Q.m().as_const(), K16.m().as_const(), V16.m().as_const(), O.m(), shape, scale, scratch.v());
                            else
                                P::attention(ctx, Q.m().as_const(), K.m().as_const(), V.m().as_const(), O.m(), shape, scale, scratch.v());

                            // the oracle: attention in double, on the operands as the bf16 products see them
                            auto oq = q;
                            if (bf16_products) {
                                for (auto& x : oq) x = rounded_to_bf16(static_cast<double>(scale * static_cast<float>(x)));
                                for (auto* m : {&k, &v})
                                    for (auto& x : *m) x = rounded_to_bf16(x);
                            }
                            const auto octx = context_of<oracle>(1);
                            on<oracle> wq(octx, oq, T_q, H * d), wk(octx, k, n_ctx, Hkv * d), wv(octx, v, n_ctx, Hkv * d);
                            on<oracle> want(octx, values(T_q * H * d, 75), T_q, H * d);
                            oracle::attention(octx, wq.m().as_const(), wk.m().as_const(), wv.m().as_const(), want.m(), shape,
                                              bf16_products ? 1.0 : static_cast<double>(scale), wq.v());
                            same<P>(O.get(), want.get(), bf16_products ? 4e-3 : 5e-5);
                        }
}
#endif

// Each bf16 attention engine the CPU has, called directly (the backend runs only the fastest, so
// an AMX machine would never run vdpbf16ps): one head against attention in double written here from
// the rule (docs/semantics-decisions.md): scores of the query times the scale rounded to bf16 and
// keys rounded to bf16, exponentials e^(s - max) rounded to bf16 as the values' weights (values
// rounded to bf16), divided by the unrounded sum. Head dims with odd and partial pairs, chunks and
// column blocks; pasts; row counts with every remainder of 16 and 8.
#if defined(VWT_BF16_ATTENTION)
TEST_CASE("bf16 attention: each engine the CPU has equals attention in double over the rounded operands") {
    namespace kb = vwt::cpu::kernels::bf16_attention;
    std::vector<kb::engine> engines;
    if (kb::tiles_available()) engines.push_back(kb::engine::tiles);
    if (kb::dots_available()) engines.push_back(kb::engine::dots);
    if (engines.empty()) {
        WARN("neither AMX nor AVX512_BF16 on this CPU: no bf16 attention engine to check");
        return;
    }
    const float scale = 0.37f;
    for (const auto products : engines)
        for (const index_t d : {7, 13, 40, 72, 97})
            for (const index_t past : {0, 29})
                for (const index_t rows : {5, 8, 16, 23, 41}) {
                    const index_t n_ctx = past + rows, ldq = d + 3, ldo = d + 5;  // rows of a wider matrix
                    INFO("engine " << (products == kb::engine::tiles ? "tiles" : "vdpbf16ps") << " d " << d << " past " << past << " rows " << rows);
                    const auto q = values(rows * ldq, 81), k = values(n_ctx * d, 82, 2.0), v = values(n_ctx * d, 83);
                    const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
                    const kb::head_layout layout{n_ctx, d};
                    std::vector<float> scratch_floats(static_cast<std::size_t>(layout.scratch_bytes() / 4 + 1));
                    const kb::head_scratch work(reinterpret_cast<std::byte*>(scratch_floats.data()), layout);
                    std::vector<float> out(static_cast<std::size_t>(rows * ldo), -7.0f);
                    {
                        std::optional<kb::tiles> tiles;
                        if (products == kb::engine::tiles) tiles.emplace();
                        kb::pack_keys(kf.data(), d, layout, work.keys);
                        kb::pack_values(vf.data(), d, layout, work.values);
                        kb::attend_head(products, qf.data(), ldq, rows, past, scale, layout, work, out.data(), ldo);
                    }
                    double worst = 0, largest = 0;
                    for (index_t i = 0; i < rows; ++i) {
                        const index_t seen = past + i + 1;
                        std::vector<double> s(static_cast<std::size_t>(seen));
                        for (index_t j = 0; j < seen; ++j) {
                            double dot = 0;
                            for (index_t c = 0; c < d; ++c)
                                dot += rounded_to_bf16(static_cast<double>(scale * qf[static_cast<std::size_t>(i * ldq + c)])) * rounded_to_bf16(k[static_cast<std::size_t>(j * d + c)]);
                            s[static_cast<std::size_t>(j)] = dot;
                        }
                        const double top = *std::max_element(s.begin(), s.end());
                        double sum = 0;
                        for (auto& x : s) sum += x = std::exp(x - top);
                        for (index_t c = 0; c < d; ++c) {
                            double o = 0;
                            for (index_t j = 0; j < seen; ++j) o += rounded_to_bf16(s[static_cast<std::size_t>(j)]) * rounded_to_bf16(v[static_cast<std::size_t>(j * d + c)]);
                            o /= sum;
                            largest = std::max(largest, std::abs(o));
                            worst = std::max(worst, std::abs(o - out[static_cast<std::size_t>(i * ldo + c)]));
                        }
                        for (index_t c = d; c < ldo; ++c) CHECK(out[static_cast<std::size_t>(i * ldo + c)] == -7.0f);  // past d: untouched
                    }
                    // the exponentials' own approximation (a relative 6e-5) can move a weight across a
                    // bf16 rounding boundary: one step, 2^-8 of it, in a few weights of each row
                    CHECK(worst <= 2e-3 * largest);
                }
}
#endif

TEMPLATE_TEST_CASE("ops: SwiGLU in both layouts and its backward", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    for (const auto layout : {vwt::swiglu_layout::split, vwt::swiglu_layout::interleaved})
        for (const index_t rows : {1, 9})
            for (const index_t inter : {13, 70}) {  // 70: the 16-column SIMD kernel and its scalar tail
                const auto fused = values(rows * 2 * inter, 24, 2.0), d_out = values(rows * inter, 25);
                against_oracle<TestType>([&]<class P>(typename P::context ctx) {
                    on<P> F(ctx, fused, rows, 2 * inter, 1), O(ctx, values(rows * inter, 26), rows, inter, 2);
                    on<P> D(ctx, d_out, rows, inter), DF(ctx, values(rows * 2 * inter, 27), rows, 2 * inter);
                    P::swiglu(ctx, F.m().as_const(), O.m(), inter, layout);
                    P::swiglu_backward(ctx, F.m().as_const(), D.m().as_const(), DF.m(), inter, layout);
                    return outputs{O.get(), DF.get()};
                });
            }
}

TEMPLATE_TEST_CASE("ops: the gaussian resize's padding and its backward", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    const index_t rows = 7, from = 10, to = 23, W = 26;
    const std::vector<int> counters{0, 5, 5, 1000, 3, 70000, 2};  // a repeated counter draws the same noise
    const auto x = values(rows * W, 40, 1.5), dx = values(rows * W, 41);
    for (const std::uint64_t key : {std::uint64_t{0}, vwt::detail::gaussian_noise_key(99, 7, 3)})
        against_oracle<TestType>([&]<class P>(typename P::context ctx) {
            on<P> X(ctx, x, rows, W, 1), IN(ctx, x, rows, W), DX(ctx, dx, rows, W, 2);
            typename P::template buffer<int> c(rows);
            P::upload(ctx, std::span<const int>(counters), c.view());
            P::gaussian_pad(ctx, X.m(), from, to, c.view(), key);
            P::gaussian_pad_backward(ctx, IN.m().as_const().first_cols(from), DX.m(), from, to, c.view(), key);
            return outputs{X.get(), DX.get()};
        });
}

TEST_CASE("ops: the gaussian padding draws N(mean, std) of the row; its backward is the derivative (finite differences)") {
    using B = oracle;
    const B::context ctx{};
    const index_t from = 12, to = from + 40000;
    const auto row = values(from, 42, 2.0);
    double mean = 0, var = 0;
    for (double v : row) mean += v / from;
    for (double v : row) var += (v - mean) * (v - mean) / from;
    std::vector<double> wide(static_cast<std::size_t>(to), 0.0);
    std::copy(row.begin(), row.end(), wide.begin());
    on<B> X(ctx, wide, 1, to);
    B::buffer<int> counter(1);
    B::upload(ctx, std::span<const int>(std::vector<int>{17}), counter.view());
    B::gaussian_pad(ctx, X.m(), from, to, counter.view(), 5);
    const auto got = X.get();
    CHECK(std::equal(row.begin(), row.end(), got.begin()));  // the row's own values stay
    double m = 0, v = 0;
    const double n = static_cast<double>(to - from);
    for (index_t c = from; c < to; ++c) m += got[static_cast<std::size_t>(c)] / n;
    for (index_t c = from; c < to; ++c) v += (got[static_cast<std::size_t>(c)] - m) * (got[static_cast<std::size_t>(c)] - m) / n;
    const double sd = std::sqrt(var);
    CHECK(std::abs(m - mean) < 5 * sd / std::sqrt(n));
    CHECK(std::abs(std::sqrt(v) - sd) < 5 * sd / std::sqrt(2 * n));

    // loss = sum over the padded columns of w_c x_c: its gradient by the first `from` values
    const index_t small_to = from + 9;
    const auto weights = values(small_to, 43);
    const auto loss = [&](const std::vector<double>& r) {
        std::vector<double> w(static_cast<std::size_t>(small_to), 0.0);
        std::copy(r.begin(), r.end(), w.begin());
        on<B> Y(ctx, w, 1, small_to);
        B::gaussian_pad(ctx, Y.m(), from, small_to, counter.view(), 5);
        const auto y = Y.get();
        double l = 0;
        for (index_t c = from; c < small_to; ++c) l += weights[static_cast<std::size_t>(c)] * y[static_cast<std::size_t>(c)];
        return l;
    };
    std::vector<double> d(static_cast<std::size_t>(small_to), 0.0);
    for (index_t c = from; c < small_to; ++c) d[static_cast<std::size_t>(c)] = weights[static_cast<std::size_t>(c)];
    on<B> IN(ctx, row, 1, from), D(ctx, d, 1, small_to);
    B::gaussian_pad_backward(ctx, IN.m().as_const(), D.m(), from, small_to, counter.view(), 5);
    const auto grad = D.get();
    for (index_t c = 0; c < from; ++c) {
        auto up = row, down = row;
        up[static_cast<std::size_t>(c)] += 1e-6;
        down[static_cast<std::size_t>(c)] -= 1e-6;
        CHECK(grad[static_cast<std::size_t>(c)] == Approx((loss(up) - loss(down)) / 2e-6).margin(1e-6));
    }
    for (index_t c = from; c < small_to; ++c) CHECK(grad[static_cast<std::size_t>(c)] == 0.0);  // consumed
}

TEMPLATE_TEST_CASE("ops: embedding, its backward with repeated ids, cross-entropy", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    const index_t V = 11, h = 6, W = 9, rows = 8;
    const std::vector<int> ids{3, 0, 10, 3, 3, 7, 0, 1}, targets{1, 10, 0, 4, 4, 2, 9, 3};
    const auto table = values(V * h, 28), dx = values(rows * W, 29), logits = values(rows * V, 30, 4.0), t0 = values(V * h, 31);
    against_oracle<TestType>([&]<class P>(typename P::context ctx) {
        using T = typename P::compute_type;
        on<P> Tb(ctx, table, V, h), X(ctx, values(rows * W, 32), rows, W, 1), DX(ctx, dx, rows, W), DT(ctx, t0, V, h);
        on<P> L(ctx, logits, rows, V, 2);
        typename P::template buffer<int> id(rows), target(rows);
        typename P::template buffer<double> losses(rows);
        P::upload(ctx, std::span<const int>(ids), id.view());
        P::upload(ctx, std::span<const int>(targets), target.view());
        P::embed(ctx, Tb.m().as_const(), id.view(), X.m(), T(12));
        P::embed_backward(ctx, DX.m().as_const().first_cols(h), id.view(), DT.m(), T(12));
        P::cross_entropy(ctx, L.m(), target.view(), T(0.125), losses.view());
        std::vector<double> host(static_cast<std::size_t>(rows));
        P::download(ctx, vwt::vector_view<const double, typename P::memory>(losses.view()), std::span<double>(host));
        return outputs{X.get(), DT.get(), L.get(), host};
    });
}

TEMPLATE_TEST_CASE("ops: qkv split and join, copy, fill, scale, sum of squares, AdamW", "[ops]", POLICIES) {
    SKIP_WITHOUT_DEVICE();
    const int H = 6, Hkv = 2;
    const index_t d = 4, rows = 3, cols = (H + 2 * Hkv) * d, n = 50;
    const auto qkv = values(rows * cols, 33), p = values(n, 34), g = values(n, 35, 0.1), m0 = values(n, 36, 0.01);
    auto v0 = values(n, 37, 0.01);
    for (auto& x : v0) x = x * x;
    against_oracle<TestType>([&]<class P>(typename P::context ctx) {
        using T = typename P::compute_type;
        const vwt::attention_shape<> shape{H, Hkv, vwt::extent<vwt::dynamic_extent>(d)};
        on<P> QKV(ctx, qkv, rows, cols, 1), Q(ctx, values(rows * H * d, 38), rows, H * d), K(ctx, values(rows * Hkv * d, 39), rows, Hkv * d);
        on<P> Vv(ctx, values(rows * Hkv * d, 40), rows, Hkv * d, 2), Back(ctx, values(rows * cols, 41), rows, cols);
        P::split_qkv(ctx, QKV.m().as_const(), Q.m(), K.m(), Vv.m(), shape);
        P::join_qkv(ctx, Q.m().as_const(), K.m().as_const(), Vv.m().as_const(), Back.m(), shape);
        on<P> C(ctx, values(rows * cols, 42), rows, cols), F(ctx, values(rows * cols, 43), rows, cols, 3);
        P::copy(ctx, QKV.m().as_const().cols_range(2, 9), C.m().cols_range(1, 8));
        P::fill(ctx, F.m().cols_range(3, 5), T(-2.5));
        on<P> Pm(ctx, p, 1, n), Gm(ctx, g, 1, n), M(ctx, m0, 1, n), Vm(ctx, v0, 1, n);
        P::scale(ctx, Gm.v(), T(0.75));
        typename P::template buffer<double> sq(1);
        P::sum_squares(ctx, vwt::vector_view<const T, typename P::memory>(Gm.v()), sq.view());
        P::adamw(ctx, Pm.v(), vwt::vector_view<const T, typename P::memory>(Gm.v()), M.v(), Vm.v(),
                 vwt::adamw_update{0.9, 0.95, 1e-8, 0.999, 0.01, 0.3});
        std::vector<double> host(1);
        P::download(ctx, vwt::vector_view<const double, typename P::memory>(sq.view()), std::span<double>(host));
        return outputs{Q.get(), K.get(), Vv.get(), Back.get(), C.get(), F.get(), Gm.get(), host, Pm.get(), M.get(), Vm.get()};
    });
    // join is split's inverse.
    const auto ctx = context_of<TestType>(1);
    on<TestType> QKV(ctx, qkv, rows, cols), Q(ctx, values(rows * H * d, 1), rows, H * d), K(ctx, values(rows * Hkv * d, 2), rows, Hkv * d);
    on<TestType> Vv(ctx, values(rows * Hkv * d, 3), rows, Hkv * d), Back(ctx, values(rows * cols, 4), rows, cols);
    const vwt::attention_shape<> shape{H, Hkv, vwt::extent<vwt::dynamic_extent>(d)};
    TestType::split_qkv(ctx, QKV.m().as_const(), Q.m(), K.m(), Vv.m(), shape);
    TestType::join_qkv(ctx, Q.m().as_const(), K.m().as_const(), Vv.m().as_const(), Back.m(), shape);
    CHECK(Back.get() == QKV.get());
}

TEST_CASE("reference policy: new buffers hold NaN, bad ids are errors") {
    const oracle::context ctx;
    oracle::buffer<double> b(4);
    std::vector<double> host(4);
    oracle::download(ctx, vwt::vector_view<const double, oracle::memory>(b.view()), std::span<double>(host));
    for (double x : host) CHECK(std::isnan(x));
    oracle::buffer<double> table(6), x(6);
    oracle::buffer<int> ids(2);
    const std::vector<int> bad{0, 3};
    oracle::upload(ctx, std::span<const int>(bad), ids.view());
    CHECK_THROWS_WITH(oracle::embed(ctx, table.view().as_matrix(3, 2).as_const(), ids.view(), x.view().as_matrix(2, 3), 1.0),
                      Catch::Contains("id outside the table"));
}

#if defined(VWT_TEST_CUDA)
#define CUDA_POLICY vwt::cuda::backend<float>
#else
#define CUDA_POLICY vwt::cuda::emulated_backend<float>
#endif
TEMPLATE_TEST_CASE("cuda policy: a bad id or target is reported at the next wait, memory exhaustion is an error", "[ops]", CUDA_POLICY) {
    SKIP_WITHOUT_DEVICE();
    using B = TestType;
    const typename B::context ctx;
    typename B::template buffer<float> table(6), x(6), logits(8);
    typename B::template buffer<int> ids(2);
    typename B::template buffer<double> losses(2);
    const std::vector<int> bad{0, 3};
    B::upload(ctx, std::span<const int>(bad), ids.view());
    B::embed(ctx, table.view().as_matrix(3, 2).as_const(), ids.view(), x.view().as_matrix(2, 3), 1.0f);
    CHECK_THROWS_WITH(ctx.synchronize(), Catch::Contains("embed: a token id outside the embedding table"));
    ctx.synchronize();  // reported once
    B::cross_entropy(ctx, logits.view().as_matrix(2, 3), ids.view(), 1.0f, losses.view());
    std::vector<double> host(2);
    CHECK_THROWS_WITH(B::download(ctx, vwt::vector_view<const double, typename B::memory>(losses.view()), std::span<double>(host)),
                      Catch::Contains("cross_entropy: a target outside the vocabulary"));
    CHECK_THROWS_WITH(typename B::template buffer<float>(vwt::index_t(1) << 50), Catch::Contains("cannot allocate"));
    const vwt::attention_shape<> wide_heads{2, 1, vwt::extent<vwt::dynamic_extent>(300)};
    typename B::template buffer<float> big(600);
    CHECK_THROWS_WITH(B::attention(ctx, big.view().as_matrix(1, 600).as_const(), big.view().as_matrix(2, 300).as_const(),
                                   big.view().as_matrix(2, 300).as_const(), big.view().as_matrix(1, 600), wide_heads, 1.0f, big.view()),
                      Catch::Contains("head dims up to 256"));
}

// ---- mixture of experts (the reference policy's ops against brute force written from
// semantics.md section 6; the other policies against the reference as above)

#if !defined(VWT_TEST_CUDA)
namespace {

// Top-k of each row by (logit descending, expert ascending) and the softmax over the chosen.
struct brute_route {
    std::vector<int> experts;
    std::vector<double> weights;
};
brute_route route_by_sorting(const std::vector<double>& logits, index_t rows, index_t E, int k) {
    brute_route out;
    for (index_t r = 0; r < rows; ++r) {
        std::vector<int> idx(static_cast<std::size_t>(E));
        for (int e = 0; e < E; ++e) idx[static_cast<std::size_t>(e)] = e;
        const auto z = [&](int e) { return logits[static_cast<std::size_t>(r * E + e)]; };
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return z(a) > z(b); });
        double top = z(idx[0]), sum = 0;
        for (int s = 0; s < k; ++s) sum += std::exp(z(idx[static_cast<std::size_t>(s)]) - top);
        for (int s = 0; s < k; ++s) {
            out.experts.push_back(idx[static_cast<std::size_t>(s)]);
            out.weights.push_back(std::exp(z(idx[static_cast<std::size_t>(s)]) - top) / sum);
        }
    }
    return out;
}

template <class B>
std::vector<int> ints_of(typename B::context ctx, vwt::vector_view<const int, typename B::memory> v) {
    std::vector<int> host(static_cast<std::size_t>(v.size()));
    B::download(ctx, v, std::span<int>(host));
    return host;
}

}  // namespace

TEST_CASE("moe ops: routing is the top k by logit (ties to the lower expert), a softmax over them, pairs sorted by expert") {
    using P = oracle;
    const P::context ctx{};
    for (const auto& [rows, E, k] : std::vector<std::tuple<index_t, index_t, int>>{{1, 4, 1}, {9, 5, 2}, {33, 22, 3}, {7, 3, 3}}) {
        INFO("rows " << rows << " experts " << E << " k " << k);
        auto logits = values(rows * E, 31);
        for (index_t r = 0; r < rows; r += 2) logits[static_cast<std::size_t>(r * E + E - 1)] = logits[static_cast<std::size_t>(r * E)];  // ties
        on<P> L(ctx, logits, rows, E);
        P::buffer<int> experts(rows * k), order(rows * k), offsets(E + 1);
        on<P> W(ctx, std::vector<double>(static_cast<std::size_t>(rows * k)), rows * k, 1);
        P::moe_route(ctx, L.m().as_const(), k, experts.view(), W.v(), order.view(), offsets.view());
        const auto want = route_by_sorting(logits, rows, E, k);
        CHECK(ints_of<P>(ctx, experts.view()) == want.experts);
        same<P>(W.get(), want.weights);
        const auto o = ints_of<P>(ctx, order.view()), off = ints_of<P>(ctx, offsets.view());
        REQUIRE(off.front() == 0);
        REQUIRE(off.back() == rows * k);
        std::vector<int> seen;
        for (index_t e = 0; e < E; ++e)
            for (int j = off[static_cast<std::size_t>(e)]; j < off[static_cast<std::size_t>(e + 1)]; ++j) {
                const int pair = o[static_cast<std::size_t>(j)];
                CHECK(want.experts[static_cast<std::size_t>(pair)] == e);
                if (j > off[static_cast<std::size_t>(e)]) CHECK(o[static_cast<std::size_t>(j - 1)] < pair);  // rows in order
                seen.push_back(pair);
            }
        std::sort(seen.begin(), seen.end());
        for (index_t pair = 0; pair < rows * k; ++pair) CHECK(seen[static_cast<std::size_t>(pair)] == pair);
    }
}

TEST_CASE("moe ops: routing backward is the derivative of the chosen experts' softmax (finite differences)") {
    using P = oracle;
    const P::context ctx{};
    const index_t rows = 6, E = 7;
    const int k = 3;
    const auto logits = values(rows * E, 41), d_w = values(rows * k, 42);
    // f(logits) = sum d_w . weights(logits), experts held fixed (the top k do not change under a small step)
    const auto f = [&](const std::vector<double>& z) {
        const auto r = route_by_sorting(z, rows, E, k);
        double sum = 0;
        for (std::size_t i = 0; i < r.weights.size(); ++i) sum += d_w[i] * r.weights[i];
        return sum;
    };
    on<P> L(ctx, logits, rows, E), dW(ctx, d_w, rows * k, 1), dL(ctx, values(rows * E, 43), rows, E);
    P::buffer<int> experts(rows * k), order(rows * k), offsets(E + 1);
    on<P> W(ctx, std::vector<double>(static_cast<std::size_t>(rows * k)), rows * k, 1);
    P::moe_route(ctx, L.m().as_const(), k, experts.view(), W.v(), order.view(), offsets.view());
    P::moe_route_backward(ctx, experts.view(), W.v(), dW.v(), dL.m());
    const auto grad = dL.get();
    for (std::size_t i = 0; i < logits.size(); ++i) {
        auto up = logits, down = logits;
        up[i] += 1e-6;
        down[i] -= 1e-6;
        CHECK(grad[i] == Approx((f(up) - f(down)) / 2e-6).margin(1e-7));
    }
}

TEST_CASE("moe ops: the router's auxiliary loss is semantics.md's formula, its gradient a finite difference") {
    using P = oracle;
    const P::context ctx{};
    const index_t rows = 8, E = 5;
    const int k = 2;
    const auto logits = values(rows * E, 71, 2.0);
    const auto experts = route_by_sorting(logits, rows, E, k).experts;
    // E sum_e f_e p_e + 0.1 mean_r logsumexp(r)^2, f the share of assignments, p the mean softmax
    const auto aux = [&](const std::vector<double>& z) {
        std::vector<double> f(static_cast<std::size_t>(E)), p(static_cast<std::size_t>(E));
        for (const int e : experts) f[static_cast<std::size_t>(e)] += 1.0 / static_cast<double>(experts.size());
        double zl = 0;
        for (index_t r = 0; r < rows; ++r) {
            double sum = 0;
            for (index_t e = 0; e < E; ++e) sum += std::exp(z[static_cast<std::size_t>(r * E + e)]);
            for (index_t e = 0; e < E; ++e) p[static_cast<std::size_t>(e)] += std::exp(z[static_cast<std::size_t>(r * E + e)]) / sum / rows;
            zl += std::log(sum) * std::log(sum) / rows;
        }
        double balance = 0;
        for (index_t e = 0; e < E; ++e) balance += f[static_cast<std::size_t>(e)] * p[static_cast<std::size_t>(e)];
        return static_cast<double>(E) * balance + 0.1 * zl;
    };
    on<P> L(ctx, logits, rows, E), dL(ctx, values(rows * E, 72), rows, E);
    P::buffer<int> ex(rows * k);
    P::upload(ctx, std::span<const int>(experts), ex.view());
    P::buffer<double> out(1);
    P::moe_aux_loss(ctx, L.m().as_const(), ex.view(), 0.5, dL.m(), out.view());
    std::vector<double> value(1);
    P::download(ctx, vwt::vector_view<const double, P::memory>(out.view()), std::span<double>(value));
    CHECK(value[0] == Approx(aux(logits)).epsilon(1e-12));
    const auto grad = dL.get(), before = values(rows * E, 72);
    for (std::size_t i = 0; i < logits.size(); ++i) {
        auto up = logits, down = logits;
        up[i] += 1e-6;
        down[i] -= 1e-6;
        CHECK(grad[i] - before[i] == Approx(0.5 * (aux(up) - aux(down)) / 2e-6).margin(1e-7));
    }
}

TEST_CASE("moe ops: gather, weighted scatter, pair dots and the grouped products against per-row sums") {
    using P = oracle;
    const P::context ctx{};
    const index_t rows = 11, E = 4, w = 6, n = 5;
    const int k = 2;
    const auto logits = values(rows * E, 51);
    on<P> L(ctx, logits, rows, E);
    P::buffer<int> experts(rows * k), order(rows * k), offsets(E + 1);
    on<P> W(ctx, std::vector<double>(static_cast<std::size_t>(rows * k)), rows * k, 1);
    P::moe_route(ctx, L.m().as_const(), k, experts.view(), W.v(), order.view(), offsets.view());
    const auto o = ints_of<P>(ctx, order.view()), ex = ints_of<P>(ctx, experts.view());
    const auto weights = W.get();
    const auto x = values(rows * w, 52), stacked = values(E * n * w, 53), y0 = values(rows * w, 54);
    on<P> X(ctx, x, rows, w), S(ctx, std::vector<double>(static_cast<std::size_t>(rows * k * w)), rows * k, w);
    P::gather_rows(ctx, X.m().as_const(), order.view(), k, {}, 1.0, S.m());
    const auto gathered = S.get();
    on<P> S2(ctx, std::vector<double>(static_cast<std::size_t>(rows * k * w)), rows * k, w);
    P::gather_rows(ctx, X.m().as_const(), order.view(), k, W.v(), -2.0, S2.m());
    const auto weighted = S2.get();
    // grouped nt: row j of the result = gathered[j] . stacked[expert of pair j]^T
    on<P> Wt(ctx, stacked, E * n, w, 1), Y(ctx, values(rows * k * n, 55), rows * k, n, 2);
    P::grouped_matmul_nt(ctx, S.m().as_const(), offsets.view(), Wt.m().as_const(), Y.m(), 0.5, 0.0);
    // grouped nn back: z_j = y_j . stacked_e (n x w)
    on<P> Z(ctx, values(rows * k * w, 56), rows * k, w);
    P::grouped_matmul_nn(ctx, Y.m().as_const(), offsets.view(), Wt.m().as_const(), Z.m(), 1.0, 0.0);
    // grouped tn: per expert, sum over its pairs of y_j^T gathered_j (n x w), stacked like the weights
    on<P> G(ctx, values(E * n * w, 57), E * n, w);
    P::grouped_matmul_tn(ctx, Y.m().as_const(), S.m().as_const(), offsets.view(), G.m(), 1.0, 1.0);
    // scatter: y0[row] += 2 weight * z_j; pair dots: z_j . x[row]
    on<P> Y0(ctx, y0, rows, w), D(ctx, std::vector<double>(static_cast<std::size_t>(rows * k)), rows * k, 1);
    P::scatter_add_rows(ctx, Z.m().as_const(), order.view(), k, W.v(), Y0.m(), 2.0);
    P::pair_dots(ctx, Z.m().as_const(), order.view(), k, X.m().as_const(), D.v());

    std::vector<double> y(static_cast<std::size_t>(rows * k * n)), z(static_cast<std::size_t>(rows * k * w)), g = values(E * n * w, 57);
    std::vector<double> scattered = y0, dots(static_cast<std::size_t>(rows * k));
    for (index_t j = 0; j < rows * k; ++j) {
        const index_t pair = o[static_cast<std::size_t>(j)], r = pair / k, e = ex[static_cast<std::size_t>(pair)];
        for (index_t c = 0; c < w; ++c) {
            CHECK(gathered[static_cast<std::size_t>(j * w + c)] == x[static_cast<std::size_t>(r * w + c)]);
            CHECK(weighted[static_cast<std::size_t>(j * w + c)] ==
                  Approx(-2.0 * weights[static_cast<std::size_t>(pair)] * x[static_cast<std::size_t>(r * w + c)]));
        }
        for (index_t i = 0; i < n; ++i) {
            double s = 0;
            for (index_t c = 0; c < w; ++c) s += x[static_cast<std::size_t>(r * w + c)] * stacked[static_cast<std::size_t>((e * n + i) * w + c)];
            y[static_cast<std::size_t>(j * n + i)] = 0.5 * s;
        }
        for (index_t c = 0; c < w; ++c) {
            double s = 0;
            for (index_t i = 0; i < n; ++i) s += y[static_cast<std::size_t>(j * n + i)] * stacked[static_cast<std::size_t>((e * n + i) * w + c)];
            z[static_cast<std::size_t>(j * w + c)] = s;
        }
        for (index_t i = 0; i < n; ++i)
            for (index_t c = 0; c < w; ++c)
                g[static_cast<std::size_t>((e * n + i) * w + c)] += y[static_cast<std::size_t>(j * n + i)] * x[static_cast<std::size_t>(r * w + c)];
        double dot = 0;
        for (index_t c = 0; c < w; ++c) {
            scattered[static_cast<std::size_t>(r * w + c)] += 2.0 * weights[static_cast<std::size_t>(pair)] * z[static_cast<std::size_t>(j * w + c)];
            dot += z[static_cast<std::size_t>(j * w + c)] * x[static_cast<std::size_t>(r * w + c)];
        }
        dots[static_cast<std::size_t>(pair)] = dot;
    }
    same<P>(Y.get(), y);
    same<P>(Z.get(), z);
    same<P>(G.get(), g);
    same<P>(Y0.get(), scattered);
    same<P>(D.get(), dots);
}
TEMPLATE_TEST_CASE("moe ops: every policy with them against the reference", "[ops]", vwt::cpu::backend<float>, vwt::cpu::backend<double>,
                   vwt::reference::backend<float>) {
    for (const auto& sizes : std::vector<std::tuple<index_t, index_t, int>>{{1, 4, 1}, {13, 6, 2}, {40, 22, 3}})
        for (const int threads : {1, 2}) {
            const index_t rows = std::get<0>(sizes), E = std::get<1>(sizes);  // not a structured binding: lambdas capture these
            const int k = std::get<2>(sizes);
            INFO("rows " << rows << " experts " << E << " k " << k << " threads " << threads);
            const index_t w = 10, n = 7;
            auto logits = values(rows * E, 61);
            for (index_t r = 0; r < rows; r += 3) logits[static_cast<std::size_t>(r * E + 1)] = logits[static_cast<std::size_t>(r * E)];  // ties
            against_oracle<TestType>(
                [&]<class P>(typename P::context ctx) {
                    on<P> L(ctx, logits, rows, E), X(ctx, values(rows * w, 62), rows, w), Wt(ctx, values(E * n * w, 63), E * n, w, 3);
                    typename P::template buffer<int> experts(rows * k), order(rows * k), offsets(E + 1);
                    on<P> W(ctx, std::vector<double>(static_cast<std::size_t>(rows * k)), rows * k, 1);
                    P::moe_route(ctx, L.m().as_const(), k, experts.view(), W.v(), order.view(), offsets.view());
                    on<P> S(ctx, values(rows * k * w, 64), rows * k, w), Y(ctx, values(rows * k * n, 65), rows * k, n, 1);
                    P::gather_rows(ctx, X.m().as_const(), order.view(), k, W.v(), 1.5, S.m());
                    P::grouped_matmul_nt(ctx, S.m().as_const(), offsets.view(), Wt.m().as_const(), Y.m(), 0.5, 0.25);
                    on<P> Z(ctx, values(rows * k * w, 66), rows * k, w), G(ctx, values(E * n * w, 67), E * n, w);
                    P::grouped_matmul_nn(ctx, Y.m().as_const(), offsets.view(), Wt.m().as_const(), Z.m(), 1.0, 0.0);
                    P::grouped_matmul_tn(ctx, Y.m().as_const(), S.m().as_const(), offsets.view(), G.m(), 1.0, 0.5);
                    on<P> Out(ctx, values(rows * w, 68), rows, w), D(ctx, values(rows * k, 69), rows * k, 1);
                    P::scatter_add_rows(ctx, Z.m().as_const(), order.view(), k, W.v(), Out.m(), 0.75);
                    P::pair_dots(ctx, Z.m().as_const(), order.view(), k, X.m().as_const(), D.v());
                    on<P> dL(ctx, values(rows * E, 70), rows, E);
                    P::moe_route_backward(ctx, experts.view(), W.v(), D.v(), dL.m());
                    on<P> dA(ctx, values(rows * E, 73), rows, E);
                    typename P::template buffer<double> aux(1);
                    P::moe_aux_loss(ctx, L.m().as_const(), experts.view(), 0.01, dA.m(), aux.view());
                    std::vector<double> aux_value(1);
                    P::download(ctx, vwt::vector_view<const double, typename P::memory>(aux.view()), std::span<double>(aux_value));
                    outputs out{W.get(), Y.get(), Z.get(), G.get(), Out.get(), D.get(), dL.get(), dA.get(), aux_value};
                    for (const auto* ints : {&experts, &order, &offsets}) {
                        const auto host = ints_of<P>(ctx, ints->view());
                        out.emplace_back(host.begin(), host.end());
                    }
                    return out;
                },
                threads);
        }
}
#endif

static_assert(vwt::moe_backend_policy<vwt::reference::backend<double>> && vwt::moe_backend_policy<vwt::cpu::backend<float>> &&
              vwt::moe_backend_policy<vwt::cpu::backend<float, vwt::bf16>> && vwt::moe_backend_policy<vwt::cpu::backend<float, vwt::q8_block>>);

// The CPU policy's buffers: 64-byte aligned and zeroed; on Linux, 4 MiB or more on a 2 MiB boundary
// with the kernel asked for transparent huge pages (the "hg" flag of the mapping in
// /proc/self/smaps, which the kernel sets where madvise(MADV_HUGEPAGE) took).
TEST_CASE("host buffers: aligned, zeroed, large ones advised onto huge pages") {
    using buffer = vwt::cpu::backend<float>::buffer<float>;
    const buffer small(1000);
    CHECK(reinterpret_cast<std::uintptr_t>(small.view().data()) % 64 == 0);
    const buffer large((std::size_t{6} << 20) / sizeof(float) + 3);
    const auto* p = large.view().data();
    for (index_t i = 0; i < large.size(); i += 4099) REQUIRE(p[i] == 0.0f);
#if defined(__linux__)
    CHECK(reinterpret_cast<std::uintptr_t>(p) % (std::uintptr_t{2} << 20) == 0);
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(thp, modes);
    if (modes.empty()) {
        WARN("this kernel has no transparent huge pages: the advice is not checked");
        return;
    }
    // the mapping that holds p, and its VmFlags line
    std::ifstream smaps("/proc/self/smaps");
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    bool inside = false, advised = false, found = false;
    for (std::string line; std::getline(smaps, line);) {
        std::uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream range(line);
        if (range >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(' ') != std::string::npos &&
            line.find(':') > line.find(' ')) {
            inside = lo <= at && at < hi;
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0) {
            found = true;
            advised = line.find(" hg") != std::string::npos;
            break;
        }
    }
    REQUIRE(found);
    CHECK(advised);
#endif
}
