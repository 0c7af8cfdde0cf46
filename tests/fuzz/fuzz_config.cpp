// libFuzzer target: config.json bytes through the JSON reader, the strict config reader (with
// the generator check that regenerates widths), the parameter layout and the accounting. A bad
// config must be a vwt::error, never a crash, a hang or a large allocation.
#include <cstdint>
#include <string>

#include <vwt/accounting.hpp>
#include <vwt/io/config.hpp>
#include <vwt/io/json.hpp>
#include <vwt/params/layout.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const auto j = vwt::io::parse_json(std::span(reinterpret_cast<const char*>(data), size), "config 'fuzz.json'");
        std::string warnings;
        const auto c = vwt::io::config_from_json(j, "fuzz.json", [&](const std::string& w) { warnings += w; });
        const vwt::parameter_layout layout(c);
        const auto costs = vwt::account(c.schedule, {0, 2, 2});
        if (layout.size() <= 0 || costs.params.total() <= 0) __builtin_trap();
    } catch (const vwt::error&) {
    }
    return 0;
}
