// vwt::cpu::context: what every CPU op runs on, all of it set by the caller: the thread count, the
// precision of the matrix products, and the cache where the products keep their oneDNN primitives.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "../../tensor/bf16.hpp"
#include "../../tensor/q8.hpp"
#include "../buffer.hpp"

namespace vwt::cpu {

// How matmul_nt, matmul_nn and matmul_tn multiply: the numbers. Products on bf16 operands run as
// bf16 products (oneDNN's matmul: AMX tiles, or vdpbf16ps on AMD's cores) where those outrun float
// ones, else as float products of the operands rounded to bf16 (Intel's cores without AMX:
// kernels::bf16_products_pay); the two differ only in the order of the float sums.
enum class product_precision {
    // bf16 for products of more than 4 rows (prefill) against bf16 or q8 weights; products of up
    // to 4 rows (decode) against bf16 weights round each row of activations to bf16 too (exact
    // products, float sums: vdpbf16ps where the CPU has AVX512_BF16), against q8 weights quantize
    // each row to q8 blocks by the weights' rule and multiply 8-bit integers (exact sums, then both
    // scales); f32 otherwise.
    automatic,
    // The operands as stored (bf16 and q8 weights widened to float, which is exact), float sums.
    f32,
    // Both operands rounded to bf16 (nearest, ties to even; q8 weights dequantized first), exact
    // products, float sums: the products of mixed-precision training, with float weights kept as
    // the master copy.
    bf16,
};

// What the bf16 products' oneDNN primitives are made for.
enum class product_shapes {
    // One primitive per shape, made on its first call (~1 ms): the fastest for shapes that repeat
    // (a model's prefill and training products).
    fixed,
    // One primitive per weight shape whose token count (the rows of the activations) is given at
    // run time: for products whose rows change from call to call, such as an MoE layer's expert
    // groups, which would otherwise make a primitive for every group size they meet.
    varying_rows,
};

// The oneDNN primitives that bf16 products create, one per shape, the bf16 copies of their float
// operands, a dense output buffer and decode's activations quantized to q8 blocks, kept between calls. Copies of a context share one cache; a product holds its
// lock while it runs, so threads that share a context run their bf16 products one at a time. The
// entries are type-erased, so this type is the same whether or not the build has oneDNN.
class product_cache {
public:
    using key = std::array<std::int64_t, 10>;  // transposes, m, n, k, lda, ldb, alpha, beta, epilogue (y is dense)

    // The entry stored under k, or nullptr; `make()` creates it on the first call (an entry may be
    // nullptr itself, which records that the shape has no primitive on this CPU).
    template <class Make>
    std::shared_ptr<void> find_or_make(const key& k, Make&& make) {
        for (const auto& [stored, entry] : entries_)
            if (stored == k) return entry;
        entries_.emplace_back(k, make());
        return entries_.back().second;
    }
    std::shared_ptr<void>& engine() { return engine_; }
    // Rows of a bf16 copy start on a cache line where the row length allows. From the default
    // allocator, a large copy started 16 bytes past a page boundary and every 64-byte row of an AMX
    // tile load touched two lines: the products of a dense_200m ><former prefill on float
    // activations, run back to back through onednn::gemm_bf16, took 45.5-45.7 ms against 40.7-40.8
    // ms from aligned copies.
    template <class T>
    using buffer = std::vector<T, std_allocator<T>>;
    buffer<bf16>& operand(int i) { return operands_[i]; }
    buffer<float>& dense_output() { return dense_output_; }  // a product's output before it is added into a strided one
    buffer<q8_block>& q8_operand() { return q8_operand_; }    // decode's rows of activations against q8 weights
    std::mutex& mutex() { return mutex_; }
    std::size_t size() const { return entries_.size(); }

private:
    std::mutex mutex_;
    std::shared_ptr<void> engine_;
    std::vector<std::pair<key, std::shared_ptr<void>>> entries_;
    std::array<buffer<bf16>, 2> operands_;
    buffer<float> dense_output_;
    buffer<q8_block> q8_operand_;
};

// Keep one context and pass it to every call: a new context starts with an empty cache, so its
// first bf16 product of each shape makes the primitive again (~30-300 us each).
struct context {
    int threads = 1;  // OpenMP threads for each op; 1 runs on the calling thread only
    product_precision products = product_precision::automatic;
    product_shapes shapes = product_shapes::fixed;  // the policy's grouped (MoE) products use varying_rows
    std::shared_ptr<product_cache> cache = std::make_shared<product_cache>();
};

}  // namespace vwt::cpu
