// The same ><former on two backend policies: the CPU policy (Eigen) and the reference policy
// (plain loops in double, its own memory space). A session decodes without allocating; the
// reference run shows that nothing in the model reads policy memory directly.
#include <cstdio>

#include <vwt/vwt.hpp>

template <class B>
std::vector<int> greedy(const vwt::model_config& c, const std::vector<float>& host_params, typename B::context ctx) {
    const std::vector<typename B::weight_type> params(host_params.begin(), host_params.end());
    const vwt::model<B> m(c, params, ctx);                      // parameters uploaded into B's memory
    vwt::session<vwt::model<B>> session(m, ctx, /*capacity*/ 64);
    vwt::generation_options opt;
    opt.max_new_tokens = 16;
    opt.sampling.temperature = 0;                                 // greedy
    return vwt::generate(ctx, session, vwt::io::byte_tokenizer(m.vocab()).encode("Once"), opt);
}

int main() {
    auto config = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));
    std::vector<float> params;
    vwt::initialize_parameters(config, vwt::parameter_layout(config), /*seed*/ 1, params);
    const auto cpu = greedy<vwt::cpu::backend<float>>(config, params, {.threads = 2});
    const auto ref = greedy<vwt::reference::backend<double>>(config, params, {});
    std::printf("cpu:      ");
    for (int t : cpu) std::printf(" %d", t);
    std::printf("\nreference:");
    for (int t : ref) std::printf(" %d", t);
    std::printf("\n%s\n", cpu == ref ? "same greedy tokens on both policies" : "the policies disagree");
    return cpu == ref ? 0 : 1;
}
