// Conan's test of the vwt package: write a small random model directory, load it back and
// generate a few tokens from it.
#include <cstdio>
#include <exception>
#include <vector>

#include <vwt/vwt.hpp>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: test_package MODEL_DIR\n");
        return 2;
    }
    try {
        using backend = vwt::cpu::backend<float>;
        const auto config = vwt::model_config::mup(vwt::make_schedule(vwt::presets::tiny_l6));  // vocabulary 258: bytes and two specials
        std::vector<float> params;
        vwt::initialize_parameters(config, vwt::parameter_layout(config), 1, params);
        vwt::io::save_model_dir(argv[1], config, params);
        const backend::context ctx{.threads = 2};
        const auto m = vwt::io::load_model<backend>(argv[1], ctx);
        vwt::session<vwt::model<backend>> session(m, ctx, 64);
        vwt::generation_options opt;
        opt.max_new_tokens = 8;
        opt.sampling = {.temperature = 0.8, .top_k = 40};
        const vwt::io::byte_tokenizer tok(m.vocab());
        const auto out = vwt::generate(ctx, session, tok.encode("vwt"), opt);
        std::printf("vwt %s: loaded %s (widths", vwt::version_string, argv[1]);
        for (int w : m.schedule().widths) std::printf(" %d", w);
        std::printf("), generated %zu tokens\n", out.size());
        return out.size() == 8 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "test_package: %s\n", e.what());
        return 1;
    }
}
