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

}  // namespace vwt::cpu::kernels
