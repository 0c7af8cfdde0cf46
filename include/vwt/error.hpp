// vwt::error, the one exception type the library throws, and the helper that builds its message.
// Every failure a caller can cause (bad flags, bad files, bad schedules) arrives as a vwt::error.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace vwt {

class error : public std::runtime_error {
public:
    explicit error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

// Not constexpr on purpose: when a constexpr generator reaches this call during constant
// evaluation the program fails to compile, and the diagnostic shows the message arguments.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    std::ostringstream message;
    (message << ... << parts);
    throw error(message.str());
}

}  // namespace detail
}  // namespace vwt
