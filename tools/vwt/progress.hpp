// Progress on stderr, as command-line tools people know behave: on a terminal a line redrawn in
// place ('\r'); otherwise (a log file, a pipe) plain lines, at most one per `interval` seconds and
// the last one always, so a log never holds '\r'; nothing at all with --quiet.
#pragma once

#include <chrono>
#include <iostream>
#include <string>

#include <unistd.h>

namespace vwt::cli {

class progress_display {
public:
    explicit progress_display(bool quiet, double interval_seconds = 10.0)
        : mode_(quiet ? mode::off : isatty(STDERR_FILENO) ? mode::redraw : mode::lines), interval_(interval_seconds) {}
    progress_display(const progress_display&) = delete;
    progress_display& operator=(const progress_display&) = delete;
    ~progress_display() { finish(); }

    // The current state; `last`: the final update (always printed).
    void update(const std::string& text, bool last = false) {
        const auto now = std::chrono::steady_clock::now();
        if (mode_ == mode::redraw) {
            std::cerr << '\r' << text << "   " << std::flush;
            open_ = true;
            if (last) finish();
        } else if (mode_ == mode::lines && (last || !printed_ || std::chrono::duration<double>(now - printed_at_).count() >= interval_)) {
            std::cerr << text << '\n' << std::flush;
            printed_ = true;
            printed_at_ = now;
        }
    }
    // A line of its own (a validation loss), after the redrawn line if one is open.
    void note(const std::string& line) {
        if (mode_ == mode::off) return;
        finish();
        std::cerr << line << '\n' << std::flush;
    }
    // Ends the redrawn line.
    void finish() {
        if (open_) std::cerr << '\n' << std::flush;
        open_ = false;
    }

private:
    enum class mode { off, redraw, lines };
    mode mode_;
    double interval_;
    bool open_ = false, printed_ = false;
    std::chrono::steady_clock::time_point printed_at_{};
};

// A bar of `width` cells, `done` of `total` filled: [######......]
inline std::string progress_bar(double done, double total, int width = 24) {
    const int filled = total > 0 ? static_cast<int>(width * std::min(1.0, done / total)) : width;
    return "[" + std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(width - filled), '.') + "]";
}

}  // namespace vwt::cli
