// safetensors: a validating reader over a byte buffer (a file read or mapped by the caller) and
// an atomic writer. Every malformed input is a vwt::error naming the file and what is wrong.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../error.hpp"
#include "../tensor/bf16.hpp"
#include "atomic_file.hpp"
#include "json.hpp"

namespace vwt::io {

enum class dtype { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, f8_e4m3, f8_e5m2 };

struct dtype_info {
    dtype type;
    std::string_view name;
    int bytes;
};
inline constexpr dtype_info dtypes[] = {
    {dtype::f64, "F64", 8},  {dtype::f32, "F32", 4},       {dtype::f16, "F16", 2},
    {dtype::bf16, "BF16", 2}, {dtype::i64, "I64", 8},      {dtype::i32, "I32", 4},
    {dtype::i16, "I16", 2},  {dtype::i8, "I8", 1},          {dtype::u8, "U8", 1},
    {dtype::boolean, "BOOL", 1}, {dtype::f8_e4m3, "F8_E4M3", 1}, {dtype::f8_e5m2, "F8_E5M2", 1},
};
inline const dtype_info& info(dtype t) {
    for (const auto& d : dtypes)
        if (d.type == t) return d;
    vwt::detail::fail("unknown dtype");
}
// The dtypes read_as converts to floating point.
constexpr bool is_float(dtype t) { return t == dtype::f32 || t == dtype::f64 || t == dtype::f16 || t == dtype::bf16; }

struct tensor_entry {
    std::string name;
    dtype type{};
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;  // offsets into the data buffer
    std::int64_t elements = 0;         // product of the shape, checked against overflow when read
    std::int64_t numel() const { return elements; }
};

inline constexpr std::uint64_t max_header_bytes = 100'000'000;
inline constexpr std::uint64_t max_config_bytes = 64u << 20;

// Half-precision conversions (round to nearest even on the way down).
inline float f16_to_f32(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
    std::uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) bits = sign;
        else {  // subnormal: normalise
            int e = -1;
            do { ++e; mant <<= 1; } while (!(mant & 0x400));
            bits = sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | mant << 13;
    else bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    return std::bit_cast<float>(bits);
}
inline std::uint16_t f32_to_f16(float f) {
    const auto x = std::bit_cast<std::uint32_t>(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000);
    const std::uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
    if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00);  // overflow to inf
    if (abs < 0x38800000u) {  // subnormal or zero in half
        if (abs < 0x33000000u) return sign;
        const std::uint32_t mant = (abs & 0x7fffff) | 0x800000;
        const int shift = 126 - static_cast<int>(abs >> 23);  // half subnormal = mantissa * 2^-24
        std::uint32_t half = mant >> shift;
        const std::uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half & 1))) ++half;
        return static_cast<std::uint16_t>(sign | half);
    }
    std::uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
    const std::uint32_t rem = abs & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
    return static_cast<std::uint16_t>(sign | half);
}
inline float bf16_to_f32(std::uint16_t b) { return static_cast<float>(bf16::from_bits(b)); }
inline std::uint16_t f32_to_bf16(float f) { return bf16(f).bits; }

// A parsed, validated safetensors buffer. It views `bytes`; keep them alive while it is used.
class safetensors_view {
public:
    safetensors_view(std::span<const std::uint8_t> bytes, std::string source) : source_(std::move(source)) {
        if (bytes.size() < 8) fail_here("file is ", bytes.size(), " bytes, shorter than the 8-byte header length");
        std::uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = n << 8 | bytes[static_cast<std::size_t>(i)];
        if (n > max_header_bytes) fail_here("header length ", n, " exceeds the limit of ", max_header_bytes, " bytes");
        if (n > bytes.size() - 8)
            fail_here("header length ", n, " is larger than the ", bytes.size() - 8, " bytes after the length");
        const auto* header = reinterpret_cast<const char*>(bytes.data() + 8);
        data_ = bytes.subspan(8 + n);
        parse_header(std::string_view(header, n));
    }

    const std::string& source() const { return source_; }
    const std::vector<tensor_entry>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const tensor_entry* find(std::string_view name) const {
        for (const auto& t : tensors_)
            if (t.name == name) return &t;
        return nullptr;
    }
    // The data buffer: every tensor's bytes, in offset order, without gaps.
    std::span<const std::uint8_t> data() const { return data_; }
    std::span<const std::uint8_t> bytes_of(const tensor_entry& t) const {
        return data_.subspan(t.begin, t.end - t.begin);
    }

    // The tensor converted to float (F32, F16, BF16 and F64 are accepted).
    template <class T>
    void read_as(const tensor_entry& t, T* out) const {
        read_as(t, 0, t.numel(), out);
    }
    // Elements [first, first + count) of the tensor, converted the same way.
    template <class T>
    void read_as(const tensor_entry& t, std::int64_t first, std::int64_t count, T* out) const {
        if (first < 0 || count < 0 || first + count > t.numel())
            fail_here("tensor '", t.name, "': elements [", first, ", ", first + count, ") of ", t.numel(), " requested");
        const auto b = bytes_of(t).subspan(static_cast<std::size_t>(first * info(t.type).bytes));
        const auto n = static_cast<std::size_t>(count);
        for (std::size_t i = 0; i < n; ++i) {
            switch (t.type) {
                case dtype::f32: { float v; std::memcpy(&v, b.data() + 4 * i, 4); out[i] = static_cast<T>(v); break; }
                case dtype::f64: { double v; std::memcpy(&v, b.data() + 8 * i, 8); out[i] = static_cast<T>(v); break; }
                case dtype::f16: out[i] = static_cast<T>(f16_to_f32(static_cast<std::uint16_t>(b[2 * i] | b[2 * i + 1] << 8))); break;
                case dtype::bf16: out[i] = static_cast<T>(bf16_to_f32(static_cast<std::uint16_t>(b[2 * i] | b[2 * i + 1] << 8))); break;
                default: fail_here("tensor '", t.name, "' has dtype ", info(t.type).name, "; F32, F16, BF16 or F64 expected");
            }
        }
    }

private:
    template <class... P>
    [[noreturn]] void fail_here(const P&... p) const { vwt::detail::fail("safetensors '", source_, "': ", p...); }

    void parse_header(std::string_view text) {
        nlohmann::json j;
        try {
            // A header is at most three levels deep ({"name": {"shape": [...]}}).
            j = parse_json(std::span(text.data(), text.size()), "header", {.max_depth = 4});
        } catch (const vwt::error& e) {
            fail_here(e.what());
        }
        if (!j.is_object()) fail_here("header is not a JSON object");
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (it.key() == "__metadata__") {
                if (!it->is_object()) fail_here("__metadata__ is not an object");
                for (auto m = it->begin(); m != it->end(); ++m) {
                    if (!m->is_string()) fail_here("__metadata__ value of '", m.key(), "' is not a string");
                    metadata_[m.key()] = m->get<std::string>();
                }
                continue;
            }
            tensors_.push_back(parse_entry(it.key(), *it));
        }
        auto sorted = tensors_;
        std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
            return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
        });
        std::uint64_t at = 0;
        for (const auto& t : sorted) {
            if (t.begin < at) fail_here("tensor '", t.name, "' at bytes [", t.begin, ", ", t.end, ") overlaps the previous tensor");
            if (t.begin > at) fail_here("gap of ", t.begin - at, " bytes before tensor '", t.name, "'");
            at = t.end;
        }
        if (at != data_.size())
            fail_here("tensors cover ", at, " bytes but the data buffer holds ", data_.size(),
                      at > data_.size() ? " (offsets out of range: file truncated?)" : " (trailing bytes)");
    }

    tensor_entry parse_entry(const std::string& name, const nlohmann::json& e) const {
        if (!e.is_object()) fail_here("tensor '", name, "' is not an object");
        for (const char* key : {"dtype", "shape", "data_offsets"})
            if (!e.contains(key)) fail_here("tensor '", name, "' has no '", key, "'");
        tensor_entry t;
        t.name = name;
        if (!e["dtype"].is_string()) fail_here("tensor '", name, "': dtype is not a string");
        const auto dt = e["dtype"].get<std::string>();
        const auto* found = std::find_if(std::begin(dtypes), std::end(dtypes), [&](const auto& d) { return d.name == dt; });
        if (found == std::end(dtypes)) fail_here("tensor '", name, "' has unknown dtype '", dt, "'");
        t.type = found->type;
        if (!e["shape"].is_array()) fail_here("tensor '", name, "': shape is not a list");
        // The product of the dimensions, checked at every step: a zero dimension makes the tensor
        // empty, but the dimensions before it must still not overflow when multiplied.
        std::uint64_t elements = 1;
        for (const auto& s : e["shape"]) {
            if (!s.is_number_unsigned()) fail_here("tensor '", name, "': shape entries must be non-negative integers");
            const auto v = s.get<std::uint64_t>();
            if (v > static_cast<std::uint64_t>(INT64_MAX) / static_cast<std::uint64_t>(found->bytes) ||
                (v != 0 && elements > static_cast<std::uint64_t>(INT64_MAX) / static_cast<std::uint64_t>(found->bytes) / v))
                fail_here("tensor '", name, "': shape size overflows");
            elements *= v;
            t.shape.push_back(static_cast<std::int64_t>(v));
        }
        t.elements = static_cast<std::int64_t>(elements);
        const std::uint64_t bytes = elements * static_cast<std::uint64_t>(found->bytes);
        const auto& off = e["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            fail_here("tensor '", name, "': data_offsets must be [begin, end] of non-negative integers");
        t.begin = off[0].get<std::uint64_t>();
        t.end = off[1].get<std::uint64_t>();
        if (t.begin > t.end) fail_here("tensor '", name, "': data_offsets begin ", t.begin, " > end ", t.end);
        if (t.end - t.begin != bytes)
            fail_here("tensor '", name, "': ", t.end - t.begin, " bytes in data_offsets but shape x ", dt, " needs ", bytes);
        if (t.end > data_.size())
            fail_here("tensor '", name, "': data_offsets end ", t.end, " is beyond the ", data_.size(), "-byte data buffer");
        return t;
    }

    std::string source_;
    std::span<const std::uint8_t> data_;
    std::vector<tensor_entry> tensors_;
    std::map<std::string, std::string> metadata_;
};

// The whole of a file (a regular file, or a pipe or device read to its end); `max_bytes` bounds
// what the caller is willing to hold.
inline std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path,
                                                 std::uint64_t max_bytes = static_cast<std::uint64_t>(-1)) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) vwt::detail::fail("cannot open '", path.string(), "': no such file");
    if (std::filesystem::is_directory(status)) vwt::detail::fail("cannot read '", path.string(), "': not a regular file but a directory");
    std::ifstream f(path, std::ios::binary);
    if (!f) vwt::detail::fail("cannot open '", path.string(), "'");
    std::vector<std::uint8_t> bytes;
    if (std::filesystem::is_regular_file(status)) {
        const auto size = std::filesystem::file_size(path, ec);
        if (ec) vwt::detail::fail("cannot read '", path.string(), "': ", ec.message());
        if (size > max_bytes) vwt::detail::fail("'", path.string(), "' is ", size, " bytes, more than the ", max_bytes, " expected");
        bytes.resize(static_cast<std::size_t>(size));
        if (size && !f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
            vwt::detail::fail("cannot read '", path.string(), "'");
        return bytes;
    }
    char chunk[1 << 16];
    while (f.read(chunk, sizeof chunk) || f.gcount() > 0) {
        bytes.insert(bytes.end(), chunk, chunk + f.gcount());
        if (bytes.size() > max_bytes) vwt::detail::fail("'", path.string(), "' holds more than the ", max_bytes, " bytes expected");
    }
    return bytes;
}

// One tensor to write: float values stored as `type` (F32, F16 or BF16).
struct tensor_to_write {
    std::string name;
    std::vector<std::int64_t> shape;
    std::span<const float> values;
};

// The data of a file vwt writes starts on this boundary: the header is padded with spaces (as the
// format allows) so that 8 + its length is a multiple of it, and tensors used in place from a
// mapped file sit where a 64-byte aligned buffer would put them.
inline constexpr std::size_t data_alignment = 64;

// Writes a safetensors file atomically; the header starts with '{', carries {"format":"pt"}
// metadata and is padded with spaces so that the data starts on data_alignment. Tensors are
// stored in the order given, without gaps.
inline void write_safetensors(const std::filesystem::path& path, std::span<const tensor_to_write> tensors, dtype type,
                              const std::map<std::string, std::string>& metadata = {{"format", "pt"}}) {
    if (type != dtype::f32 && type != dtype::f16 && type != dtype::bf16)
        vwt::detail::fail("write_safetensors: only F32, F16 and BF16 can be written");
    const int size = info(type).bytes;
    nlohmann::ordered_json header;
    header["__metadata__"] = metadata;
    std::uint64_t at = 0;
    std::set<std::string> names;
    for (const auto& t : tensors) {
        if (!names.insert(t.name).second) vwt::detail::fail("write_safetensors: tensor '", t.name, "' given twice");
        std::int64_t n = 1;
        for (auto s : t.shape) n *= s;
        if (n != static_cast<std::int64_t>(t.values.size()))
            vwt::detail::fail("write_safetensors: tensor '", t.name, "' has ", t.values.size(), " values for its shape");
        const std::uint64_t bytes = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(size);
        header[t.name] = {{"dtype", info(type).name}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
        at += bytes;
    }
    std::string h = header.dump();
    h.append((data_alignment - (8 + h.size()) % data_alignment) % data_alignment, ' ');
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) prefix[static_cast<std::size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    std::string data;
    data.reserve(at);
    for (const auto& t : tensors) {
        for (float v : t.values) {
            if (type == dtype::f32) data.append(reinterpret_cast<const char*>(&v), 4);
            else {
                const std::uint16_t b = type == dtype::f16 ? f32_to_f16(v) : f32_to_bf16(v);
                data.push_back(static_cast<char>(b & 0xff));
                data.push_back(static_cast<char>(b >> 8));
            }
        }
    }
    const std::string_view pieces[] = {prefix, h, data};
    write_file_atomic(path, pieces);
}

}  // namespace vwt::io
