// Text that leaves vwt for other programs: XML character data (SVG labels) escaped in one place,
// and byte strings made valid UTF-8 (byte-level samples can end inside a character).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vwt::report {

// `text` as XML character data or attribute value: & < > " ' escaped.
inline std::string xml_text(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out += c;
        }
    }
    return out;
}

// Integers as text with `separator` between them ("208 152 104").
inline std::string joined(const std::vector<int>& values, char separator = ' ') {
    std::string out;
    for (const int v : values) {
        if (!out.empty()) out += separator;
        out += std::to_string(v);
    }
    return out;
}

// `bytes` with every ill-formed UTF-8 sequence (a stray continuation byte, a truncated or overlong
// sequence, a surrogate, a code point above U+10FFFF) replaced by U+FFFD, one per maximal
// ill-formed subpart as Unicode recommends.
inline std::string valid_utf8(std::string_view bytes) {
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(bytes.size());
    const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
    for (std::size_t i = 0; i < bytes.size();) {
        const std::uint8_t b = byte(i);
        if (b < 0x80) {
            out += static_cast<char>(b);
            ++i;
            continue;
        }
        // Length and the allowed range of the second byte (Unicode Table 3-7).
        std::size_t length = 0;
        std::uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) length = 2;
        else if (b == 0xE0) length = 3, lo = 0xA0;
        else if (b >= 0xE1 && b <= 0xEC) length = 3;
        else if (b == 0xED) length = 3, hi = 0x9F;
        else if (b >= 0xEE && b <= 0xEF) length = 3;
        else if (b == 0xF0) length = 4, lo = 0x90;
        else if (b >= 0xF1 && b <= 0xF3) length = 4;
        else if (b == 0xF4) length = 4, hi = 0x8F;
        std::size_t good = length ? 1 : 0;  // bytes of a well-formed prefix
        while (good && good < length && i + good < bytes.size()) {
            const std::uint8_t c = byte(i + good);
            const bool ok = good == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
            if (!ok) break;
            ++good;
        }
        if (length && good == length) out.append(bytes.substr(i, length));
        else out += replacement;
        i += good ? good : 1;
    }
    return out;
}

}  // namespace vwt::report
