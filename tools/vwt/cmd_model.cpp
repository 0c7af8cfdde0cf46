// `vwt init` (a random muP or standard model directory), `vwt generate` (streamed text from a
// prompt) and `vwt logits` (float32 logits of every position, for debugging and parity).
#include <algorithm>
#include <bit>
#include <chrono>
#include <iostream>
#include <map>

#include <vwt/vwt.hpp>

#include "commands.hpp"
#include "device_flags.hpp"
#include "model_text.hpp"
#include "schedule_flags.hpp"

namespace vwt::cli {

namespace {

io::dtype parse_dtype(const std::string& flag, const std::string& name) {
    static const std::map<std::string, io::dtype> types = {
        {"f32", io::dtype::f32}, {"f16", io::dtype::f16}, {"bf16", io::dtype::bf16}};
    const auto it = types.find(name);
    if (it == types.end()) detail::fail(flag, ": unknown dtype '", name, "' (f32, f16, bf16)");
    return it->second;
}

template <class B>
model<B> load(const std::string& dir, const typename B::context& ctx) {
    return io::load_model<B>(dir, ctx, [](const std::string& warning) { std::cerr << "vwt: warning: " << warning << '\n'; });
}

}  // namespace

void add_model_commands(CLI::App& app) {
    {
        struct options {
            schedule_flags schedule;
            std::uint64_t seed = 0;
            std::string out;
            std::string dtype = "f32", max_shard = "0";
            bool standard = false;
        };
        auto o = std::make_shared<options>();
        auto* cmd = app.add_subcommand("init", "write a randomly initialised model directory (config.json + model.safetensors)");
        o->schedule.add_to(*cmd);
        cmd->add_option("--seed", o->seed, "initialisation seed");
        cmd->add_option("--out", o->out, "model directory to write")->required();
        cmd->add_option("--dtype", o->dtype, "weight dtype: f32, f16, bf16");
        cmd->add_option("--max-shard-size", o->max_shard,
                        "split the weights into shards of at most this size (e.g. 2GB) with model.safetensors.index.json; 0: one file");
        cmd->add_flag("--standard", o->standard, "standard parametrisation (multipliers 1, 1/sqrt(d)) instead of muP");
        cmd->callback([o] {
            std::string name;
            const auto spec = o->schedule.spec(name);
            int base = 0;
            auto s = o->schedule.build(name, base);
            if (s.dims.vocab < 256) detail::fail("--vocab: the byte tokenizer needs at least 256 ids, got ", s.dims.vocab);
            auto c = o->schedule.model(std::move(s), o->standard);
            const parameter_layout layout(c);
            std::vector<float> params;
            initialize_parameters(c, layout, o->seed, params);
            io::save_model_dir(o->out, c, params, parse_dtype("--dtype", o->dtype), o->schedule.widths.empty() ? &spec : nullptr,
                               parse_shard_size("--max-shard-size", o->max_shard));
            std::cout << "wrote " << o->out << " (" << name << ", " << layout.size() << " parameters, widths";
            for (int w : c.schedule.widths) std::cout << ' ' << w;
            std::cout << ")\n";
        });
    }
    {
        struct options {
            std::string model, prompt;
            int max_new = 64, top_k = 0, repeat_last_n = 64;
            double temperature = 1.0, top_p = 1.0, min_p = 0.0, repeat_penalty = 1.0;
            std::uint64_t seed = 0;
            bool json = false;
            device_flags device;
        };
        auto o = std::make_shared<options>();
        auto* cmd = app.add_subcommand("generate", "stream text generated from a prompt");
        cmd->add_option("--model", o->model, model_dir_help)->required();
        cmd->add_option("--prompt", o->prompt, "prompt text (the model directory's tokenizer.json, else byte-level tokens)")->required();
        cmd->add_option("--max-new", o->max_new, "maximum new tokens");
        cmd->add_option("--temperature", o->temperature, "sampling temperature; 0 is greedy");
        cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (0: all)");
        cmd->add_option("--top-p", o->top_p, "keep the smallest set of probability >= p");
        cmd->add_option("--min-p", o->min_p, "then drop tokens less likely than this times the most likely one (0: off)");
        cmd->add_option("--repeat-penalty", o->repeat_penalty,
                        "divide positive logits (multiply negative ones) of the recent tokens by this (1: off)");
        cmd->add_option("--repeat-last-n", o->repeat_last_n, "how many recent tokens (prompt included) the penalty reads");
        cmd->add_option("--seed", o->seed, "sampling seed");
        cmd->add_flag("--json", o->json, "print one JSON object (prompt, text, token ids, speed) instead of streaming the text");
        o->device.add_to(*cmd);
        o->device.add_weights_to(*cmd);
        o->device.add_kv_to(*cmd);
        cmd->callback([o] {
            o->model = model_dir(o->model);  // a run's LATEST checkpoint: its weights and its tokenizer.json
            o->device.run_inference([&]<class B>(const typename B::context& ctx) {
            const auto m = load<B>(o->model, ctx);
            const model_text text_of(o->model, m.vocab());  // the directory's tokenizer.json, else bytes
            model_text::stream stream(text_of);
            const auto prompt = text_of.encode(o->prompt);
            if (prompt.empty()) detail::fail("--prompt: empty prompt");
            const auto needed = static_cast<long long>(prompt.size()) + o->max_new;
            if (needed > m.schedule().dims.context)
                detail::fail("--prompt plus --max-new: ", prompt.size(), " + ", o->max_new, " tokens exceed the model's context of ",
                             m.schedule().dims.context);
            generation_options g;
            g.max_new_tokens = o->max_new;
            g.sampling = {o->temperature, o->top_k, o->top_p, o->min_p, o->repeat_penalty, o->repeat_last_n};
            g.seed = o->seed;
            if (m.config().eos_token_id >= 0) g.stop_tokens = {m.config().eos_token_id};
            std::string text;  // the generated text (--json), else streamed as it comes
            g.on_token = [&](int t) {
                const std::string bytes = stream.push(t);  // whole characters only
                if (o->json) text += bytes;
                else std::cout << bytes << std::flush;
                return true;
            };
            session<model<B>> s(m, ctx, static_cast<int>(needed), 0, o->device.kv_dtype());
            if (!o->json) std::cout << o->prompt;
            const auto start = std::chrono::steady_clock::now();
            const auto generated = generate(ctx, s, prompt, g);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            const std::string tail = stream.finish();
            if (o->json) {
                const nlohmann::ordered_json j = {{"prompt", o->prompt},
                                                  {"text", text + tail},
                                                  {"prompt_tokens", prompt.size()},
                                                  {"tokens", generated},
                                                  {"seconds", seconds},
                                                  {"tokens_per_s", seconds > 0 ? double(prompt.size() + generated.size()) / seconds : 0.0}};
                // byte-level models may stop inside a UTF-8 character: replace what is not UTF-8
                std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
            } else {
                std::cout << tail << '\n';
            }
        }); });
    }
    {
        struct options {
            std::string model, out;
            std::string tokens;
            bool json = false;
            device_flags device;
        };
        auto o = std::make_shared<options>();
        auto* cmd = app.add_subcommand("logits", "write the float32 logits of every position, row-major [T x V], little endian");
        cmd->add_option("--model", o->model, model_dir_help)->required();
        cmd->add_option("--tokens", o->tokens, "token ids, comma separated")->required();
        cmd->add_option("--out", o->out, "output file")->required();
        cmd->add_flag("--json", o->json, "print the summary as JSON (file, shape, argmax of each position)");
        o->device.add_to(*cmd);
        o->device.add_weights_to(*cmd);
        cmd->callback([o] {
            o->model = model_dir(o->model);
            o->device.run_inference([&]<class B>(const typename B::context& ctx) {
            const auto m = load<B>(o->model, ctx);
            const auto tokens = io::parse_token_ids(o->tokens, m.vocab(), "--tokens");
            if (static_cast<int>(tokens.size()) > m.schedule().dims.context)
                detail::fail("--tokens: ", tokens.size(), " tokens exceed the model's context of ", m.schedule().dims.context);
            auto cache = m.make_cache(static_cast<int>(tokens.size()));
            const sequence_input<B> in{&cache, tokens};
            const auto logits = m.forward(ctx, std::span(&in, 1), logits_mode::all);
            static_assert(std::endian::native == std::endian::little, "logits are written as the host's floats");
            io::write_file_atomic(o->out, std::string_view(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)));
            if (o->json) {
                std::vector<int> argmax;
                for (std::size_t r = 0; r < tokens.size(); ++r) {
                    const auto row = logits.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(m.vocab()));
                    argmax.push_back(static_cast<int>(std::max_element(row, row + m.vocab()) - row));
                }
                std::cout << nlohmann::ordered_json{{"out", o->out}, {"rows", tokens.size()}, {"vocab", m.vocab()}, {"dtype", "float32"}, {"argmax", argmax}}.dump()
                          << '\n';
            } else {
                std::cout << "wrote " << o->out << " (" << tokens.size() << " x " << m.vocab() << " float32)\n";
            }
        }); });
    }
}

}  // namespace vwt::cli
