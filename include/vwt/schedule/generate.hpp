// Width-schedule generators: uniform, geometric and arithmetic progressions, the bottleneck-ratio
// shapes (x, diamond, increasing, decreasing) and the middle-width permutations of the ablations.
#pragma once

// One code path for compile time and run time: solve_plan() and write_widths() are constexpr and
// write into a span; make_schedule<L>() wraps them in a std::array, make_schedule() in a vector.

#include <algorithm>
#include <optional>
#include <span>

#include "python_random.hpp"
#include "solver.hpp"

namespace vwt {

enum class shape {
    uniform,     // every layer at h
    x,           // narrowest at the turning layer (the paper's ><former); bottleneck ratio solve
    diamond,     // widest at the turning layer, narrowest at the ends; bottleneck ratio solve
    increasing,  // narrowest first layer (turning layer 1); bottleneck ratio solve
    decreasing,  // narrowest last layer (turning layer L); bottleneck ratio solve
    geometric,   // explicit expansion / reduction factors
    arithmetic,  // explicit deltas
};

enum class permutation_kind { none, shuffle, sorted, reverse_sorted };

// The authors' permute_widths_seed / permute_all_widths: reorder the middle widths (all widths
// when all_layers) by a seeded shuffle, ascending or descending sort.
struct permutation {
    permutation_kind kind = permutation_kind::none;
    std::uint64_t seed = 0;
    bool all_layers = false;
};

struct schedule_spec {
    model_dims dims{};
    shape kind = shape::x;
    int turn = 0;              // 1-indexed turning layer (max_layer); 0: the shape's default
    double bottleneck = 0.3;   // min width / h, for x, diamond, increasing, decreasing
    std::optional<double> expansion{};  // geometric: factor up to the turning layer
    std::optional<double> reduction{};  // geometric: factor after it
    std::optional<double> delta{};      // arithmetic: w_i = w_{i-1} + base * delta up to the turn
    std::optional<double> delta_neg{};  // arithmetic: after the turn
    bool symmetric = true;        // w_1 = w_L when a factor or delta is derived
    bool duplicate_peak = false;  // layer k+1 repeats layer k
    int quantize = 1;             // round each width to the nearest multiple (ties to even)
    permutation permute{};
};

// What the solver decided: the base width (layer 1 before quantisation) and the progression.
struct schedule_plan {
    int base_width = 0;
    solver::rates rates{};
    solver::shape_params shape{};
    int quantize = 1;
};

namespace detail {

constexpr int default_turn(const schedule_spec& spec) {
    const int L = spec.dims.layers;
    switch (spec.kind) {
        case shape::increasing: return 1;
        case shape::decreasing: return L;
        case shape::diamond: return static_cast<int>(round_half_even(0.5 * L));
        default: {
            const int k = static_cast<int>(round_half_even(0.75 * L));
            return k < 1 ? 1 : k;
        }
    }
}

constexpr solver::shape_params shape_of(const schedule_spec& spec) {
    const int turn = spec.turn != 0 ? spec.turn : default_turn(spec);
    const solver::shape_params s{turn, spec.duplicate_peak};
    if (turn < 1 || turn > spec.dims.layers || solver::detail::shrink_steps(spec.dims, s) < 0)
        fail("invalid schedule: turning layer ", turn, " is out of range 1..",
             spec.dims.layers - (spec.duplicate_peak ? 1 : 0), " for ", spec.dims.layers, " layers",
             spec.duplicate_peak ? " with a duplicated peak" : "");
    return s;
}

// The authors' _compute_missing_factor_geometric / _compute_missing_delta_arithmetic.
constexpr solver::rates explicit_rates(const schedule_spec& spec, const solver::shape_params& s) {
    const int grow = solver::detail::grow_steps(spec.dims, s);
    const int shrink = solver::detail::shrink_steps(spec.dims, s);
    if (spec.kind == shape::geometric) {
        if (!spec.expansion && !spec.reduction)
            fail("invalid schedule: a geometric schedule needs an expansion or a reduction factor");
        for (auto f : {spec.expansion, spec.reduction})
            if (f && !(*f > 0)) fail("invalid schedule: geometric factors must be positive, got ", *f);
        double e = spec.expansion.value_or(0), r = spec.reduction.value_or(0);
        if (!spec.reduction)
            r = spec.symmetric && shrink > 0 ? pow(e, -grow / static_cast<double>(shrink)) : 1.0 / e;
        if (!spec.expansion)
            e = spec.symmetric && grow > 0 ? pow(r, -shrink / static_cast<double>(grow)) : 1.0 / r;
        return {solver::progression::geometric, e, r};
    }
    if (!spec.delta && !spec.delta_neg)
        fail("invalid schedule: an arithmetic schedule needs delta or delta_neg");
    double d = spec.delta.value_or(0), dn = spec.delta_neg.value_or(0);
    if (!spec.delta_neg) dn = spec.symmetric && shrink > 0 ? -d * grow / shrink : -d;
    if (!spec.delta) d = spec.symmetric && grow > 0 ? -dn * shrink / grow : -dn;
    return {solver::progression::arithmetic, d, dn};
}

}  // namespace detail

constexpr schedule_plan solve_plan(const schedule_spec& spec) {
    detail::validate_dims(spec.dims);
    if (spec.quantize <= 0) detail::fail("invalid schedule: quantize_to must be positive, got ", spec.quantize);
    if (spec.kind == shape::uniform)
        return {spec.dims.hidden, {solver::progression::geometric, 1.0, 1.0}, {1, false}, 1};
    const auto s = detail::shape_of(spec);
    bool legacy = true;
    solver::rates r{};
    switch (spec.kind) {
        case shape::geometric:
        case shape::arithmetic: r = detail::explicit_rates(spec, s); break;
        default: {
            if (!(spec.bottleneck > 0) || spec.bottleneck >= 1.0)
                detail::fail("invalid schedule: bottleneck ratio must be in (0, 1) for a non-uniform shape, got ",
                             spec.bottleneck);
            const auto bend = spec.kind == shape::diamond ? solver::bend::widening : solver::bend::narrowing;
            r = solver::factors_for_bottleneck(spec.dims, s, spec.bottleneck, spec.symmetric, bend);
            legacy = false;
        }
    }
    const double base = solver::base_width(spec.dims, s, r, legacy);
    if (!detail::is_finite(base) || base <= 0 || base > schedule_limits::width)
        detail::fail("invalid schedule: no positive base width matches the uniform parameter count (got ",
                     base, ")");
    return {static_cast<int>(detail::round_half_even(base)), r, s, spec.quantize};
}

// The widths of a solved plan, before any permutation: the authors' WidthVaryingConfig loop.
constexpr void write_widths(const schedule_plan& plan, std::span<int> out) {
    const int layers = static_cast<int>(out.size());
    const int quantize = plan.quantize;
    if (quantize <= 0) detail::fail("invalid schedule: quantize_to must be positive, got ", quantize);
    const auto& r = plan.rates;
    const int k = plan.shape.turn;
    double previous = plan.base_width;
    for (int i = 1; i <= layers; ++i) {
        double w = plan.base_width;
        const bool geometric = r.kind == solver::progression::geometric;
        if (i == 1) w = plan.base_width;
        else if (i <= k) w = geometric ? previous * r.grow : previous + plan.base_width * r.grow;
        else if (plan.shape.duplicate_peak && i == k + 1) w = previous;
        else w = geometric ? previous * r.shrink : previous + plan.base_width * r.shrink;
        if (!(w > 0)) detail::fail("invalid schedule: layer ", i, " would have width ", w, ", not positive");
        // Checked before the conversion to int (a non-finite or huge value would be undefined).
        if (!(w / quantize <= schedule_limits::width))
            detail::fail("invalid schedule: layer ", i, " would have width ", w, ", above the limit of ",
                         schedule_limits::width);
        previous = w;
        const std::int64_t quantized = detail::round_half_even(w / quantize) * quantize;
        if (quantized > schedule_limits::width)
            detail::fail("invalid schedule: layer ", i, " would have width ", quantized, ", above the limit of ",
                         schedule_limits::width);
        out[static_cast<std::size_t>(i - 1)] = static_cast<int>(quantized);
    }
}

constexpr void apply_permutation(const permutation& p, std::span<int> widths) {
    if (p.kind == permutation_kind::none) return;
    auto target = p.all_layers || widths.size() < 2 ? widths : widths.subspan(1, widths.size() - 2);
    switch (p.kind) {
        case permutation_kind::sorted: std::sort(target.begin(), target.end()); break;
        case permutation_kind::reverse_sorted: std::sort(target.begin(), target.end(), std::greater<>{}); break;
        case permutation_kind::shuffle: detail::python_random(p.seed).shuffle(target); break;
        case permutation_kind::none: break;
    }
}

template <std::size_t L>
constexpr schedule<L> make_schedule(const schedule_spec& spec) {
    if (spec.dims.layers != static_cast<int>(L))
        detail::fail("invalid schedule: spec has ", spec.dims.layers, " layers, the schedule type ", L);
    std::array<int, L> widths{};
    write_widths(solve_plan(spec), widths);
    apply_permutation(spec.permute, widths);
    return schedule<L>(spec.dims, widths);
}

inline dynamic_schedule make_schedule(const schedule_spec& spec) {
    const auto plan = solve_plan(spec);
    std::vector<int> widths(static_cast<std::size_t>(spec.dims.layers));
    write_widths(plan, widths);
    apply_permutation(spec.permute, widths);
    return dynamic_schedule(spec.dims, std::move(widths));
}

}  // namespace vwt
