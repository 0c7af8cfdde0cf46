// Every invalid schedule request ends in a vwt::error whose message says what was wrong.
#include <catch2/catch.hpp>

#include <vwt/vwt.hpp>

using Catch::Matchers::Contains;

namespace {
vwt::model_dims dims(int layers) { return {layers, 64, 4, 4, 256, 128, {}}; }
}  // namespace

TEST_CASE("explicit widths are validated") {
    CHECK_THROWS_WITH(vwt::dynamic_schedule(dims(2), {64, 70}),
                      Contains("width 70 of layer 2 is not divisible by 4 heads"));
    CHECK_THROWS_WITH(vwt::dynamic_schedule(dims(2), {64, 0}), Contains("width of layer 2 is 0, not positive"));
    CHECK_THROWS_WITH(vwt::dynamic_schedule(dims(2), {64, -8}), Contains("width of layer 2 is -8"));
    CHECK_THROWS_WITH(vwt::dynamic_schedule(dims(2), {64, 36}), Contains("head dim 9 of layer 2 is odd"));
    CHECK_THROWS_WITH(vwt::dynamic_schedule(dims(3), {64, 64}), Contains("dims say 3 layers but 2 widths"));
    CHECK_THROWS_AS(vwt::dynamic_schedule(dims(2), {64, 70}), vwt::error);
}

TEST_CASE("model dimensions are validated") {
    auto d = dims(2);
    d.kv_heads = 3;
    CHECK_THROWS_WITH(vwt::dynamic_schedule(d, {64, 64}), Contains("kv heads (3) must be positive and divide heads (4)"));
    d = dims(2);
    d.heads = 0;
    CHECK_THROWS_WITH(vwt::dynamic_schedule(d, {64, 64}), Contains("heads must be in 1..4096, got 0"));
    d = dims(2);
    d.vocab = 0;
    CHECK_THROWS_WITH(vwt::dynamic_schedule(d, {64, 64}), Contains("vocab must be in 1..16777216, got 0"));
    d = dims(2);
    d.moe = {8, 9, 32};
    CHECK_THROWS_WITH(vwt::dynamic_schedule(d, {64, 64}), Contains("experts (8) in 0..4096, 0 < experts_per_token (9) <= experts"));
}

TEST_CASE("generator requests are validated") {
    auto s = vwt::presets::tiny_l8;
    SECTION("turning layer out of range") {
        s.turn = 9;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("turning layer 9 is out of range 1..8 for 8 layers"));
        s.turn = -1;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("turning layer -1 is out of range"));
        s.turn = 8;
        s.duplicate_peak = true;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("out of range 1..7 for 8 layers with a duplicated peak"));
    }
    SECTION("bottleneck ratio at or above 1 for an x shape") {
        s.bottleneck = 1.0;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("bottleneck ratio must be in (0, 1)"));
        s.bottleneck = 0.0;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("bottleneck ratio must be in (0, 1)"));
    }
    SECTION("no solution") {
        // One layer cannot narrow toward a turning layer: no factor reaches the bottleneck.
        s.dims.layers = 1;
        s.turn = 1;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("no geometric factors reach bottleneck ratio"));
    }
    SECTION("quantisation that leaves a width not divisible by the heads") {
        s.quantize = 6;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("is not divisible by 4 heads"));
    }
    SECTION("non-positive quantisation") {
        s.quantize = 0;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("quantize_to must be positive"));
    }
    SECTION("geometric and arithmetic need their factors") {
        s.kind = vwt::shape::geometric;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("needs an expansion or a reduction factor"));
        s.expansion = -1.0;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("geometric factors must be positive"));
        s.kind = vwt::shape::arithmetic;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("needs delta or delta_neg"));
    }
    SECTION("an arithmetic progression that reaches zero") {
        s.kind = vwt::shape::arithmetic;
        s.delta = -0.3;
        CHECK_THROWS_WITH(vwt::make_schedule(s), Contains("not positive"));
    }
    SECTION("a fixed-size schedule of the wrong length") {
        CHECK_THROWS_WITH(vwt::make_schedule<7>(s), Contains("spec has 8 layers, the schedule type 7"));
    }
}
