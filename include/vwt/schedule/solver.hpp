// The parameter-matching solver of the paper: the base width that gives the uniform model's
// parameter count, and the geometric factors that hit a target bottleneck ratio.
#pragma once

// This reimplements, in our words and in constexpr C++, what the authors' scripts/solve_hparams.py
// computes (github ZhaofengWu/variable-width-transformers). The order of floating-point operations
// follows theirs so that the rounded integers agree; see docs/semantics-decisions.md.

#include <optional>

#include "../detail/constexpr_math.hpp"
#include "schedule.hpp"

namespace vwt::solver {

enum class progression { geometric, arithmetic };

// How widths evolve from layer 1 to the turning layer k and after it. Geometric: w_i = w_{i-1} *
// factor; arithmetic: w_i = w_{i-1} + base * delta. `grow` applies up to k, `shrink` after it.
struct rates {
    progression kind = progression::geometric;
    double grow = 1.0;
    double shrink = 1.0;
};

struct shape_params {
    int turn = 1;  // k, 1-indexed
    bool duplicate_peak = false;
};

namespace detail {

using vwt::detail::pow;
using vwt::detail::sqrt;

constexpr int grow_steps(const model_dims&, const shape_params& s) { return s.turn - 1; }
constexpr int shrink_steps(const model_dims& d, const shape_params& s) {
    return d.layers - s.turn - (s.duplicate_peak ? 1 : 0);
}

// Sum and sum of squares of a, a(1+r), ..., a(1+r)^(N-1) (geometric) or a, a+r, ... (arithmetic).
constexpr double series_sum(progression p, double a, double r, int n) {
    if (p == progression::geometric)
        return vwt::detail::abs(r) > 1e-12 ? a * (pow(1 + r, n) - 1) / r : n * a;
    if (n == 0) return 0.0;
    return n / 2.0 * (2 * a + (n - 1) * r);
}
constexpr double series_sum_of_squares(progression p, double a, double r, int n) {
    if (p == progression::geometric) {
        const double ratio = pow(1 + r, 2);
        return vwt::detail::abs(r) > 1e-12 ? a * a * (pow(ratio, n) - 1) / (ratio - 1) : n * a * a;
    }
    if (n == 0) return 0.0;
    return n * (a * a) + static_cast<double>(n) * (n - 1) * a * r +
           static_cast<double>(n) * (n - 1) * (2 * n - 1) / 6 * (r * r);
}

// The solver works with rates relative to 1 (alpha = factor - 1) like the authors' code.
struct relative_rates {
    progression kind;
    double up;    // alpha or delta
    double down;  // alpha_neg or delta_neg
};
constexpr relative_rates relative(const rates& r) {
    if (r.kind == progression::geometric) return {r.kind, r.grow - 1.0, r.shrink - 1.0};
    return {r.kind, r.grow, r.shrink};
}

// Coefficients of the layers' parameter count, K * w^2 (+ gate * w for MoE).
struct layer_coefficients {
    double quadratic;  // 4 (attention) + 3 * 4 (SwiGLU), or attention + experts for MoE
    double gate;       // MoE router: experts * w
    double waste_mlp;  // per w_L * (w_L - h): rows of the last MLP projection that are truncated
};
constexpr layer_coefficients coefficients(const model_dims& d) {
    if (d.moe.enabled()) {
        const double ratio = static_cast<double>(d.moe.intermediate) / d.hidden;
        return {4 + 3.0 * d.moe.experts * ratio, static_cast<double>(d.moe.experts),
                d.moe.experts * ratio};
    }
    return {16.0, 0.0, 4.0};
}

constexpr std::optional<int> checked_turn(const model_dims& d, const shape_params& s) {
    if (s.turn < 1 || s.turn > d.layers || shrink_steps(d, s) < 0) return std::nullopt;
    return s.turn;
}

}  // namespace detail

// The parameter count the authors match (solve_hparams' compute_metrics): the embeddings, K w^2 per
// layer (K h w for a fixed-width stream), minus the "waste" that only ever meets zeros when the
// embedding or the head keeps width h.
template <class Widths>
constexpr double matched_parameter_count(const model_dims& d, const Widths& widths) {
    const auto c = detail::coefficients(d);
    const auto& st = d.stream;
    const double h = d.hidden;
    double first = 0, last = 0, widest = 0, layers = 0;
    bool seen_first = false;
    for (double w : widths) {
        layers += st.fixed_width ? c.quadratic * h * w + c.gate * h : c.quadratic * w * w + c.gate * w;
        if (!seen_first) { first = w; seen_first = true; }
        last = w;
        widest = w > widest ? w : widest;
    }
    if (st.fixed_width) return static_cast<double>(d.vocab) * (2.0 * d.hidden) + layers;
    const double in = st.original_input_width ? h : first;
    const double out = st.original_output_width ? h : st.wide_unembedding ? widest : last;
    double params = static_cast<double>(d.vocab) * (in + out) + layers;
    if (st.original_input_width && first > h) params -= 3 * (first - h) * first;
    if (st.original_output_width && last > h) params -= c.waste_mlp * last * (last - h);
    return params;
}

// solve_hparams' compute_base_width for the stream variant in d.stream. `legacy` selects the
// narrower waste correction the authors use when no bottleneck ratio is given (configs written
// with explicit factors or deltas).
constexpr double base_width(const model_dims& d, const shape_params& s, const rates& r, bool legacy) {
    using namespace detail;
    const auto rel = relative(r);
    const auto c = coefficients(d);
    const auto& st = d.stream;
    const int k = s.turn;
    const int L = d.layers;
    const double h = d.hidden;
    const double v = d.vocab;

    const double p_base = v * (2.0 * d.hidden) + c.quadratic * L * h * h + c.gate * L * h;

    const double lam = rel.kind == progression::geometric ? pow(1 + rel.up, k - 1) : 1 + (k - 1) * rel.up;
    const auto shrink_start = [&](double x) {
        return rel.kind == progression::geometric ? x * (1 + rel.down) : x + rel.down;
    };
    const auto end_multiplier = [&](int n) {
        return rel.kind == progression::geometric ? lam * pow(1 + rel.down, n) : lam + n * rel.down;
    };
    const double s1_grow = series_sum(rel.kind, 1, rel.up, k);
    const double s2_grow = series_sum_of_squares(rel.kind, 1, rel.up, k);
    double s1_shrink = 0, s2_shrink = 0, h_end_mult = lam;
    if (s.duplicate_peak) {
        s1_shrink = series_sum(rel.kind, lam, rel.down, L - k);
        s2_shrink = series_sum_of_squares(rel.kind, lam, rel.down, L - k);
        if (L - k > 0) h_end_mult = end_multiplier(L - k - 1);
    } else {
        s1_shrink = series_sum(rel.kind, shrink_start(lam), rel.down, L - k);
        s2_shrink = series_sum_of_squares(rel.kind, shrink_start(lam), rel.down, L - k);
        if (L - k > 0) h_end_mult = end_multiplier(L - k);
    }

    // A fixed-width stream: every layer's count is linear in its width, K h w_i (+ the router's h).
    if (st.fixed_width) return (p_base - 2 * v * h - c.gate * L * h) / (c.quadratic * h * (s1_grow + s1_shrink));

    // The embeddings' widths as multiples of w_1 (coef_*_w1) or of h (coef_*_h).
    const double coef_in_w1 = st.original_input_width ? 0 : 1, coef_in_h = st.original_input_width ? 1 : 0;
    double coef_out_w1 = 0, coef_out_h = 0;
    if (st.original_output_width) coef_out_h = 1;
    else if (st.wide_unembedding) coef_out_w1 = h_end_mult > (lam > 1.0 ? lam : 1.0) ? h_end_mult : (lam > 1.0 ? lam : 1.0);
    else coef_out_w1 = h_end_mult;

    const double A = c.quadratic * (s2_grow + s2_shrink);
    const double B = (coef_in_w1 + coef_out_w1) * v + c.gate * (s1_grow + s1_shrink);
    const double C = p_base - (coef_in_h + coef_out_h) * h * v;
    const double no_waste = (-B + sqrt(B * B + 4 * A * C)) / (2 * A);
    const double c_end = h_end_mult;
    const double c_eff = (coef_in_h + coef_out_h) * h * v - p_base;

    if (legacy) {
        if (!(st.original_input_width && st.original_output_width)) return no_waste;
        const double a_eff = A - 3 - c.waste_mlp * (c_end * c_end);
        const double b_eff = B + h * (3 + c.waste_mlp * c_end);
        const double disc = b_eff * b_eff - 4 * a_eff * c_eff;
        if (disc < 0 || a_eff <= 0) return no_waste;
        const double root = sqrt(disc);
        const double candidate = (-b_eff + root) / (2 * a_eff);
        const double alternative = (-b_eff - root) / (2 * a_eff);
        if (candidate > h && candidate * c_end > h) return candidate;
        if (alternative > h && alternative * c_end > h) return alternative;
        return no_waste;
    }

    // An endpoint kept at width h may or may not be narrower than its layer; solve the quadratic of
    // each pattern and keep the root whose waste pattern is the one it assumed.
    const int input_patterns = st.original_input_width ? 2 : 1, output_patterns = st.original_output_width ? 2 : 1;
    for (int input_waste = 0; input_waste < input_patterns; ++input_waste) {
        for (int output_waste = 0; output_waste < output_patterns; ++output_waste) {
            double waste_quadratic = 0.0, waste_linear = 0.0;
            if (input_waste) { waste_quadratic += 3 * 1.0; waste_linear += 3 * h * 1.0; }
            if (output_waste) {
                waste_quadratic += c.waste_mlp * (c_end * c_end);
                waste_linear += c.waste_mlp * h * c_end;
            }
            const double a = A - waste_quadratic;
            const double b = B + waste_linear;
            double roots[2] = {0, 0};
            int count = 0;
            if (vwt::detail::abs(a) < 1e-12) {
                if (vwt::detail::abs(b) >= 1e-12) roots[count++] = -c_eff / b;
            } else {
                const double disc = b * b - 4 * a * c_eff;
                if (disc >= 0) {
                    const double root = sqrt(disc);
                    roots[count++] = (-b + root) / (2 * a);
                    roots[count++] = (-b - root) / (2 * a);
                }
            }
            for (int i = 0; i < count; ++i) {
                const double candidate = roots[i];
                if (candidate <= 0 || !vwt::detail::is_finite(candidate)) continue;
                const bool has_input_waste = st.original_input_width && candidate > h;
                const bool has_output_waste = st.original_output_width && candidate * c_end > h;
                if (has_input_waste == static_cast<bool>(input_waste) &&
                    has_output_waste == static_cast<bool>(output_waste))
                    return candidate;
            }
        }
    }
    return no_waste;
}

// The smallest of the continuous (unrounded, unquantised) widths for these rates.
constexpr double continuous_min_width(const model_dims& d, const shape_params& s, const rates& r) {
    using detail::pow;
    const auto rel = detail::relative(r);
    const double h1 = base_width(d, s, r, false);
    double smallest = h1;
    double peak = h1;
    for (int i = 0; i < s.turn; ++i) {
        const double w = rel.kind == progression::geometric ? h1 * pow(1 + rel.up, i) : h1 * (1 + i * rel.up);
        smallest = w < smallest ? w : smallest;
        peak = w;
    }
    const int first = s.duplicate_peak ? 0 : 1;
    const int last = s.duplicate_peak ? d.layers - s.turn - 1 : d.layers - s.turn;
    for (int i = first; i <= last; ++i) {
        const double w = rel.kind == progression::geometric ? peak * pow(1 + rel.down, i) : peak + i * h1 * rel.down;
        smallest = w < smallest ? w : smallest;
    }
    return smallest;
}

// Which way the bottleneck search bends the widths. narrowing: the turning layer is the narrowest
// (the paper's x shape, also "increasing" for k = 1 and "decreasing" for k = L); widening: the
// turning layer is the widest (a diamond; a vwt extension, the authors' solver has no such mode).
enum class bend { narrowing, widening };

constexpr rates factors_for_search_value(const model_dims& d, const shape_params& s, bend b,
                                         double search_value, bool symmetric) {
    using detail::pow;
    const int grow = detail::grow_steps(d, s);
    const int shrink = detail::shrink_steps(d, s);
    const double toward_turn = b == bend::narrowing ? search_value : 1.0 / search_value;
    double expansion = 1.0, reduction = 1.0;
    if (grow > 0) {
        expansion = toward_turn;
        if (shrink > 0) reduction = symmetric ? pow(expansion, -grow / static_cast<double>(shrink)) : 1.0 / expansion;
    } else if (shrink > 0) {
        reduction = 1.0 / toward_turn;
    }
    return {progression::geometric, expansion, reduction};
}

// solve_geometric_factors_for_bottleneck_ratio: bisection on the factor until the smallest
// parameter-matched continuous width is ratio * h.
constexpr rates factors_for_bottleneck(const model_dims& d, const shape_params& s, double ratio,
                                       bool symmetric, bend b = bend::narrowing) {
    if (!(ratio > 0) || ratio > 1.0)
        vwt::detail::fail("invalid schedule: bottleneck ratio must be in (0, 1], got ", ratio);
    if (!detail::checked_turn(d, s))
        vwt::detail::fail("invalid schedule: turning layer ", s.turn, " is out of range 1..",
                          d.layers - (s.duplicate_peak ? 1 : 0), " for ", d.layers, " layers",
                          s.duplicate_peak ? " with a duplicated peak" : "");
    constexpr double tol = 1e-6;
    constexpr int max_iter = 80;
    const double target = ratio * d.hidden;
    const double slack = tol * (target > 1.0 ? target : 1.0);
    const auto error_at = [&](double search_value) {
        return continuous_min_width(d, s, factors_for_search_value(d, s, b, search_value, symmetric)) - target;
    };
    const double uniform_error = error_at(1.0);
    if (vwt::detail::abs(uniform_error) <= slack) return {progression::geometric, 1.0, 1.0};
    if (uniform_error < 0)
        vwt::detail::fail("invalid schedule: bottleneck ratio ", ratio, " is above the uniform solution");
    double lo = -1.0, hi = 1.0;
    for (double sv = 0.5; sv >= 1e-6; sv *= 0.5) {
        const double e = error_at(sv);
        if (vwt::detail::is_finite(e) && e <= 0) { lo = sv; break; }
    }
    if (lo < 0)
        vwt::detail::fail("invalid schedule: no geometric factors reach bottleneck ratio ", ratio,
                          " with turning layer ", s.turn, " of ", d.layers);
    for (int i = 0; i < max_iter; ++i) {
        const double mid = (lo + hi) / 2;
        const double e = error_at(mid);
        if (vwt::detail::abs(e) <= slack) { lo = hi = mid; break; }
        if (e > 0) hi = mid; else lo = mid;
    }
    return factors_for_search_value(d, s, b, (lo + hi) / 2, symmetric);
}

}  // namespace vwt::solver
