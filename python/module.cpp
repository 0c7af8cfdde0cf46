// vwt._vwt: the library seen from Python (nanobind). A thin layer: schedules and their report go
// through the command line's schedule flags and report::schedule_report_json (the numbers of
// `vwt info --json`), models through io::load_model, logits through model::forward, generation
// through vwt::generate. Compute runs with the GIL released; vwt::error reaches Python as
// vwt.Error with the library's message. python/vwt/__init__.py is the public face.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <optional>
#include <variant>

#include <vwt/report/schedule_report.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

#include "vwt/compare_run.hpp"
#include "vwt/model_text.hpp"
#include "vwt/schedule_flags.hpp"
#include "vwt/training_setup.hpp"

namespace nb = nanobind;

namespace {

using f32_policy = vwt::cpu::backend<float>;
using bf16_policy = vwt::cpu::backend<float, vwt::bf16>;
using q8_policy = vwt::cpu::backend<float, vwt::q8_block>;

// Calls set(name, value) for each option that is not None (Python's keywords, dashes as
// underscores); set returns false for a name it does not take, which goes into the returned dict.
// A value of the wrong type is an error naming the option, `who` first.
template <class Set>
nb::dict take_options(const nb::dict& options, const char* who, Set&& set) {
    nb::dict rest;
    for (const auto& item : options) {
        const std::string name = nb::cast<std::string>(item.first);
        const nb::handle value = item.second;
        if (value.is_none()) continue;
        try {
            if (!set(name, value)) rest[item.first] = value;
        } catch (const nb::cast_error&) {
            vwt::detail::fail(who, ": option '", name, "' has the wrong type (", nb::cast<std::string>(nb::str(value.type())), ")");
        }
    }
    return rest;
}

// The schedule options Python passes (the CLI's flag names, dashes as underscores) as a
// schedule_flags; an unknown name or a value of the wrong type is an error naming it.
vwt::cli::schedule_flags flags_of(const nb::dict& options) {
    vwt::cli::schedule_flags f;
    const nb::dict unknown = take_options(options, "schedule", [&](const std::string& name, nb::handle value) {
        const auto integer = [&](std::optional<int>& field) { field = nb::cast<int>(value); };
        const auto real = [&](std::optional<double>& field) { field = nb::cast<double>(value); };
        if (name == "preset") f.preset = nb::cast<std::string>(value);
        else if (name == "layers") integer(f.layers);
        else if (name == "hidden") integer(f.hidden);
        else if (name == "heads") integer(f.heads);
        else if (name == "kv_heads") integer(f.kv_heads);
        else if (name == "vocab") integer(f.vocab);
        else if (name == "context") integer(f.context);
        else if (name == "turn") integer(f.turn);
        else if (name == "quantize") integer(f.quantize);
        else if (name == "experts") integer(f.experts);
        else if (name == "experts_per_token") integer(f.experts_per_token);
        else if (name == "moe_intermediate") integer(f.moe_intermediate);
        else if (name == "shape") f.shape_name = nb::cast<std::string>(value);
        else if (name == "bottleneck") real(f.bottleneck);
        else if (name == "expansion") real(f.expansion);
        else if (name == "reduction") real(f.reduction);
        else if (name == "delta") real(f.delta);
        else if (name == "delta_neg") real(f.delta_neg);
        else if (name == "duplicate_peak") f.duplicate_peak = nb::cast<bool>(value);
        else if (name == "asymmetric") f.asymmetric = nb::cast<bool>(value);
        else if (name == "permute") f.permute = nb::cast<std::string>(value);
        else if (name == "permute_seed") f.permute_seed = nb::cast<std::uint64_t>(value);
        else if (name == "permute_all") f.permute_all = nb::cast<bool>(value);
        else if (name == "widths") f.widths = nb::cast<std::vector<int>>(value);
        else if (name == "fixed_residual_width") f.fixed_residual_width = nb::cast<bool>(value);
        else if (name == "narrow_input") f.narrow_input = nb::cast<bool>(value);
        else if (name == "narrow_output") f.narrow_output = nb::cast<bool>(value);
        else if (name == "wide_unembedding") f.wide_unembedding = nb::cast<bool>(value);
        else if (name == "resize") f.resize = nb::cast<std::string>(value);
        else if (name == "interpolate_align_corners") f.align_corners = nb::cast<bool>(value);
        else return false;
        return true;
    });
    for (const auto& item : unknown) vwt::detail::fail("schedule: unknown option '", nb::cast<std::string>(item.first), "'");
    return f;
}

int dtype_bytes(const std::string& option, const std::string& name) {
    if (name == "f32") return 4;
    if (name == "f16" || name == "bf16") return 2;
    if (name == "f8") return 1;
    vwt::detail::fail(option, ": unknown dtype '", name, "' (f32, f16, bf16, f8)");
}

// `vwt info --json` for the options: the schedule, its costs and its uniform twin's.
std::string info_json(const nb::dict& options, int flops_context, const std::string& kv_dtype, const std::string& weight_dtype) {
    vwt::report::schedule_report_input in;
    in.model = flags_of(options).build(in.name, in.base_width);
    in.options = {flops_context, dtype_bytes("kv_dtype", kv_dtype), dtype_bytes("weight_dtype", weight_dtype)};
    return vwt::report::schedule_report_json(in).dump();
}

// `vwt train` from Python: the options are the command line's flags (schedule and training, dashes
// as underscores); on_step gets each step's report as a dict and may return False to stop (the run
// then ends as if killed: its last checkpoint stays). Returns the summary of `vwt train --json`.
nb::dict train_run(const nb::dict& options, int threads, bool resume, const std::function<bool(nb::dict)>& on_step) {
    if (threads < 1) vwt::detail::fail("threads must be >= 1, got ", threads);
    vwt::cli::training_flags f;
    const nb::dict schedule_options = take_options(options, "train", [&](const std::string& name, nb::handle value) {
        if (name == "data") f.data = nb::cast<std::string>(nb::str(value));
        else if (name == "out") f.out = nb::cast<std::string>(nb::str(value));
        else if (name == "format") f.format = nb::cast<std::string>(value);
        else if (name == "decay") f.decay = nb::cast<std::string>(value);
        else if (name == "max_shard_size") f.max_shard = nb::cast<std::string>(nb::str(value));
        else if (name == "tokenizer") f.tokenizer = nb::cast<std::string>(nb::str(value));
        else if (name == "steps") f.steps = nb::cast<std::int64_t>(value);
        else if (name == "warmup") f.warmup = nb::cast<std::int64_t>(value);
        else if (name == "batch") f.batch = nb::cast<int>(value);
        else if (name == "seq") f.seq = nb::cast<int>(value);
        else if (name == "accumulate") f.accumulate = nb::cast<int>(value);
        else if (name == "lr") f.lr = nb::cast<double>(value);
        else if (name == "clip") f.clip = nb::cast<double>(value);
        else if (name == "validation") f.validation = nb::cast<double>(value);
        else if (name == "seed") f.seed = nb::cast<std::uint64_t>(value);
        else if (name == "eval_every") f.eval_every = nb::cast<std::int64_t>(value);
        else if (name == "checkpoint_every") f.checkpoint_every = nb::cast<std::int64_t>(value);
        else if (name == "standard") f.standard = nb::cast<bool>(value);
        else return false;
        return true;
    });
    if (f.data.empty()) vwt::detail::fail("train: no data file");
    if (f.out.empty()) vwt::detail::fail("train: no output directory");
    f.schedule = flags_of(schedule_options);
    struct stop_requested {};
    nb::dict summary;
    {
        nb::gil_scoped_release unlocked;
        auto setup = vwt::cli::prepare_training(f, false);
        std::filesystem::create_directories(f.out);
        const vwt::cpu::context ctx{threads};
        vwt::train::trainer<f32_policy> tr(ctx, setup.config, setup.params, std::move(setup.data), setup.options);
        if (resume) tr.resume();
        double last_loss = -1, last_validation = -1;
        try {
            tr.run([&](const vwt::train::step_report& r) {
                last_loss = r.loss;
                if (r.validation_loss >= 0) last_validation = r.validation_loss;
                if (!on_step) return;
                nb::gil_scoped_acquire locked;
                nb::dict d;
                d["step"] = r.step;
                d["loss"] = r.loss;
                d["lr"] = r.lr;
                d["grad_norm"] = r.grad_norm;
                d["tokens_per_s"] = r.tokens_per_second;
                if (r.validation_loss >= 0) d["val_loss"] = r.validation_loss;
                if (!on_step(d)) throw stop_requested{};
            });
        } catch (const stop_requested&) {
        }
        nb::gil_scoped_acquire locked;
        summary["model"] = setup.name;
        summary["step"] = tr.step();
        summary["checkpoint"] = (std::filesystem::path(f.out) / vwt::train::checkpoint_name(tr.step())).string();
        summary["loss"] = last_loss;
        if (last_validation >= 0) summary["val_loss"] = last_validation;
    }
    return summary;
}

// `vwt compare` from Python: the options are its flags (schedule and run); on_step gets each step
// of each run ({"model", "seed", "step", "loss"}) and each finished run ({"model", "seed",
// "final_loss"}). Returns report.json's content as a JSON string (the files are written as well).
std::string compare_run(const nb::dict& options, int threads, const std::function<void(nb::dict)>& on_step) {
    if (threads < 1) vwt::detail::fail("threads must be >= 1, got ", threads);
    vwt::cli::compare_flags f;
    const nb::dict schedule_options = take_options(options, "compare", [&](const std::string& name, nb::handle value) {
        if (name == "data") f.data = nb::cast<std::string>(nb::str(value));
        else if (name == "out") f.out = nb::cast<std::string>(nb::str(value));
        else if (name == "format") f.format = nb::cast<std::string>(value);
        else if (name == "prompt") f.prompt = nb::cast<std::string>(value);
        else if (name == "seeds") f.seeds = nb::cast<std::vector<std::uint64_t>>(value);
        else if (name == "steps") f.steps = nb::cast<std::int64_t>(value);
        else if (name == "eval_every") f.eval_every = nb::cast<std::int64_t>(value);
        else if (name == "batch") f.batch = nb::cast<int>(value);
        else if (name == "seq") f.seq = nb::cast<int>(value);
        else if (name == "sample_tokens") f.sample_tokens = nb::cast<int>(value);
        else if (name == "lr") f.lr = nb::cast<double>(value);
        else if (name == "validation") f.validation = nb::cast<double>(value);
        else return false;
        return true;
    });
    if (f.data.empty()) vwt::detail::fail("compare: no data file");
    if (f.out.empty()) vwt::detail::fail("compare: no output directory");
    f.schedule = flags_of(schedule_options);
    nb::gil_scoped_release unlocked;
    const auto written = vwt::cli::run_compare<f32_policy>(vwt::cpu::context{threads}, f, [&](const vwt::experiments::compare_progress& p) {
        if (!on_step) return;
        nb::gil_scoped_acquire locked;
        nb::dict d;
        d["model"] = vwt::experiments::compared_model_name(p.model);
        d["seed"] = p.seed;
        if (p.step) {
            d["step"] = p.step->step;
            d["loss"] = p.step->loss;
        } else {
            d["final_loss"] = p.finished->final_loss;
        }
        on_step(d);
    });
    return written.report.dump();
}

// A loaded model in one of the CPU policy's weight formats, with the context every call runs on.
class py_model {
public:
    py_model(const std::string& dir, const std::string& weights, int threads, const std::string& gemm) {
        if (threads < 1) vwt::detail::fail("threads must be >= 1, got ", threads);
        ctx_.threads = threads;
        if (gemm == "fp32") ctx_.products = vwt::cpu::product_precision::f32;
        else if (gemm == "bf16") ctx_.products = vwt::cpu::product_precision::bf16;
        else if (gemm != "auto") vwt::detail::fail("gemm: unknown product precision '", gemm, "' (auto, fp32, bf16)");
        namespace fs = std::filesystem;
        dir_ = dir;  // a training run's directory means its newest checkpoint, as on the command line
        if (!fs::exists(dir_ / "config.json") && fs::exists(dir_ / "LATEST")) dir_ = vwt::train::latest_checkpoint(dir_, "model");
        nb::gil_scoped_release unlocked;
        if (weights == "f32") model_.emplace<1>(vwt::io::load_model<f32_policy>(dir_, ctx_, {}));
        else if (weights == "bf16") model_.emplace<2>(vwt::io::load_model<bf16_policy>(dir_, ctx_, {}));
        else if (weights == "q8") model_.emplace<3>(vwt::io::load_model<q8_policy>(dir_, ctx_, {}));
        else vwt::detail::fail("weights: unknown format '", weights, "' (f32, bf16, q8)");
        visit([&](const auto& m) {
            vocab_ = m.vocab();
            context_ = m.schedule().dims.context;
            widths_ = m.schedule().widths;
            eos_ = m.config().eos_token_id;
        });
        tokenizer_.emplace(dir_, vocab_);
    }

    int vocab() const { return vocab_; }
    int context() const { return context_; }
    const std::vector<int>& widths() const { return widths_; }
    int eos() const { return eos_; }
    std::string directory() const { return dir_.string(); }
    const vwt::cli::model_text& tokens() const { return *tokenizer_; }

    // float32 logits [T x V] of every position of the tokens, in a NumPy array that owns them.
    nb::ndarray<nb::numpy, float, nb::ndim<2>> logits(const std::vector<int>& tokens) const {
        auto* out = new std::vector<float>;
        nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
        check_tokens(tokens, "logits");
        {
            nb::gil_scoped_release unlocked;
            visit([&]<class B>(const vwt::model<B>& m) {
                auto cache = m.make_cache(static_cast<int>(tokens.size()));
                const vwt::sequence_input<B> in{&cache, tokens};
                *out = m.forward(ctx_, std::span(&in, 1), vwt::logits_mode::all);
            });
        }
        const std::size_t shape[2] = {tokens.size(), static_cast<std::size_t>(vocab())};
        return {out->data(), 2, shape, owner};
    }

    // New tokens after the prompt; on_token (with the GIL) gets each one and may return False to stop.
    std::vector<int> generate(const std::vector<int>& prompt, int max_new, double temperature, int top_k, double top_p, double min_p,
                              double repeat_penalty, int repeat_last_n, std::uint64_t seed, bool stop_at_eos,
                              const std::function<bool(int)>& on_token) const {
        check_tokens(prompt, "generate");
        if (max_new < 0) vwt::detail::fail("generate: max_new must be >= 0, got ", max_new);
        const auto needed = static_cast<long long>(prompt.size()) + max_new;
        if (needed > context())
            vwt::detail::fail("generate: the prompt plus max_new: ", prompt.size(), " + ", max_new, " tokens exceed the model's context of ",
                              context());
        vwt::generation_options g;
        g.max_new_tokens = max_new;
        g.sampling = {temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n};
        g.sampling.validate();
        g.seed = seed;
        if (stop_at_eos && eos() >= 0) g.stop_tokens = {eos()};
        if (on_token)
            g.on_token = [&](int t) {
                nb::gil_scoped_acquire locked;
                return on_token(t);
            };
        std::vector<int> out;
        nb::gil_scoped_release unlocked;
        visit([&]<class B>(const vwt::model<B>& m) {
            vwt::session<vwt::model<B>> s(m, ctx_, static_cast<int>(needed));
            out = vwt::generate(ctx_, s, prompt, g);
        });
        return out;
    }

private:
    std::variant<std::monostate, vwt::model<f32_policy>, vwt::model<bf16_policy>, vwt::model<q8_policy>> model_;
    vwt::cpu::context ctx_;
    std::filesystem::path dir_;
    int vocab_ = 0, context_ = 0, eos_ = -1;
    std::vector<int> widths_;
    std::optional<vwt::cli::model_text> tokenizer_;

    template <class F>
    void visit(F&& f) const {
        std::visit(
            [&](const auto& m) {
                if constexpr (!std::is_same_v<std::decay_t<decltype(m)>, std::monostate>) f(m);
            },
            model_);
    }
    void check_tokens(const std::vector<int>& tokens, const char* who) const {
        if (tokens.empty()) vwt::detail::fail(who, ": no tokens");
        if (static_cast<long long>(tokens.size()) > context())
            vwt::detail::fail(who, ": ", tokens.size(), " tokens exceed the model's context of ", context());
        for (std::size_t i = 0; i < tokens.size(); ++i)
            if (tokens[i] < 0 || tokens[i] >= vocab())
                vwt::detail::fail(who, ": token ", tokens[i], " at position ", i, " is outside the vocabulary [0, ", vocab(), ")");
    }
};

}  // namespace

NB_MODULE(_vwt, m) {
    m.doc() = "vwt's C++ core; use the vwt package";
    m.attr("__version__") = vwt::version_string;
    nb::exception<vwt::error>(m, "Error", PyExc_ValueError);

    m.def("info_json", &info_json, nb::arg("options"), nb::arg("flops_context") = 0, nb::arg("kv_dtype") = "bf16",
          nb::arg("weight_dtype") = "bf16", "`vwt info --json` for the schedule options, as a JSON string");

    m.def("train", &train_run, nb::arg("options"), nb::arg("threads") = 1, nb::arg("resume") = false, nb::arg("on_step").none() = nb::none(),
          "`vwt train` with the options of its flags; returns its --json summary");

    m.def("compare", &compare_run, nb::arg("options"), nb::arg("threads") = 1, nb::arg("on_step").none() = nb::none(),
          "`vwt compare` with the options of its flags; returns report.json's content");

    nb::class_<vwt::cli::model_text>(m, "Tokenizer")
        .def("encode", [](const vwt::cli::model_text& t, const std::string& text) { return t.encode(text); }, nb::arg("text"))
        .def("decode", [](const vwt::cli::model_text& t, const std::vector<int>& ids) { const auto s = t.decode(ids); return nb::bytes(s.data(), s.size()); },
             nb::arg("ids"), "the bytes of the ids (a byte-level model may end inside a UTF-8 character)")
        .def_prop_ro("kind", [](const vwt::cli::model_text& t) { return t.bpe() ? "bpe" : "bytes"; });

    nb::class_<py_model>(m, "Model")
        .def(nb::init<const std::string&, const std::string&, int, const std::string&>(), nb::arg("directory"), nb::arg("weights") = "f32",
             nb::arg("threads") = 1, nb::arg("gemm") = "auto")
        .def_prop_ro("vocab", &py_model::vocab)
        .def_prop_ro("context", &py_model::context)
        .def_prop_ro("widths", &py_model::widths)
        .def_prop_ro("eos_token_id", &py_model::eos)
        .def_prop_ro("directory", &py_model::directory)
        .def_prop_ro("tokenizer", &py_model::tokens, nb::rv_policy::reference_internal)
        .def("logits", &py_model::logits, nb::arg("tokens"))
        .def("generate", &py_model::generate, nb::arg("prompt"), nb::arg("max_new"), nb::arg("temperature"), nb::arg("top_k"),
             nb::arg("top_p"), nb::arg("min_p"), nb::arg("repeat_penalty"), nb::arg("repeat_last_n"), nb::arg("seed"), nb::arg("stop_at_eos"),
             nb::arg("on_token").none());
}
