// The width solver against integers produced by the authors' scripts/solve_hparams.py and
// WidthVaryingConfig (run once with their code; the vectors are pinned here), at compile time
// and at run time.
#include <catch2/catch.hpp>

#include <vector>

#include <vwt/vwt.hpp>

namespace {

struct reference {
    vwt::schedule_spec spec;
    int base;
    std::vector<int> widths;
};

vwt::schedule_spec small(int L, int h, int k, double b) {
    vwt::schedule_spec s{};
    s.dims = {L, h, 4, 4, 256, 256, {}};
    s.kind = vwt::shape::x;
    s.turn = k;
    s.bottleneck = b;
    s.quantize = 8;
    return s;
}

std::vector<int> widths_of(const vwt::dynamic_schedule& s) { return s.widths; }

}  // namespace

TEST_CASE("paper presets reproduce the authors' solver") {
    const std::vector<reference> refs = {
        {vwt::presets::dense_200m, 1147,
         {1152, 960, 832, 704, 608, 512, 448, 352, 320, 256, 224, 192, 288, 480, 736, 1152}},
        {vwt::presets::dense_500m, 1775, {1760, 1600, 1440, 1280, 1152, 1024, 928, 832, 768, 672, 608, 544,
                                          480, 448, 384, 352, 320, 288, 384, 544, 704, 960, 1312, 1760}},
        {vwt::presets::dense_1b, 2403,
         {2400, 2208, 2048, 1888, 1760, 1600, 1504, 1376, 1280, 1184, 1088, 992, 928, 864, 800, 736,
          672, 608, 576, 544, 480, 448, 416, 384, 480, 608, 768, 960, 1216, 1504, 1920, 2400}},
        {vwt::presets::dense_2b, 3030,
         {3040, 2848, 2656, 2496, 2336, 2208, 2080, 1952, 1824, 1696, 1600, 1504, 1408, 1312,
          1248, 1184, 1088, 1024, 960, 896, 864, 800, 736, 704, 672, 608, 576, 544,
          512, 480, 576, 704, 832, 992, 1216, 1440, 1728, 2080, 2528, 3040}},
        {vwt::presets::moe_1b3b, 3027,
         {3040, 2848, 2656, 2496, 2336, 2208, 2080, 1952, 1824, 1696, 1600, 1504, 1408, 1312,
          1248, 1152, 1088, 1024, 960, 896, 864, 800, 736, 704, 672, 608, 576, 544,
          512, 480, 576, 704, 832, 992, 1216, 1440, 1728, 2080, 2528, 3040}},
        {vwt::presets::tiny_l6, 148, {144, 88, 48, 32, 64, 144}},
        {vwt::presets::tiny_l8, 209, {208, 152, 104, 72, 56, 40, 88, 208}},
    };
    for (const auto& r : refs) {
        CAPTURE(r.spec.dims.layers, r.spec.dims.hidden);
        CHECK(vwt::solve_plan(r.spec).base_width == r.base);
        CHECK(widths_of(vwt::make_schedule(r.spec)) == r.widths);
    }
}

TEST_CASE("64-expert MoE variant (semantics.md's reading) also matches the authors' solver") {
    auto s = vwt::presets::moe_1b3b;
    s.dims.moe = {64, 4, 512};
    CHECK(vwt::solve_plan(s).base_width == 3024);
    CHECK(vwt::make_schedule(s).widths.front() == 3008);
    CHECK(vwt::make_schedule(s).widths[15] == 1152);
}

TEST_CASE("shape variants reproduce the authors' solver") {
    SECTION("increasing: turning layer 1") {
        auto s = small(8, 128, 1, 0.5);
        s.kind = vwt::shape::increasing;
        s.turn = 0;  // default for the shape
        CHECK(vwt::solve_plan(s).base_width == 64);
        CHECK(widths_of(vwt::make_schedule(s)) == std::vector<int>{64, 72, 88, 104, 120, 144, 168, 200});
    }
    SECTION("decreasing: turning layer L") {
        auto s = small(8, 128, 0, 0.5);
        s.kind = vwt::shape::decreasing;
        CHECK(vwt::solve_plan(s).base_width == 201);
        CHECK(widths_of(vwt::make_schedule(s)) == std::vector<int>{200, 168, 144, 120, 104, 88, 72, 64});
    }
    SECTION("duplicated peak") {
        auto s = vwt::presets::dense_200m;
        s.duplicate_peak = true;
        CHECK(vwt::solve_plan(s).base_width == 1181);
        CHECK(widths_of(vwt::make_schedule(s)) ==
              std::vector<int>{1184, 992, 864, 704, 608, 512, 448, 384, 320, 256, 224, 192, 192, 352, 640, 1184});
    }
    SECTION("asymmetric: reduction = 1 / expansion") {
        auto s = vwt::presets::dense_200m;
        s.symmetric = false;
        CHECK(vwt::solve_plan(s).base_width == 1397);
        CHECK(widths_of(vwt::make_schedule(s)) ==
              std::vector<int>{1408, 1152, 960, 800, 672, 576, 480, 384, 320, 288, 224, 192, 224, 288, 320, 384});
    }
    SECTION("explicit geometric expansion, symmetric reduction derived") {
        auto s = vwt::presets::dense_200m;
        s.kind = vwt::shape::geometric;
        s.expansion = 0.9;
        CHECK(vwt::solve_plan(s).base_width == 986);
        CHECK(widths_of(vwt::make_schedule(s)) ==
              std::vector<int>{992, 896, 800, 704, 640, 576, 512, 480, 416, 384, 352, 320, 416, 544, 736, 992});
    }
    SECTION("explicit geometric diamond") {
        auto s = vwt::presets::dense_200m;
        s.kind = vwt::shape::geometric;
        s.turn = 8;
        s.expansion = 1.1;
        CHECK(vwt::solve_plan(s).base_width == 449);
        CHECK(widths_of(vwt::make_schedule(s)) ==
              std::vector<int>{448, 480, 544, 608, 672, 736, 800, 864, 800, 736, 672, 640, 576, 544, 480, 448});
    }
    SECTION("arithmetic x") {
        auto s = vwt::presets::dense_200m;
        s.kind = vwt::shape::arithmetic;
        s.delta = -0.05;
        CHECK(vwt::solve_plan(s).base_width == 845);
        CHECK(widths_of(vwt::make_schedule(s)) ==
              std::vector<int>{832, 800, 768, 704, 672, 640, 576, 544, 512, 480, 416, 384, 512, 608, 736, 832});
    }
    SECTION("arithmetic diamond") {
        auto s = small(12, 256, 6, 0.3);
        s.kind = vwt::shape::arithmetic;
        s.delta = 0.1;
        CHECK(vwt::solve_plan(s).base_width == 207);
        CHECK(widths_of(vwt::make_schedule(s)) ==
              std::vector<int>{208, 224, 248, 272, 288, 312, 296, 272, 256, 240, 224, 208});
    }
}

TEST_CASE("diamond bottleneck solve: the ends are the narrowest at the requested ratio") {
    // vwt's own extension (the authors' solver only narrows toward the turning layer).
    auto s = vwt::presets::dense_200m;
    s.kind = vwt::shape::diamond;
    s.turn = 8;
    s.bottleneck = 0.5;
    s.quantize = 32;
    const auto sched = vwt::make_schedule(s);
    const int peak = *std::max_element(sched.widths.begin(), sched.widths.end());
    CHECK(sched.widths[7] == peak);
    CHECK(sched.widths.front() == Approx(0.5 * 640).margin(16));
    CHECK(sched.widths.back() == Approx(0.5 * 640).margin(16));
    // and it is parameter matched
    const double matched = vwt::solver::matched_parameter_count(s.dims, sched.widths);
    const double uniform = vwt::solver::matched_parameter_count(s.dims, std::vector<int>(16, 640));
    CHECK(matched == Approx(uniform).epsilon(1e-2));  // quantised to 32
}

TEST_CASE("permutations of the middle widths match Python's random.Random(seed).shuffle") {
    auto s = vwt::presets::dense_200m;
    s.permute = {vwt::permutation_kind::shuffle, 0, false};
    CHECK(widths_of(vwt::make_schedule(s)) ==
          std::vector<int>{1152, 832, 192, 224, 448, 288, 704, 608, 320, 256, 512, 960, 480, 352, 736, 1152});
    s.permute.seed = 7;
    CHECK(widths_of(vwt::make_schedule(s)) ==
          std::vector<int>{1152, 608, 288, 736, 320, 224, 512, 480, 256, 832, 960, 192, 352, 704, 448, 1152});
    s.permute.seed = 123456789012ULL;  // a seed wider than 32 bits
    CHECK(widths_of(vwt::make_schedule(s)) ==
          std::vector<int>{1152, 224, 288, 480, 448, 256, 320, 832, 608, 736, 704, 512, 960, 192, 352, 1152});
    s.permute = {vwt::permutation_kind::shuffle, 3, true};
    CHECK(widths_of(vwt::make_schedule(s)) ==
          std::vector<int>{608, 192, 224, 480, 288, 704, 448, 1152, 960, 1152, 736, 512, 832, 320, 256, 352});
    s.permute = {vwt::permutation_kind::sorted, 0, false};
    CHECK(widths_of(vwt::make_schedule(s)) ==
          std::vector<int>{1152, 192, 224, 256, 288, 320, 352, 448, 480, 512, 608, 704, 736, 832, 960, 1152});
    s.permute = {vwt::permutation_kind::reverse_sorted, 0, false};
    CHECK(widths_of(vwt::make_schedule(s)) ==
          std::vector<int>{1152, 960, 832, 736, 704, 608, 512, 480, 448, 352, 320, 288, 256, 224, 192, 1152});
}

namespace {
// Every preset solved by the compiler...
template <std::size_t L>
constexpr std::array<int, L> at_compile_time(const vwt::schedule_spec& spec) {
    return vwt::make_schedule<L>(spec).widths;
}
constexpr auto ct_200m = at_compile_time<16>(vwt::presets::dense_200m);
constexpr auto ct_500m = at_compile_time<24>(vwt::presets::dense_500m);
constexpr auto ct_1b = at_compile_time<32>(vwt::presets::dense_1b);
constexpr auto ct_2b = at_compile_time<40>(vwt::presets::dense_2b);
constexpr auto ct_moe = at_compile_time<40>(vwt::presets::moe_1b3b);
constexpr auto ct_l6 = at_compile_time<6>(vwt::presets::tiny_l6);
constexpr auto ct_l8 = at_compile_time<8>(vwt::presets::tiny_l8);
constexpr int ct_base_200m = vwt::solve_plan(vwt::presets::dense_200m).base_width;
static_assert(ct_200m[11] == 192 && ct_base_200m == 1147);

template <std::size_t L>
std::vector<int> as_vector(const std::array<int, L>& a) { return {a.begin(), a.end()}; }
}  // namespace

TEST_CASE("compile-time and run-time schedules agree for every preset") {
    // ...and by the program at run time, through <cmath>.
    CHECK(as_vector(ct_200m) == widths_of(vwt::make_schedule(vwt::presets::dense_200m)));
    CHECK(as_vector(ct_500m) == widths_of(vwt::make_schedule(vwt::presets::dense_500m)));
    CHECK(as_vector(ct_1b) == widths_of(vwt::make_schedule(vwt::presets::dense_1b)));
    CHECK(as_vector(ct_2b) == widths_of(vwt::make_schedule(vwt::presets::dense_2b)));
    CHECK(as_vector(ct_moe) == widths_of(vwt::make_schedule(vwt::presets::moe_1b3b)));
    CHECK(as_vector(ct_l6) == widths_of(vwt::make_schedule(vwt::presets::tiny_l6)));
    CHECK(as_vector(ct_l8) == widths_of(vwt::make_schedule(vwt::presets::tiny_l8)));
    CHECK(ct_base_200m == vwt::solve_plan(vwt::presets::dense_200m).base_width);
    // A fixed schedule converts to a dynamic one with the same content.
    const vwt::dynamic_schedule d(vwt::make_schedule<16>(vwt::presets::dense_200m));
    CHECK(d == vwt::make_schedule(vwt::presets::dense_200m));
    CHECK(d.residual_width == 1152);
    CHECK(d.max_width == 1152);
}

TEST_CASE("uniform schedules and the uniform twin keep every layer at h") {
    auto s = vwt::presets::dense_200m;
    s.kind = vwt::shape::uniform;
    const auto u = vwt::make_schedule(s);
    CHECK(u.widths == std::vector<int>(16, 640));
    CHECK(vwt::uniform_twin(vwt::make_schedule(vwt::presets::dense_200m)) == u);
    constexpr auto twin = vwt::uniform_twin(vwt::make_schedule<16>(vwt::presets::dense_200m));
    static_assert(twin.widths[3] == 640 && twin.residual_width == 640);
}

TEST_CASE("explicit width lists") {
    const vwt::dynamic_schedule s({3, 64, 4, 2, 256, 128, {}}, {96, 32, 64});
    CHECK(s.max_width == 96);
    CHECK(s.residual_width == 96);
    CHECK(s.head_dim(1) == 8);
    const vwt::dynamic_schedule narrow({2, 64, 4, 4, 256, 128, {}}, {32, 48});
    CHECK(narrow.residual_width == 64);  // the embedding's h columns still live in the buffer
}

TEST_CASE("stream variants reproduce the authors' solver") {
    // solve_hparams' compute_base_width / solve_geometric_factors_for_bottleneck_ratio with
    // constant_residual_stream, original_input_width, original_output_width and wide_unembedding,
    // and WidthVaryingConfig's width loop, run once with their code.
    struct variant {
        const char* name;
        vwt::stream_dims stream;
        vwt::schedule_spec spec;
        int base;
        std::vector<int> widths;
    };
    const auto d200 = vwt::presets::dense_200m;
    auto explicit_09 = d200;
    explicit_09.kind = vwt::shape::geometric;
    explicit_09.expansion = 0.9;
    auto arithmetic = d200;
    arithmetic.kind = vwt::shape::arithmetic;
    arithmetic.delta = -0.05;
    auto asymmetric = d200;
    asymmetric.symmetric = false;
    auto tiny = small(8, 256, 6, 0.25);
    const vwt::stream_dims fixed{true, true, true, false}, narrow_in{false, false, true, false},
        narrow_out{false, true, false, false}, narrow_both{false, false, false, false}, wide{false, true, false, true},
        wide_narrow_in{false, false, false, true};
    const std::vector<variant> variants = {
        {"constant residual", fixed, d200, 1335, {1344, 1120, 928, 800, 672, 544, 448, 384, 320, 288, 224, 192, 320, 512, 832, 1344}},
        {"original_input_width false", narrow_in, d200, 925,
         {928, 800, 704, 608, 512, 448, 384, 352, 288, 256, 224, 192, 288, 416, 640, 928}},
        {"original_output_width false", narrow_out, d200, 924,
         {928, 800, 704, 608, 512, 448, 384, 352, 288, 256, 224, 192, 288, 416, 608, 928}},
        {"both false", narrow_both, d200, 834, {832, 736, 640, 544, 480, 416, 384, 320, 288, 256, 224, 192, 288, 416, 576, 832}},
        {"wide_unembedding (x: the widest is w_L)", wide, d200, 924,
         {928, 800, 704, 608, 512, 448, 384, 352, 288, 256, 224, 192, 288, 416, 608, 928}},
        {"wide_unembedding, narrow input", wide_narrow_in, d200, 834,
         {832, 736, 640, 544, 480, 416, 384, 320, 288, 256, 224, 192, 288, 416, 576, 832}},
        {"constant residual, explicit expansion 0.9 (legacy solve)", fixed, explicit_09, 1034,
         {1024, 928, 832, 768, 672, 608, 544, 480, 448, 416, 352, 320, 448, 576, 768, 1024}},
        {"constant residual, arithmetic", fixed, arithmetic, 862,
         {864, 832, 768, 736, 704, 640, 608, 576, 512, 480, 416, 384, 512, 640, 736, 864}},
        {"original_output_width false, explicit expansion 0.9", narrow_out, explicit_09, 864,
         {864, 768, 704, 640, 576, 512, 448, 416, 384, 320, 288, 256, 352, 480, 640, 864}},
        {"wide_unembedding, asymmetric (the widest is w_1)", wide, asymmetric, 1024,
         {1024, 864, 768, 640, 544, 480, 416, 352, 288, 256, 224, 192, 224, 256, 288, 352}},
        {"original_output_width false, asymmetric", narrow_out, asymmetric, 1588,
         {1600, 1312, 1088, 896, 736, 608, 512, 416, 352, 288, 224, 192, 224, 288, 352, 416}},
        {"constant residual, asymmetric", fixed, asymmetric, 1801,
         {1792, 1472, 1184, 992, 800, 640, 544, 448, 352, 288, 224, 192, 224, 288, 352, 448}},
        {"small constant residual", fixed, tiny, 504, {504, 336, 224, 144, 96, 64, 176, 504}},
        {"small wide_unembedding, narrow input", wide_narrow_in, tiny, 414, {416, 288, 200, 136, 96, 64, 160, 416}},
    };
    for (auto v : variants) {
        CAPTURE(v.name);
        v.spec.dims.stream = v.stream;
        CHECK(vwt::solve_plan(v.spec).base_width == v.base);
        CHECK(widths_of(vwt::make_schedule(v.spec)) == v.widths);
    }
}

TEST_CASE("stream variants: the parameter count the solver matches, the tensors a checkpoint holds") {
    auto spec = small(8, 256, 6, 0.25);
    SECTION("constant residual: K h w_i per layer, within rounding of the uniform model") {
        spec.dims.stream.fixed_width = true;
        const auto s = vwt::make_schedule(spec);
        const auto r = vwt::compare_with_uniform(s);
        CHECK(r.model.params.matched == Approx(r.uniform.params.matched).epsilon(0.02));
        long long layers = 0;
        for (int w : s.widths) layers += 16LL * 256 * w;
        CHECK(r.model.params.matched == Approx(2.0 * 256 * 256 + static_cast<double>(layers)));
        // every tensor of layer i reads or writes h columns; norms of size h; ln_f of size h
        const auto lp = vwt::layer_param_count(s, 3);
        CHECK(lp.attention == 256LL * 3 * s.width(3) + s.width(3) * 256LL);
        CHECK(lp.mlp == 256LL * 8 * s.width(3) + 4LL * s.width(3) * 256);
        CHECK(lp.norms == 2 * 256);
        CHECK(r.model.params.final_norm == 256);
    }
    SECTION("narrow input and wide output: the embeddings' widths") {
        spec.dims.stream = {false, false, false, true};
        spec.symmetric = false;
        const auto s = vwt::make_schedule(spec);
        const auto r = vwt::account(s);
        CHECK(r.params.embedding == 256LL * s.width(0));
        CHECK(r.params.head == 256LL * s.max_width);
        CHECK(r.params.final_norm == s.width(7));
    }
    SECTION("a model's accounting counts exactly the tensors of its layout, the learned resizes too") {
        spec.dims.stream = {false, false, false, true};
        spec.symmetric = false;
        for (auto resize : {vwt::resize_method::move_up, vwt::resize_method::linear, vwt::resize_method::interpolate}) {
            auto c = vwt::model_config::mup(vwt::make_schedule(spec));
            c.resize = resize;
            CAPTURE(vwt::resize_method_name(resize));
            const auto r = vwt::account(c);
            CHECK(r.params.total() == vwt::parameter_layout(c).size());
            const auto widened = r.flops_per_token - vwt::account(c.schedule).flops_per_token;
            if (resize == vwt::resize_method::move_up) CHECK(widened == 0);
            else CHECK(widened > 0);  // the projections' products
            CHECK((r.params.resize > 0) == (resize == vwt::resize_method::linear));
        }
    }
    SECTION("the authors' combinations only") {
        spec.dims.stream = {true, false, true, false};
        CHECK_THROWS_WITH(vwt::make_schedule(spec), Catch::Matchers::Contains("fixed_residual_width needs"));
        spec.dims.stream = {false, true, true, true};
        CHECK_THROWS_WITH(vwt::make_schedule(spec), Catch::Matchers::Contains("wide_unembedding needs original_output_width false"));
    }
}
