// Loading and tokenizing, against their limits and peers, in one run:
//  - peak resident memory of a fresh process that loads dense_200m (bf16 safetensors as vwt writes
//    them, ~475 MB) and decodes one token, as a ratio to the file's size (the least a process that
//    holds the weights can use): bf16 weights used in place from the mapping, bf16 from a file in
//    another tensor order (converted tensor by tensor), q8 and f32 weights converted from it;
//  - encode throughput (MB/s, one thread) of vwt's BPE against PyPI `tokenizers` on the same
//    tokenizer.json and corpus (bench/tokenizer_encode.py trains it and times its own encode).
// Each memory row runs in a new process (this binary with --load-child), which reports its own
// peak, so nothing this process holds is counted in it. Linux only (/proc).
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>
#include <vwt/io/bpe_tokenizer.hpp>
#include <vwt/vwt.hpp>

namespace {

namespace fs = std::filesystem;
const fs::path work = fs::temp_directory_path() / "vwt_bench_loading";

// dense_200m with its real vocabulary, bf16 weights written by vwt (in the layout's order) and the
// same weights in reversed tensor order (as another writer might store them).
const fs::path& model_dir(bool reversed) {
    static const auto dirs = [] {
        fs::create_directories(work);
        auto c = vwt::model_config::mup(vwt::make_schedule(vwt::presets::dense_200m));
        const vwt::parameter_layout layout(c);
        std::vector<float> params;
        vwt::initialize_parameters(c, layout, 1, params);
        const auto in_order = work / "dense_200m_bf16", other = work / "dense_200m_bf16_reversed";
        vwt::io::save_model_dir(in_order, c, params, vwt::io::dtype::bf16);
        vwt::io::save_model_dir(other, c, params, vwt::io::dtype::bf16);
        std::vector<vwt::io::tensor_to_write> t;
        for (auto it = layout.tensors().rbegin(); it != layout.tensors().rend(); ++it)
            t.push_back({it->name, it->shape, std::span<const float>(params).subspan(static_cast<std::size_t>(it->offset), static_cast<std::size_t>(it->numel()))});
        vwt::io::write_safetensors(other / "model.safetensors", t, vwt::io::dtype::bf16);
        return std::array<fs::path, 2>{in_order, other};
    }();
    return dirs[reversed ? 1 : 0];
}

// The child: load with weights W, decode one token, print the peak resident set of its own address
// space (VmHWM: exec starts it afresh, where getrusage's ru_maxrss keeps the spawning parent's).
template <class B>
int load_and_step(const fs::path& dir) {
    const auto m = vwt::io::load_model<B>(dir, {2});
    vwt::session<vwt::model<B>> s(m, {2}, 8);
    const int token = 42;
    const auto logits = s.append({2}, std::span(&token, 1));
    std::ifstream status("/proc/self/status");
    std::string line;
    double hwm = 0;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0) hwm = std::stod(line.substr(6)) * 1024.0;  // kB
    std::printf("{\"peak_rss_bytes\": %.0f, \"in_place\": %s, \"logit0\": %g}\n", hwm, m.borrows_parameters() ? "true" : "false",
                static_cast<double>(logits[0]));
    return 0;
}
int child(const std::string& weights, const fs::path& dir) {
    if (weights == "bf16") return load_and_step<vwt::cpu::backend<float, vwt::bf16>>(dir);
    if (weights == "q8") return load_and_step<vwt::cpu::backend<float, vwt::q8_block>>(dir);
    return load_and_step<vwt::cpu::backend<float>>(dir);
}

// Runs a command and returns the JSON object on the last line it prints (null on failure).
nlohmann::json run_json(const std::string& command) {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    std::string last;
    std::array<char, 4096> buf{};
    while (pipe && std::fgets(buf.data(), static_cast<int>(buf.size()), pipe.get())) last = buf.data();
    try {
        return nlohmann::json::parse(last);
    } catch (const nlohmann::json::exception&) {
        return nullptr;
    }
}

void load_peak_rss(benchmark::State& state, const char* weights, bool reversed) {
    const auto& dir = model_dir(reversed);
    const double file = static_cast<double>(fs::file_size(dir / "model.safetensors"));
    const std::string command = fs::read_symlink("/proc/self/exe").string() + " --load-child " + weights + " " + dir.string();
    nlohmann::json r;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        r = run_json(command);
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (r.is_null()) return state.SkipWithError("the loading child failed");
    }
    const double rss = r.at("peak_rss_bytes").get<double>();
    state.counters["file_MB"] = file / 1e6;
    state.counters["peak_rss_MB"] = rss / 1e6;
    state.counters["rss_per_file_byte"] = rss / file;
    state.counters["in_place"] = r.at("in_place").get<bool>() ? 1 : 0;
}
BENCHMARK_CAPTURE(load_peak_rss, bf16_in_place, "bf16", false)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(load_peak_rss, bf16_converted, "bf16", true)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(load_peak_rss, q8_from_bf16, "q8", false)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(load_peak_rss, f32_from_bf16, "f32", false)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- tokenizer encode throughput
std::string corpus_path() {
    const char* env = std::getenv("VWT_CORPUS");
    if (env && *env) return env;
    const fs::path shared = VWT_DATA_DIR "/tinyshakespeare.txt";
    return fs::exists(shared) ? shared.string() : std::string(VWT_SOURCE_DIR "/README.md");
}

nlohmann::json& tokenizers_baseline() {
    static nlohmann::json result = [] {
        fs::create_directories(work);
        return run_json(std::string(VWT_TOKENIZERS_PYTHON) + " " + VWT_SOURCE_DIR + "/bench/tokenizer_encode.py " + corpus_path() + " " +
                        (work / "cl100k_8000.json").string() + " 2>/dev/null");
    }();
    return result;
}

void tokenizers_encode(benchmark::State& state) {
    const auto& r = tokenizers_baseline();
    for (auto _ : state) {
        if (r.is_null()) return state.SkipWithError("PyPI tokenizers did not run (scripts/setup.sh makes build-venv)");
        state.SetIterationTime(r.at("seconds").get<double>());
    }
    state.counters["MB_per_s"] = r.at("MB_per_s").get<double>();
    state.counters["tokens"] = r.at("tokens").get<double>();
}
BENCHMARK(tokenizers_encode)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

void vwt_encode(benchmark::State& state) {
    if (tokenizers_baseline().is_null()) return state.SkipWithError("no tokenizer.json: the tokenizers baseline did not run");
    const auto tok = vwt::io::bpe_tokenizer::from_file(work / "cl100k_8000.json");
    const auto bytes = vwt::io::read_file_bytes(corpus_path());
    const std::string text(bytes.begin(), bytes.end());
    std::size_t tokens = 0;
    for (auto _ : state) tokens = tok.encode(text).size();
    if (static_cast<double>(tokens) != tokenizers_baseline().at("tokens").get<double>())
        return state.SkipWithError("vwt's ids differ in number from tokenizers'");
    state.counters["MB_per_s"] = benchmark::Counter(static_cast<double>(text.size()) / 1e6, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(vwt_encode)->Iterations(5)->Unit(benchmark::kMillisecond);

// Collects every run's counters for the summary.
class summary_reporter : public benchmark::ConsoleReporter {
public:
    std::map<std::string, std::map<std::string, double>> counters;
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const auto& r : runs)
            for (const auto& [k, v] : r.counters) counters[r.benchmark_name()][k] = v.value;
        ConsoleReporter::ReportRuns(runs);
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc == 4 && std::strcmp(argv[1], "--load-child") == 0) {
        try {
            return child(argv[2], argv[3]);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "load child: %s\n", e.what());
            return 1;
        }
    }
    benchmark::Initialize(&argc, argv);
    summary_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    const auto value = [&](const std::string& name, const std::string& counter) {
        for (const auto& [n, c] : reporter.counters)
            if (n.rfind(name, 0) == 0 && c.count(counter)) return c.at(counter);
        return 0.0;
    };
    std::printf("\nsummary (one run):\n");
    for (const char* row : {"bf16_in_place", "bf16_converted", "q8_from_bf16", "f32_from_bf16"})
        if (const double r = value(std::string("load_peak_rss/") + row, "rss_per_file_byte"); r > 0)
            std::printf("load dense_200m + one decode step, %-15s peak RSS %7.1f MB = %.2fx the %.1f MB bf16 file\n", row,
                        value(std::string("load_peak_rss/") + row, "peak_rss_MB"), r, value(std::string("load_peak_rss/") + row, "file_MB"));
    const double ours = value("vwt_encode", "MB_per_s"), theirs = value("tokenizers_encode", "MB_per_s");
    if (ours > 0 && theirs > 0)
        std::printf("BPE encode (cl100k-style, vocab 8000, one thread): vwt %.2f MB/s, tokenizers %.2f MB/s: %.2fx\n", ours, theirs, ours / theirs);
    benchmark::Shutdown();
    fs::remove_all(work);
    return 0;
}
