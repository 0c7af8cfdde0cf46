// Reading JSON from untrusted bytes: nesting depth bounded, duplicate keys detected, and every
// nlohmann exception (syntax, numbers too large for a double, bad UTF-8) turned into a vwt::error.
#pragma once

#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../error.hpp"

namespace vwt::io {

struct json_limits {
    int max_depth = 64;                // objects and arrays nested deeper are refused
    bool reject_duplicate_keys = true; // nlohmann keeps the last of two equal keys silently
};

// Parses `bytes` as one JSON value; `what` names the source in errors (e.g. "config 'c.json'").
inline nlohmann::json parse_json(std::span<const char> bytes, const std::string& what, json_limits limits = {}) {
    std::vector<std::set<std::string>> keys;  // one set per open object
    std::string duplicate;
    bool too_deep = false;
    nlohmann::json::parser_callback_t watch = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if ((event == E::object_start || event == E::array_start) && depth >= limits.max_depth) {
            too_deep = true;
            // Stops the parse: no deeper value is ever built, so nothing recurses on it later.
            throw error("nesting too deep");
        }
        if (event == E::object_start) keys.emplace_back();
        else if (event == E::object_end) { if (!keys.empty()) keys.pop_back(); }
        else if (event == E::key && limits.reject_duplicate_keys && !keys.empty() &&
                 !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
            duplicate = parsed.get<std::string>();
        return true;
    };
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(bytes.begin(), bytes.end(), watch);
    } catch (const nlohmann::json::exception& e) {
        vwt::detail::fail(what, ": not valid JSON: ", e.what());
    } catch (const error&) {
        if (!too_deep) throw;
        vwt::detail::fail(what, ": JSON nested deeper than ", limits.max_depth, " levels");
    }
    if (!duplicate.empty()) vwt::detail::fail(what, ": the key '", duplicate, "' appears twice in one object");
    return j;
}

}  // namespace vwt::io
