// Sampling against brute-force probabilities, the generation loop (stop tokens, limits,
// streaming, cancelling, seeds), concurrent sessions over one model, and bad requests.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <thread>

#include <vwt/vwt.hpp>

using Catch::Matchers::Contains;

namespace {
using backend = vwt::cpu::backend<float>;

vwt::model<backend> tiny_model(std::uint64_t seed = 3) {
    auto c = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), seed, p);
    return vwt::model<backend>(std::move(c), p);
}
}  // namespace

TEST_CASE("sampling: greedy, top-k, top-p and temperature follow their definitions") {
    const std::vector<float> logits{1.0f, 3.0f, 2.0f, 0.5f, 2.9f};
    std::mt19937_64 rng(1);
    CHECK(vwt::sample_token<float>(logits, {0.0, 0, 1.0}, rng) == 1);
    CHECK(vwt::sample_token<float>(logits, {1.0, 1, 1.0}, rng) == 1);  // top-1 is greedy
    // Empirical frequencies against the softmax restricted to the kept set.
    const auto frequencies = [&](vwt::sampling_options o) {
        std::map<int, double> f;
        std::mt19937_64 r(42);
        const int n = 40000;
        for (int i = 0; i < n; ++i) f[vwt::sample_token<float>(logits, o, r)] += 1.0 / n;
        return f;
    };
    const auto softmax = [&](std::vector<int> keep, double t) {
        std::map<int, double> p;
        double z = 0;
        for (int k : keep) z += std::exp(logits[static_cast<std::size_t>(k)] / t);
        for (int k : keep) p[k] = std::exp(logits[static_cast<std::size_t>(k)] / t) / z;
        return p;
    };
    for (const auto& [o, keep] : std::vector<std::pair<vwt::sampling_options, std::vector<int>>>{
             {{1.0, 0, 1.0}, {0, 1, 2, 3, 4}},
             {{0.5, 0, 1.0}, {0, 1, 2, 3, 4}},
             {{1.0, 3, 1.0}, {1, 4, 2}},
             {{1.0, 0, 0.6}, {1, 4}},  // p(1) = 0.39, p(1) + p(4) = 0.74 >= 0.6
         }) {
        const auto f = frequencies(o);
        const auto p = softmax(keep, o.temperature);
        for (const auto& [k, pk] : p) {
            const double fk = f.count(k) ? f.at(k) : 0.0;
            CHECK(fk == Approx(pk).margin(0.01));
        }
        for (const auto& kv : f) CHECK(p.count(kv.first) == 1);  // nothing outside the kept set
    }
    CHECK_THROWS_WITH(vwt::sample_token<float>(logits, {-1.0, 0, 1.0}, rng), Contains("temperature must be >= 0"));
    CHECK_THROWS_WITH(vwt::sample_token<float>(logits, {1.0, 0, 0.0}, rng), Contains("top-p must be in (0, 1]"));
    CHECK_THROWS_WITH(vwt::sample_token<float>(logits, {1.0, -2, 1.0}, rng), Contains("top-k must be >= 0"));
}

TEST_CASE("sampling: min-p and the repetition penalty follow their definitions") {
    // The references: softmax over the kept tokens of logits adjusted by hand.
    const auto frequencies = [](const std::vector<float>& logits, vwt::sampling_options o, std::vector<int> history) {
        std::map<int, double> f;
        std::mt19937_64 r(7);
        const int n = 40000;
        for (int i = 0; i < n; ++i) f[vwt::sample_token<float>(logits, o, r, history)] += 1.0 / n;
        return f;
    };
    const auto check_softmax = [](const std::map<int, double>& f, const std::map<int, double>& kept_logits) {
        double z = 0;
        for (const auto& kv : kept_logits) z += std::exp(kv.second);
        for (const auto& [k, l] : kept_logits) CHECK((f.count(k) ? f.at(k) : 0.0) == Approx(std::exp(l) / z).margin(0.01));
        for (const auto& kv : f) CHECK(kept_logits.count(kv.first) == 1);
    };
    const std::vector<float> logits{1.0f, 3.0f, 2.0f, 0.5f, 2.9f};
    std::mt19937_64 rng(1);
    vwt::sampling_options min_p;
    min_p.min_p = 0.5;  // p_i >= p_max / 2  <=>  l_i >= 3 - ln 2 = 2.31: tokens 1 and 4
    check_softmax(frequencies(logits, min_p, {}), {{1, 3.0}, {4, 2.9}});
    min_p.min_p = 0.3;  // l_i >= 3 - ln(1/0.3) = 1.80: token 2 joins
    check_softmax(frequencies(logits, min_p, {}), {{1, 3.0}, {4, 2.9}, {2, 2.0}});

    vwt::sampling_options penalty;
    penalty.repetition_penalty = 2.0;  // positive logits halve, negative ones double
    const std::vector<float> signs{1.0f, 3.0f, 2.0f, -0.5f, 2.9f};
    check_softmax(frequencies(signs, penalty, {1, 3, 1}), {{0, 1.0}, {1, 1.5}, {2, 2.0}, {3, -1.0}, {4, 2.9}});
    penalty.temperature = 0;  // greedy sees the penalty too
    CHECK(vwt::sample_token<float>(signs, penalty, rng, std::vector<int>{1}) == 4);
    CHECK(vwt::sample_token<float>(signs, penalty, rng, std::vector<int>{4}) == 1);
    penalty.repetition_window = 2;  // only the last two tokens count
    CHECK(vwt::sample_token<float>(signs, penalty, rng, std::vector<int>{1, 0, 0}) == 1);
    penalty.repetition_window = 3;
    CHECK(vwt::sample_token<float>(signs, penalty, rng, std::vector<int>{1, 0, 0}) == 4);
    // a sampler forgets the penalty between draws
    vwt::sampler reused(5);
    CHECK(reused.sample<float>(signs, penalty, rng, std::vector<int>{1}) == 4);
    CHECK(reused.sample<float>(signs, penalty, rng, {}) == 1);

    vwt::sampling_options bad;
    bad.min_p = 1.5;
    CHECK_THROWS_WITH(vwt::sample_token<float>(logits, bad, rng), Contains("min-p must be in [0, 1]"));
    bad = {};
    bad.repetition_penalty = 0;
    CHECK_THROWS_WITH(vwt::sample_token<float>(logits, bad, rng), Contains("repetition penalty must be > 0"));
    bad = {};
    bad.repetition_penalty = 1.1;
    CHECK_THROWS_WITH(vwt::sample_token<float>(logits, bad, rng, std::vector<int>{9}), Contains("history token 9 outside"));
}

TEST_CASE("generation: greedy equals argmax of the full forward, seeds reproduce, stops stop") {
    const auto m = tiny_model();
    const std::vector<int> prompt{72, 101, 108, 108, 111};
    vwt::generation_options o;
    o.max_new_tokens = 8;
    o.sampling.temperature = 0;
    vwt::session<vwt::model<backend>> session(m, {1}, 32);
    const auto out = vwt::generate({1}, session, prompt, o);
    REQUIRE(out.size() == 8);
    CHECK(session.length() == 5 + 7);  // the last token is returned but not fed back
    // Each greedy token is the argmax of a full recomputation over prompt + tokens so far.
    std::vector<int> seq = prompt;
    for (int t : out) {
        auto c = m.make_cache(32);
        const vwt::sequence_input<backend> in{&c, seq};
        const auto logits = m.forward({1}, std::span(&in, 1));
        CHECK(t == std::max_element(logits.begin(), logits.end()) - logits.begin());
        seq.push_back(t);
    }
    // Sampling with a seed is reproducible; another seed gives another text.
    o.sampling = {1.0, 0, 1.0};
    o.max_new_tokens = 20;
    o.seed = 9;
    using session_t = vwt::session<vwt::model<backend>>;
    session_t s1(m, {1}, 32), s2(m, {2}, 32), s3(m, {1}, 32);
    const auto a = vwt::generate({1}, s1, prompt, o);
    const auto b = vwt::generate({2}, s2, prompt, o);
    o.seed = 10;
    const auto c = vwt::generate({1}, s3, prompt, o);
    CHECK(a == b);
    CHECK(a != c);
    // A stop token ends generation (and is returned); the callback sees every token and can cancel.
    o.seed = 9;
    o.stop_tokens = {a[3]};
    std::vector<int> streamed;
    o.on_token = [&](int t) { streamed.push_back(t); return true; };
    session_t s4(m, {1}, 32);
    const auto stopped = vwt::generate({1}, s4, prompt, o);
    CHECK(stopped.size() <= 4);
    CHECK(stopped.back() == a[3]);
    CHECK(streamed == stopped);
    o.stop_tokens.clear();
    o.on_token = [&](int) { return false; };
    session_t s5(m, {1}, 32);
    CHECK(vwt::generate({1}, s5, prompt, o).size() == 1);
    // A prompt longer than a session's chunk is fed in pieces, with the same result.
    session_t whole(m, {1}, 32), chunked(m, {1}, 32, 2);
    o.on_token = {};
    o.seed = 3;
    CHECK(vwt::generate({1}, whole, prompt, o) == vwt::generate({1}, chunked, prompt, o));
}

TEST_CASE("several sessions decode concurrently over one shared model") {
    const auto m = tiny_model();
    vwt::generation_options o;
    o.max_new_tokens = 16;
    const auto run = [&](std::uint64_t seed) {
        vwt::session<vwt::model<backend>> s(m, {1}, 64);
        auto opt = o;
        opt.seed = seed;
        return vwt::generate({1}, s, std::vector<int>{1, 2, 3}, opt);
    };
    std::vector<std::vector<int>> sequential, concurrent(4);
    for (std::uint64_t s = 0; s < 4; ++s) sequential.push_back(run(s));
    std::vector<std::thread> threads;
    for (std::uint64_t s = 0; s < 4; ++s) threads.emplace_back([&, s] { concurrent[s] = run(s); });
    for (auto& t : threads) t.join();
    CHECK(concurrent == sequential);
}

TEST_CASE("bad requests are errors, not crashes") {
    const auto m = tiny_model();
    auto cache = m.make_cache(16);
    const std::vector<int> bad{1, 258};
    vwt::sequence_input<backend> in{&cache, bad};
    CHECK_THROWS_WITH(m.forward({1}, std::span(&in, 1)), Contains("token id 258 at position 1") && Contains("[0, 258)"));
    const std::vector<int> negative{-1};
    in.tokens = negative;
    CHECK_THROWS_WITH(m.forward({1}, std::span(&in, 1)), Contains("token id -1"));
    in.tokens = {};
    CHECK_THROWS_WITH(m.forward({1}, std::span(&in, 1)), Contains("has no tokens"));
    const std::vector<int> many(17, 5);
    in.tokens = many;
    CHECK_THROWS_WITH(m.forward({1}, std::span(&in, 1)), Contains("beyond its KV cache capacity 16"));
    CHECK(cache.length() == 0);  // a rejected call leaves the cache as it was
    const std::vector<int> ok{1, 2};
    const vwt::sequence_input<backend> twice[] = {{&cache, ok}, {&cache, ok}};
    CHECK_THROWS_WITH(m.forward({1}, twice), Contains("share a KV cache"));
    CHECK_THROWS_WITH(m.make_cache(257), Contains("KV cache capacity 257 must be in 1..256"));
    vwt::generation_options o;
    o.max_new_tokens = 15;
    vwt::session<vwt::model<backend>> s(m, {1}, 16);
    CHECK_THROWS_WITH(vwt::generate({1}, s, ok, o), Contains("need 17 positions, beyond the session's capacity of 16"));
    CHECK_THROWS_WITH(vwt::generate({1}, s, std::vector<int>{}, o), Contains("prompt is empty"));
    CHECK_THROWS_WITH(vwt::io::byte_tokenizer(258).decode({300}), Contains("id 300 is outside the vocabulary"));
    auto wrong = m.config();
    CHECK_THROWS_WITH(vwt::model<backend>(wrong, std::vector<float>(10)), Contains("10 parameters given, the schedule needs"));
    // A workspace too small for the call is an error, not an overrun.
    auto ws = m.make_workspace({1}, 2, 16);
    auto c6 = m.make_cache(16);
    const std::vector<int> three{1, 2, 3};
    const vwt::sequence_input<backend> big{&c6, three};
    CHECK_THROWS_WITH(m.forward({1}, ws, std::span(&big, 1)), Contains("3 tokens in one call, beyond the workspace's 2 rows"));
}

TEST_CASE("the zero resize zeroes grown columns only; the resize to the head is move_up for both") {
    // No layer grows beyond the stream, and the last layer (32) is narrower than h (64): the two
    // methods are the same function, because the final resize to h restores [32, 64) by move_up
    // in a zero-resize model too (semantics.md section 2, step 3).
    auto c = vwt::model_config::mup(vwt::dynamic_schedule({3, 64, 4, 4, 258, 64, {}}, {64, 48, 32}));
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 5, p);
    const std::vector<int> t{1, 2, 3};
    const auto logits = [&](const vwt::model_config& config) {
        const vwt::model<backend> m(config, p);
        auto cache = m.make_cache(8);
        const vwt::sequence_input<backend> in{&cache, t};
        return m.forward({1}, std::span(&in, 1), vwt::logits_mode::all);
    };
    auto zero = c;
    zero.resize = vwt::resize_method::zero;
    CHECK(logits(zero) == logits(c));
    // A layer wider than the stream (32 -> 64) sees zeros instead of the older values: they differ.
    // (Their values are checked against the PyTorch reference in model_parity.)
    c.schedule = zero.schedule = vwt::dynamic_schedule({3, 64, 4, 4, 258, 64, {}}, {64, 32, 64});
    p.clear();
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 5, p);
    CHECK(logits(zero) != logits(c));
}

TEST_CASE("the interleaved c_fc layout computes the same model as the split one") {
    auto c = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));
    const vwt::parameter_layout layout(c);
    std::vector<float> split;
    vwt::initialize_parameters(c, layout, 11, split);
    auto inter = split;
    for (int i = 0; i < c.schedule.layers(); ++i) {
        const auto& t = layout.at("transformer.h." + std::to_string(i) + ".mlp_block.c_fc.weight");
        const std::int64_t w = t.shape[1], half = t.shape[0] / 2;
        for (std::int64_t j = 0; j < half; ++j)
            for (std::int64_t k = 0; k < w; ++k) {
                inter[static_cast<std::size_t>(t.offset + (2 * j) * w + k)] = split[static_cast<std::size_t>(t.offset + j * w + k)];
                inter[static_cast<std::size_t>(t.offset + (2 * j + 1) * w + k)] =
                    split[static_cast<std::size_t>(t.offset + (half + j) * w + k)];
            }
    }
    const vwt::model<backend> a(c, split);
    auto ci = c;
    ci.mlp = vwt::swiglu_layout::interleaved;
    const vwt::model<backend> b(ci, inter);
    const vwt::model<backend> wrong(ci, split);
    const std::vector<int> t{9, 8, 7, 6};
    auto c1 = a.make_cache(8), c2 = b.make_cache(8), c3 = wrong.make_cache(8);
    const vwt::sequence_input<backend> i1{&c1, t}, i2{&c2, t}, i3{&c3, t};
    const auto la = a.forward({1}, std::span(&i1, 1)), lb = b.forward({1}, std::span(&i2, 1));
    // Equal up to rounding (the split halves take Eigen's vectorised exp, the strided ones not).
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < la.size(); ++i) {
        err = std::max(err, static_cast<double>(std::abs(la[i] - lb[i])));
        scale = std::max(scale, static_cast<double>(std::abs(la[i])));
    }
    CHECK(err / scale < 1e-5);
    const auto lw = wrong.forward({1}, std::span(&i3, 1));
    double wrong_err = 0;
    for (std::size_t i = 0; i < la.size(); ++i) wrong_err = std::max(wrong_err, static_cast<double>(std::abs(la[i] - lw[i])));
    CHECK(wrong_err / scale > 1e-3);  // the wrong layout is 100x further off
}
