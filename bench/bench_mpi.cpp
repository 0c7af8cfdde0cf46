// Data-parallel training over MPI, run once per layout by bench/mpi_scaling.sh (1 rank x 2 threads,
// then `mpirun -np 2` x 1 thread each): tokens/s of training steps of tiny_l8 at the reproduction's
// batch (8 x 128 tokens per step, whatever the ranks), whose gradient the trainer all-reduces layer
// by layer as the backward finishes them; and MPI_Allreduce of a buffer of the gradient's size
// alone, its time and bus bandwidth. Every rank runs the same fixed iterations (the collectives
// keep them in step); rank 0 reports.
//
// Run: VWT_BENCH_THREADS=1 mpirun -np 2 build/bench/bench_mpi   (or bash bench/mpi_scaling.sh)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <vwt/train/mpi.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

#include "summary.hpp"

namespace {

using backend = vwt::cpu::backend<float>;
constexpr int batch = 8, seq = 128, steps = 12, warmup = 2;

int threads() {
    const char* t = std::getenv("VWT_BENCH_THREADS");
    return t ? std::max(1, std::atoi(t)) : 2;
}

vwt::model_config bench_config() { return vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l8)); }

void train_steps(benchmark::State& state) {
    vwt::train::mpi_communicator<backend> comm;
    const auto c = bench_config();
    std::vector<float> params;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 1, params);
    std::vector<int> tokens(400000);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>((i * 7919 + i / 13) % 258);
    vwt::train::train_options o;
    o.steps = steps;
    o.batch = batch;
    o.eval_every = 0;
    for (auto _ : state) {
        vwt::train::trainer<backend> t(backend::context{threads()}, c, params, vwt::train::window_loader(tokens, seq, 0.0, 1, "synthetic"),
                                       o, &comm);
        std::vector<double> seconds;
        t.run([&](const vwt::train::step_report& r) {
            if (r.step > warmup) seconds.push_back(static_cast<double>(batch) * seq / r.tokens_per_second);
        });
        std::sort(seconds.begin(), seconds.end());
        const double median = seconds[seconds.size() / 2];
        state.SetIterationTime(median);
        state.counters["tokens_per_s"] = batch * seq / median;
        state.counters["ranks"] = comm.size();
        state.counters["threads_per_rank"] = threads();
        state.counters["gradient_MB"] = 4.0 * static_cast<double>(params.size()) / 1e6;
    }
}
BENCHMARK(train_steps)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// The gradient's all-reduce alone, blocking, after a barrier; the fastest of the iterations.
void allreduce_gradient(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(vwt::parameter_layout(bench_config()).size());
    std::vector<float> grad(n, 1.0f);
    int ranks = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    double best = 1e9;
    for (auto _ : state) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
        state.SetIterationTime(s);
    }
    state.counters["best_ms"] = best * 1e3;
    // bus bandwidth: a ring all-reduce moves 2 (N - 1) / N of the buffer through each rank's link
    state.counters["bus_GBs"] = ranks > 1 ? 2.0 * (ranks - 1) / ranks * 4.0 * static_cast<double>(n) / best / 1e9 : 0;
}
BENCHMARK(allreduce_gradient)->Iterations(50)->UseManualTime()->Unit(benchmark::kMillisecond);

// Ranks other than 0 run the same benchmarks silently.
class silent_reporter : public benchmark::BenchmarkReporter {
public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
    vwt::train::mpi_environment mpi(&argc, &argv);
    benchmark::Initialize(&argc, argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (rank != 0) {
        silent_reporter quiet;
        benchmark::RunSpecifiedBenchmarks(&quiet);
        return 0;
    }
    vwt_bench::capturing_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    const auto counter = [&](const std::string& bench, const char* name) { return reporter.counter(bench, name); };
    const double tps = counter("train_steps", "tokens_per_s"), step_ms = 1e3 * batch * seq / tps;
    std::printf("\nsummary: %d rank(s) x %d thread(s): tiny_l8 training %.0f tokens/s (%.1f ms per step of %d x %d tokens); "
                "the %.1f MB gradient's all-reduce alone %.2f ms = %.1f%% of a step",
                ranks, threads(), tps, step_ms, batch, seq, counter("train_steps", "gradient_MB"), counter("allreduce_gradient", "best_ms"),
                100 * counter("allreduce_gradient", "best_ms") / step_ms);
    if (ranks > 1) std::printf(" (bus bandwidth %.1f GB/s)", counter("allreduce_gradient", "bus_GBs"));
    std::printf("\n");
    return 0;
}
