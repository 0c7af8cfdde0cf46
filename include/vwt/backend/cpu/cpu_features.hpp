// What the CPU the process runs on offers beyond the instructions the library was compiled for:
// kernels with their own target attributes ask here before they run.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace vwt::cpu::kernels {

// AVX512_BF16 (CPUID leaf 7, subleaf 1, EAX bit 5): vcvtneps2bf16 and the bf16 dot products.
// Asked once; the answer lasts as long as the process.
inline bool has_avx512_bf16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const bool present = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1u);
    }();
    return present;
#else
    return false;
#endif
}

// Whether the CPU says it is Intel's (CPUID leaf 0: "GenuineIntel"), for choices measured to
// differ between vendors' cores. Asked once.
inline bool is_intel_cpu() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const bool intel = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        // the vendor string is EBX, EDX, ECX: "Genu", "ineI", "ntel" as little-endian words
        return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;
    }();
    return intel;
#else
    return false;
#endif
}

// The CPU's family as CPUID leaf 1 gives it (the base family, plus the extended family where the base
// is 15): 6 for Intel's cores; 25 for AMD's Zen 3 and Zen 4, 26 for Zen 5. 0 where CPUID is not
// asked. Asked once.
inline int cpu_family() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const int family = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
        const unsigned base = (a >> 8) & 0xFu, extended = (a >> 20) & 0xFFu;
        return static_cast<int>(base == 0xFu ? base + extended : base);
    }();
    return family;
#else
    return 0;
#endif
}

// AMX-TILE and AMX-BF16 (CPUID leaf 7, EDX bits 24 and 22): the CPU says it has bf16 tile
// products (whether Linux grants a process the tiles' state is asked by the code that uses them).
// Asked once.
inline bool has_amx_bf16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const bool present = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 24) & 1u) && ((d >> 22) & 1u);
    }();
    return present;
#else
    return false;
#endif
}

// Whether products of bf16 operands outrun float ones on this CPU, so that a product asked to
// multiply bf16 values (product_precision) should run as one: on AMX tiles, or by vdpbf16ps on
// AMD's cores (Zen 4 and 5 run it at the rate of a float FMA, twice the products; oneDNN's bf16
// matmul measured 2x its sgemm on the model's shapes, 2-core Zen 4). Intel's cores without AMX
// (a VM that hides it; Cooper Lake) run vdpbf16ps at best at the float FMA's rate: on a 2-core Xeon
// VM (family 6, model 207, AVX512_BF16 without AMX) oneDNN's bf16 matmul ran at 0.59x its sgemm
// (168 against 286 GFLOP/s on the model's shapes) and bf16 attention at 0.66-0.72x float. There the
// same numbers come from float products of the operands rounded to bf16 (exact products of bf16
// values, float sums). Asked once.
inline bool bf16_products_pay() {
    static const bool pays = has_amx_bf16() || (has_avx512_bf16() && !is_intel_cpu());
    return pays;
}

}  // namespace vwt::cpu::kernels
