// The paper's configurations (the authors' configs/*.yml) and two small test schedules, as
// constexpr schedule specs; vwt::presets::find looks one up by name at run time.
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "generate.hpp"

namespace vwt::presets {

namespace detail {
// The recipe of every paper config: x shape, bottleneck 0.3, symmetric, no duplicated peak, q 32.
constexpr schedule_spec paper_x(int layers, int hidden, int turn, moe_dims moe = {}) {
    schedule_spec s{};
    s.dims = {layers, hidden, 16, 16, 100263, 4096, moe};
    s.kind = shape::x;
    s.turn = turn;
    s.bottleneck = 0.3;
    s.symmetric = true;
    s.quantize = 32;
    return s;
}
constexpr schedule_spec small_x(int layers, int hidden, int heads, int vocab, int context) {
    schedule_spec s{};
    s.dims = {layers, hidden, heads, heads, vocab, context, {}};
    s.kind = shape::x;
    s.bottleneck = 0.3;
    s.quantize = 8;
    return s;
}
}  // namespace detail

inline constexpr schedule_spec dense_200m = detail::paper_x(16, 640, 12);
inline constexpr schedule_spec dense_500m = detail::paper_x(24, 960, 18);
inline constexpr schedule_spec dense_1b = detail::paper_x(32, 1280, 24);
inline constexpr schedule_spec dense_2b = detail::paper_x(40, 1600, 30);
// configs/moe_1b3b.yml: 22 experts, 3 per token, intermediate 512 at h = 1600 (about 1B active and
// 3B total parameters). docs/semantics-decisions.md explains why not 64 / 4.
inline constexpr schedule_spec moe_1b3b = detail::paper_x(40, 1600, 30, {22, 3, 512});
// semantics.md section 4: byte-level test schedules (vocab 256 + 2 special ids).
inline constexpr schedule_spec tiny_l6 = detail::small_x(6, 96, 4, 258, 256);
inline constexpr schedule_spec tiny_l8 = detail::small_x(8, 128, 4, 258, 512);

struct named_spec {
    std::string_view name;
    schedule_spec spec;
};

inline constexpr std::array<named_spec, 7> all{{
    {"dense_200m", dense_200m},
    {"dense_500m", dense_500m},
    {"dense_1b", dense_1b},
    {"dense_2b", dense_2b},
    {"moe_1b3b", moe_1b3b},
    {"tiny_l6", tiny_l6},
    {"tiny_l8", tiny_l8},
}};

constexpr std::optional<schedule_spec> find(std::string_view name) {
    for (const auto& p : all)
        if (p.name == name) return p.spec;
    return std::nullopt;
}

}  // namespace vwt::presets
