// The run-time cost of solving a schedule (the bisection and base-width solve) and of accounting,
// beside copying a ready compile-time schedule: what choosing widths at run time costs a loader.
#include <benchmark/benchmark.h>

#include <vwt/vwt.hpp>

namespace {

void solve_dense_2b_at_run_time(benchmark::State& state) {
    for (auto _ : state) {
        auto s = vwt::make_schedule(vwt::presets::dense_2b);
        benchmark::DoNotOptimize(s.widths.data());
    }
}
BENCHMARK(solve_dense_2b_at_run_time);

void copy_compile_time_dense_2b(benchmark::State& state) {
    static constexpr auto fixed = vwt::make_schedule<40>(vwt::presets::dense_2b);
    for (auto _ : state) {
        vwt::dynamic_schedule s(fixed);
        benchmark::DoNotOptimize(s.widths.data());
    }
}
BENCHMARK(copy_compile_time_dense_2b);

void account_dense_2b(benchmark::State& state) {
    const auto s = vwt::make_schedule(vwt::presets::dense_2b);
    for (auto _ : state) {
        auto c = vwt::compare_with_uniform(s);
        benchmark::DoNotOptimize(c);
    }
}
BENCHMARK(account_dense_2b);

}  // namespace

BENCHMARK_MAIN();
