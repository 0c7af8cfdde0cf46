// A session is sized when it is made: decoding allocates nothing. Every global operator new of
// this test binary is replaced by one that counts, and so are malloc and friends (glibc's
// allocator stays underneath), so Eigen's and the runtime's allocations count too.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

#include <vwt/vwt.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif
// LLVM's OpenMP runtime (libomp, what clang links) allocates its own bookkeeping in every parallel
// region it forks; GNU's (libgomp) does not. vwt enters no OpenMP region with one thread.
#if defined(KMP_VERSION_MAJOR)
constexpr bool runtime_allocates_per_region = true;
#else
constexpr bool runtime_allocates_per_region = false;
#endif

namespace {
std::atomic<long> news{0}, mallocs{0};
}  // namespace

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);
void* malloc(std::size_t n) {
    mallocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
    mallocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
    mallocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
    mallocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, n);
}
int posix_memalign(void** p, std::size_t alignment, std::size_t n) {
    mallocs.fetch_add(1, std::memory_order_relaxed);
    *p = __libc_memalign(alignment, n);
    return *p ? 0 : ENOMEM;
}
void free(void* p) { __libc_free(p); }
}

void* operator new(std::size_t n) {
    news.fetch_add(1, std::memory_order_relaxed);
    if (void* p = __libc_malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
    news.fetch_add(1, std::memory_order_relaxed);
    const auto alignment = static_cast<std::size_t>(a);
    if (void* p = __libc_memalign(alignment, (n + alignment - 1) / alignment * alignment)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, std::size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::size_t) noexcept { __libc_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { __libc_free(p); }

TEST_CASE("32 decode steps of a session perform no heap allocation") {
    using backend = vwt::cpu::backend<float>;
    auto c = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l8));
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 2, p);
    const vwt::model<backend> m(c, p);
    for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const vwt::cpu::context ctx{threads};
        vwt::session<vwt::model<backend>> s(m, ctx, 64);
        std::mt19937_64 rng(5);
        const vwt::sampling_options sampling{0.9, 40, 0.95};
        const std::vector<int> prompt{72, 101, 108, 108, 111};
        s.append(ctx, prompt);
        int token = s.sample(sampling, rng);
        s.append(ctx, std::span<const int>(&token, 1));  // warm-up: the thread pool starts here
        const long news_before = news.load(), mallocs_before = mallocs.load();
        for (int step = 0; step < 32; ++step) {
            token = s.sample(sampling, rng);
            s.append(ctx, std::span<const int>(&token, 1));
        }
        CHECK(news.load() - news_before == 0);
        if (threads == 1 || !runtime_allocates_per_region) CHECK(mallocs.load() - mallocs_before == 0);
        CHECK(s.length() == 5 + 1 + 32);
    }
}

TEST_CASE("the counters count") {
    const long before = news.load(), malloc_before = mallocs.load();
    auto* v = new std::vector<int>(100);
    delete v;
    void* volatile raw = std::malloc(10);  // volatile: clang removes an unused malloc/free pair
    std::free(raw);
    CHECK(news.load() - before >= 2);
    CHECK(mallocs.load() - malloc_before >= 1);
}
