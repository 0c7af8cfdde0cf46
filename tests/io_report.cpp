// The `vwt info` reports and the schedule flags: JSON keys and values, the table, the SVG.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include <vwt/io/atomic_file.hpp>
#include <vwt/report/schedule_report.hpp>
#include <vwt/vwt.hpp>

#include "vwt/schedule_flags.hpp"

namespace {
vwt::dynamic_schedule parse(std::vector<std::string> args, std::string& name, int& base) {
    CLI::App app;
    vwt::cli::schedule_flags flags;
    flags.add_to(app);
    std::reverse(args.begin(), args.end());
    app.parse(args);
    return flags.build(name, base);
}
}  // namespace

TEST_CASE("JSON report holds the widths and the side-by-side costs") {
    vwt::report::schedule_report_input in{vwt::make_schedule(vwt::presets::dense_200m), 1147, {}, "dense_200m"};
    const auto j = vwt::report::schedule_report_json(in);
    const auto c = vwt::compare_with_uniform(in.model);
    CHECK(j["widths"].get<std::vector<int>>() == in.model.widths);
    CHECK(j["base_width"] == 1147);
    CHECK(j["params"] == c.model.params.total());
    CHECK(j["params_uniform"] == c.uniform.params.total());
    CHECK(j["flops_per_token"] == c.model.flops_per_token);
    CHECK(j["flops_per_token_uniform"] == c.uniform.flops_per_token);
    CHECK(j["kv_bytes_per_token"] == 2 * 2 * 9216);
    CHECK(j["kv_bytes_per_token_uniform"] == 2 * 2 * 10240);
    CHECK(j["reduction_percent"]["kv_bytes_per_token"].get<double>() == Approx(10.0));
    CHECK(j["per_layer"].size() == 16);
    CHECK(j["per_layer"][11]["width"] == 192);
    CHECK(j["per_layer"][11]["head_dim"] == 12);
}

TEST_CASE("table report lists every layer and the totals") {
    vwt::report::schedule_report_input in{vwt::make_schedule(vwt::presets::tiny_l6), 148, {}, "tiny_l6"};
    const auto t = vwt::report::schedule_report_table(in);
    CHECK_THAT(t, Catch::Matchers::Contains("base width 148, residual width 144"));
    CHECK(std::regex_search(t, std::regex("\n +4 +32 +8 ")));  // layer 4: width 32, head dim 8
    CHECK_THAT(t, Catch::Matchers::Contains("KV bytes/token (2 B/value)"));
}

TEST_CASE("SVG draws one bar per layer for each model, written atomically") {
    const auto s = vwt::make_schedule(vwt::presets::tiny_l8);
    const auto svg = vwt::report::schedule_svg(s, "t");
    std::ptrdiff_t bars = 0;
    for (auto it = svg.find("<rect x="); it != std::string::npos; it = svg.find("<rect x=", it + 1)) ++bars;
    CHECK(bars == 2 * 8);
    CHECK_THAT(svg, Catch::Matchers::Contains("layer 6: width 40"));
    const auto dir = std::filesystem::temp_directory_path() / "vwt_io_report_test";
    std::filesystem::create_directories(dir);
    const auto path = dir / "s.svg";
    vwt::io::write_file_atomic(path, svg);
    vwt::io::write_file_atomic(path, svg);  // replacing an existing file
    std::ifstream f(path);
    const std::string back((std::istreambuf_iterator<char>(f)), {});
    CHECK(back == svg);
    std::size_t leftovers = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) leftovers += e.path() != path;
    CHECK(leftovers == 0);
    CHECK_THROWS_WITH(vwt::io::write_file_atomic(dir / "missing" / "x.svg", svg),
                      Catch::Matchers::Contains("cannot create"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("schedule flags: presets, overrides and explicit widths") {
    std::string name;
    int base = 0;
    auto s = parse({"--preset", "dense_200m"}, name, base);
    CHECK(name == "dense_200m");
    CHECK(base == 1147);
    CHECK(s == vwt::make_schedule(vwt::presets::dense_200m));
    s = parse({"--layers", "8", "--hidden", "128", "--heads", "4", "--vocab", "258", "--context", "512",
               "--quantize", "8", "--turn", "6"},
              name, base);
    CHECK(s.widths == vwt::make_schedule(vwt::presets::tiny_l8).widths);
    CHECK(s.dims.kv_heads == 4);
    s = parse({"--preset", "tiny_l8", "--kv-heads", "2"}, name, base);
    CHECK(s.dims.kv_heads == 2);
    s = parse({"--preset", "dense_200m", "--permute", "shuffle", "--permute-seed", "7"}, name, base);
    CHECK(s.widths[1] == 608);
    s = parse({"--layers", "3", "--hidden", "64", "--heads", "4", "--widths", "96,32,64"}, name, base);
    CHECK(s.widths == std::vector<int>{96, 32, 64});
    CHECK(base == 0);
    CHECK_THROWS_WITH(parse({"--preset", "nope"}, name, base), Catch::Matchers::Contains("--preset: unknown preset 'nope'"));
    CHECK_THROWS_WITH(parse({"--preset", "tiny_l8", "--shape", "hexagon"}, name, base),
                      Catch::Matchers::Contains("--shape: unknown shape 'hexagon'"));
    CHECK_THROWS_WITH(parse({"--hidden", "64"}, name, base), Catch::Matchers::Contains("at least --layers, --hidden and --heads"));
}

using Catch::Matchers::Contains;

TEST_CASE("XML text is escaped in one place, and every SVG label goes through it") {
    CHECK(vwt::report::xml_text("><former & \"x\" 'y'") == "&gt;&lt;former &amp; &quot;x&quot; &apos;y&apos;");
    const auto svg = vwt::report::schedule_svg(vwt::make_schedule(vwt::presets::tiny_l6), "a < b & c");
    CHECK_THAT(svg, Contains("a &lt; b &amp; c") && Contains("&gt;&lt;former"));
    CHECK_THAT(svg, !Contains("><former") && !Contains("a < b"));
}

TEST_CASE("byte strings become valid UTF-8: each ill-formed subpart is one U+FFFD") {
    using vwt::report::valid_utf8;
    const std::string fffd = "\xEF\xBF\xBD";
    CHECK(valid_utf8("plain ascii") == "plain ascii");
    CHECK(valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
    CHECK(valid_utf8("euro cut \xE2\x82") == "euro cut " + fffd);          // a character split at the end
    CHECK(valid_utf8("\x80x") == fffd + "x");                                // stray continuation byte
    CHECK(valid_utf8("\xC0\xAF") == fffd + fffd);                            // overlong '/'
    CHECK(valid_utf8("\xED\xA0\x80") == fffd + fffd + fffd);                 // surrogate U+D800
    CHECK(valid_utf8("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);      // above U+10FFFF
    CHECK(valid_utf8("\xE2\x82x\xE2\x82\xAC") == fffd + "x\xE2\x82\xAC");    // truncated, then a whole one
}
