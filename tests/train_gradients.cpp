// The training backward pass against central finite differences, in double precision, for
// x-shaped, diamond, uniform and GQA models, both parametrisations, both resize methods and the
// stream variants (constant residual, narrow input/output, wide unembedding); and
// the training forward's loss against the inference model's logits.
#include <catch2/catch.hpp>

#include <vwt/train/step.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

namespace {

struct grad_case {
    const char* name;
    vwt::dynamic_schedule schedule;
    bool standard;
    vwt::resize_method resize;
};

std::vector<grad_case> cases() {
    const auto dims = [](int L, int h, int H, int Hkv) { return vwt::model_dims{L, h, H, H ? Hkv : 0, 13, 16, {}}; };
    const auto variant = [](vwt::model_dims d, vwt::stream_dims s) { return d.stream = s, d; };
    return {
        {"x shape, muP, move_up", vwt::dynamic_schedule(dims(4, 16, 2, 2), {24, 8, 12, 24}), false, vwt::resize_method::move_up},
        {"narrow ends (w_1, w_L < h), muP, move_up", vwt::dynamic_schedule(dims(3, 16, 2, 2), {12, 24, 8}), false,
         vwt::resize_method::move_up},
        {"narrow ends, zero resize", vwt::dynamic_schedule(dims(3, 16, 2, 2), {12, 24, 8}), false, vwt::resize_method::zero},
        {"uniform, standard (Llama-style)", vwt::dynamic_schedule(dims(2, 16, 2, 2), {16, 16}), true, vwt::resize_method::move_up},
        {"x shape, GQA 4/2", vwt::dynamic_schedule(dims(3, 16, 4, 2), {24, 8, 16}), false, vwt::resize_method::move_up},
        // the stream variants (the authors' config flags)
        {"constant residual (fixed_residual_width)", vwt::dynamic_schedule(variant(dims(3, 16, 2, 2), {true, true, true, false}), {24, 8, 12}),
         false, vwt::resize_method::move_up},
        {"constant residual, standard, GQA 4/2", vwt::dynamic_schedule(variant(dims(2, 16, 4, 2), {true, true, true, false}), {8, 24}), true,
         vwt::resize_method::move_up},
        {"narrow input and output, zero resize", vwt::dynamic_schedule(variant(dims(3, 16, 2, 2), {false, false, false, false}), {12, 24, 8}),
         false, vwt::resize_method::zero},
        {"wide unembedding", vwt::dynamic_schedule(variant(dims(3, 16, 2, 2), {false, true, false, true}), {24, 12, 8}), false,
         vwt::resize_method::move_up},
        // the projecting resizes: a fixed interpolation and a learned map, into layers and the head
        {"interpolate resize", vwt::dynamic_schedule(dims(4, 16, 2, 2), {24, 8, 12, 20}), false, vwt::resize_method::interpolate},
        {"interpolate resize, narrow input, wide unembedding",
         vwt::dynamic_schedule(variant(dims(3, 16, 2, 2), {false, false, false, true}), {8, 24, 12}), false, vwt::resize_method::interpolate},
        {"linear resize", vwt::dynamic_schedule(dims(4, 16, 2, 2), {24, 8, 12, 8}), false, vwt::resize_method::linear},
        {"linear resize, standard, narrow input and output",
         vwt::dynamic_schedule(variant(dims(3, 16, 2, 2), {false, false, false, false}), {8, 24, 12}), true, vwt::resize_method::linear},
        {"gaussian resize", vwt::dynamic_schedule(dims(4, 16, 2, 2), {24, 8, 12, 20}), false, vwt::resize_method::gaussian},
        {"gaussian resize, narrow input, wide unembedding",
         vwt::dynamic_schedule(variant(dims(3, 16, 2, 2), {false, false, false, true}), {8, 24, 12}), false, vwt::resize_method::gaussian},
    };
}

// MoE ><formers (every MLP a mixture of experts, semantics.md section 6): top-2 of 4 experts and
// top-1 of 3 with GQA. Their objective includes the routers' auxiliary loss.
std::vector<grad_case> moe_cases() {
    const auto dims = [](int L, int h, int H, int Hkv, vwt::moe_dims m) { return vwt::model_dims{L, h, H, Hkv, 13, 16, m}; };
    return {
        {"MoE x shape, top-2 of 4", vwt::dynamic_schedule(dims(3, 16, 2, 2, {4, 2, 12}), {24, 8, 16}), false, vwt::resize_method::move_up},
        {"MoE x shape, top-1 of 3, GQA 4/2", vwt::dynamic_schedule(dims(3, 16, 4, 2, {3, 1, 8}), {16, 8, 24}), false,
         vwt::resize_method::move_up},
    };
}

vwt::model_config config_of(const grad_case& g) {
    auto c = g.standard ? vwt::model_config::standard(g.schedule) : vwt::model_config::mup(g.schedule);
    c.resize = g.resize;
    c.router_aux_loss_coef = 0.3;  // larger than the paper's 0.01, so that its gradient shows
    return c;
}

std::vector<double> random_params(const vwt::model_config& c, const vwt::parameter_layout& l, std::uint64_t seed) {
    std::vector<double> p;
    vwt::initialize_parameters(c, l, seed, p);
    // Norm gains away from 1 and larger weights, so every path carries a visible gradient.
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n(0.0, 0.3);
    for (const auto& t : l.tensors())
        for (std::int64_t i = 0; i < t.numel(); ++i) {
            auto& v = p[static_cast<std::size_t>(t.offset + i)];
            v = t.role == vwt::tensor_role::norm ? 1.0 + n(rng) : v * 3.0;
        }
    return p;
}

// The loss and gradient of a batch on policy B, with parameters given on the host.
template <class B>
struct probe {
    vwt::model_config config;
    int sequences;
    vwt::index_t length;
    typename B::context ctx{};

    probe(vwt::model_config c, int seqs, vwt::index_t len, int threads = 1) : config(std::move(c)), sequences(seqs), length(len) {
        if constexpr (requires { ctx.threads; }) ctx.threads = threads;
    }
    // Returns the objective: the mean loss, plus for an MoE model router_aux_loss_coef times the
    // layers' auxiliary losses; `grad` receives its gradient (added to zeros).
    double operator()(const std::vector<double>& params, const std::vector<int>& tokens, const std::vector<int>& targets,
                      std::vector<double>* grad = nullptr, std::vector<double>* aux = nullptr) const {
        using T = typename B::compute_type;
        const std::vector<T> p(params.begin(), params.end());
        const vwt::model<B> m(config, p, ctx);
        vwt::train::step_workspace<B> ws(ctx, m, sequences, length);
        typename B::template buffer<T> g(m.layout().size());
        const std::vector<T> zeros(p.size(), T(0));
        B::upload(ctx, std::span<const T>(zeros), g.view());
        double loss = vwt::train::loss_and_gradient(ctx, m, vwt::train::token_batch{tokens, targets, sequences}, ws, m.bind(g.view()));
        if (aux) aux->assign(ws.host_aux_losses().begin(), ws.host_aux_losses().end());
        for (double a : ws.host_aux_losses()) loss += config.router_aux_loss_coef * a;
        if (grad) {
            std::vector<T> host(p.size());
            B::download(ctx, vwt::vector_view<const T, typename B::memory>(g.view()), std::span<T>(host));
            grad->assign(host.begin(), host.end());
        }
        return loss;
    }
};

}  // namespace

#define GRADIENT_POLICIES vwt::cpu::backend<double>, vwt::reference::backend<double>

TEMPLATE_TEST_CASE("backward matches central finite differences for every tensor", "", GRADIENT_POLICIES) {
    const std::vector<int> tokens{1, 5, 2, 12, 7, 3}, targets{5, 2, 12, 7, 3, 0};
    auto all = cases();
    for (auto& g : moe_cases()) all.push_back(g);
    for (const auto& g : all) {
        CAPTURE(g.name);
        const auto c = config_of(g);
        const vwt::parameter_layout layout(c);
        auto p = random_params(c, layout, 3);
        const probe<TestType> loss_of(c, 1, 6);
        std::vector<double> grad;
        loss_of(p, tokens, targets, &grad);
        std::mt19937_64 rng(11);
        for (const auto& t : layout.tensors()) {
            CAPTURE(t.name);
            double worst = 0, largest = 0;
            for (int k = 0; k < 6; ++k) {
                const auto i = static_cast<std::size_t>(t.offset + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(t.numel())));
                const double keep = p[i], step = 1e-5;
                p[i] = keep + step;
                const double up = loss_of(p, tokens, targets);
                p[i] = keep - step;
                const double down = loss_of(p, tokens, targets);
                p[i] = keep;
                const double fd = (up - down) / (2 * step);
                worst = std::max(worst, std::abs(fd - grad[i]));
                largest = std::max(largest, std::abs(fd));
            }
            CHECK(worst <= 1e-7 + 1e-5 * largest);
        }
        // Every tensor receives some gradient (no path silently cut).
        for (const auto& t : layout.tensors()) {
            double norm = 0;
            for (std::int64_t i = 0; i < t.numel(); ++i) norm += std::abs(grad[static_cast<std::size_t>(t.offset + i)]);
            CAPTURE(t.name);
            CHECK(norm > 0);
        }
    }
}

TEMPLATE_TEST_CASE("the training forward's loss equals cross-entropy of the inference logits", "", GRADIENT_POLICIES) {
    const std::vector<int> tokens{4, 4, 9, 1, 0, 11, 2}, targets{4, 9, 1, 0, 11, 2, 6};
    auto all = cases();
    for (auto& g : moe_cases()) all.push_back(g);
    for (const auto& g : all) {
        CAPTURE(g.name);
        auto c = config_of(g);
        c.router_aux_loss_coef = 0;  // the objective is the cross-entropy alone
        const vwt::parameter_layout layout(c);
        const auto p = random_params(c, layout, 5);
        const double loss = probe<TestType>(c, 1, 7)(p, tokens, targets);
        const vwt::model<TestType> m(c, p);
        auto cache = m.make_cache(16);
        const vwt::sequence_input<TestType> in{&cache, tokens};
        const auto logits = m.forward({}, std::span(&in, 1), vwt::logits_mode::all);
        double ce = 0;
        const int V = m.vocab();
        for (std::size_t t = 0; t < tokens.size(); ++t) {
            const double* row = logits.data() + t * static_cast<std::size_t>(V);
            double mx = row[0], z = 0;
            for (int v = 0; v < V; ++v) mx = std::max(mx, row[v]);
            for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
            ce += std::log(z) + mx - row[targets[t]];
        }
        CHECK(loss == Approx(ce / static_cast<double>(tokens.size())).epsilon(1e-12));
    }
}

TEST_CASE("validation loss by the inference forward equals the training loss") {
    using B = vwt::cpu::backend<double>;
    const auto g = cases().front();
    const auto c = config_of(g);
    const vwt::parameter_layout layout(c);
    const auto p = random_params(c, layout, 8);
    std::vector<int> tokens(200);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>((i * 3) % 13);
    const vwt::train::window_loader data(tokens, 8, 0.5, 1, "mem");
    double expected = 0;
    std::vector<int> x, y;
    const probe<B> loss_of(c, 1, 8);
    for (std::size_t i = 0; i < data.validation_windows(); ++i) {
        data.validation_window(i, x, y);
        expected += loss_of(p, x, y);
    }
    expected /= static_cast<double>(data.validation_windows());
    const vwt::model<B> m(c, p);
    CHECK(vwt::train::validation_loss(B::context{1}, m, data) == Approx(expected).epsilon(1e-10));
}

TEMPLATE_TEST_CASE("a batch's gradient is the mean of its sequences' gradients, with any thread count", "", GRADIENT_POLICIES) {
    const std::vector<int> a{1, 5, 2, 12, 7, 3, 9, 4}, b{0, 0, 3, 8, 8, 1, 2, 10}, c3{11, 6, 6, 2, 5, 9, 12, 1};
    const auto shift = [](const std::vector<int>& t) {
        std::vector<int> y(t.begin() + 1, t.end());
        y.push_back(t.front());
        return y;
    };
    for (const auto& g : cases()) {
        // A gaussian resize draws per row of the batch (each sequence its own noise), not per
        // sequence alone: its batch is a different draw than its sequences one by one.
        if (g.resize == vwt::resize_method::gaussian) continue;
        CAPTURE(g.name);
        const auto c = config_of(g);
        const vwt::parameter_layout layout(c);
        const auto p = random_params(c, layout, 4);
        std::vector<double> expected(p.size(), 0.0), one;
        double expected_loss = 0;
        std::vector<int> tokens, targets;
        for (const auto* seq : {&a, &b, &c3}) {
            const auto y = shift(*seq);
            expected_loss += probe<TestType>(c, 1, 8)(p, *seq, y, &one) / 3;
            for (std::size_t i = 0; i < p.size(); ++i) expected[i] += one[i] / 3;
            tokens.insert(tokens.end(), seq->begin(), seq->end());
            targets.insert(targets.end(), y.begin(), y.end());
        }
        for (int threads : {1, 2, 3}) {
            CAPTURE(threads);
            std::vector<double> grad;
            const double loss = probe<TestType>(c, 3, 8, threads)(p, tokens, targets, &grad);
            CHECK(loss == Approx(expected_loss).epsilon(1e-12));
            double worst = 0, largest = 0;
            for (std::size_t i = 0; i < p.size(); ++i) {
                worst = std::max(worst, std::abs(grad[i] - expected[i]));
                largest = std::max(largest, std::abs(expected[i]));
            }
            CHECK(worst <= 1e-12 * largest);
        }
    }
}

TEST_CASE("a malformed batch is refused with a clear error") {
    using B = vwt::cpu::backend<double>;
    const auto g = cases().front();
    const auto c = config_of(g);
    const vwt::parameter_layout layout(c);
    const auto p = random_params(c, layout, 4);
    const std::vector<int> five{1, 2, 3, 4, 5};
    CHECK_THROWS_WITH(probe<B>(c, 2, 2)(p, five, five), Catch::Contains("2 non-empty sequences of 2 tokens"));
    const std::vector<int> bad{1, 2, 13, 4};
    CHECK_THROWS_WITH(probe<B>(c, 2, 2)(p, bad, bad), Catch::Contains("token or target id outside [0, 13)"));
    CHECK_THROWS_WITH(probe<B>(c, 1, 17)(p, five, five), Catch::Contains("exceed the context of 16"));
}
