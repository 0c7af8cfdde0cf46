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

}  // namespace vwt::cpu::kernels
