// What the benchmarks' summaries share: a console reporter that also keeps every run, and the
// lookup of a counter by benchmark-name prefix.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace vwt_bench {

class capturing_reporter : public benchmark::ConsoleReporter {
public:
    std::map<std::string, Run> runs;
    void ReportRuns(const std::vector<Run>& report) override {
        for (const auto& r : report) runs[r.benchmark_name()] = r;
        ConsoleReporter::ReportRuns(report);
    }
    // Counter `name` of the first run (by name) whose name starts with `prefix` and that `keep`
    // accepts; 0 where there is none.
    double counter(const std::string& prefix, const char* name, const std::function<bool(const std::string&)>& keep = {}) const {
        for (const auto& [key, run] : runs)
            if (key.rfind(prefix, 0) == 0 && (!keep || keep(key)) && run.counters.count(name)) return static_cast<double>(run.counters.at(name));
        return 0.0;
    }
};

}  // namespace vwt_bench
