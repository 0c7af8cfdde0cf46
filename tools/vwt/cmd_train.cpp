// `vwt train` (byte-level or token-file corpus, progress bar, JSON-lines log, resumable
// checkpoints) and `vwt eval` (validation loss and perplexity of a model directory).
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <iostream>

#include <optional>
#include <sstream>

#include <vwt/io/bpe_tokenizer.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>
#if defined(VWT_WITH_MPI)
#include <unistd.h>

#include <thread>
#include <vwt/train/mpi.hpp>
#endif
#if defined(VWT_WITH_NCCL)
#include <vwt/train/nccl.hpp>
#endif

#include "commands.hpp"
#include "progress.hpp"
#include "device_flags.hpp"
#include "schedule_flags.hpp"
#include "training_setup.hpp"

namespace vwt::cli {

namespace {

std::string eta(double seconds) {
    char buf[32];
    const long s = static_cast<long>(seconds);
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

#if defined(VWT_WITH_MPI)
// `vwt train --ranks N`: this same command line without --ranks, started N times by mpirun
// (oversubscribed when N is more than the cores). Does not return unless mpirun cannot start.
[[noreturn]] void relaunch_with_mpirun(int ranks) {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
    std::vector<std::string> cmd{"mpirun", "-np", std::to_string(ranks)};
    if (static_cast<unsigned>(ranks) > std::max(1u, std::thread::hardware_concurrency())) cmd.push_back("--oversubscribe");
    cmd.push_back(std::filesystem::read_symlink("/proc/self/exe").string());  // this binary (mpirun's own once exec'd)
    for (std::size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--ranks") { ++i; continue; }
        if (args[i].rfind("--ranks=", 0) == 0) continue;
        cmd.push_back(args[i]);
    }
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::cout << std::flush;
    execvp("mpirun", argv.data());
    detail::fail("--ranks: could not start mpirun (", std::strerror(errno), ")");
}
#endif

// Each MoE layer's share of the (token, expert) pairs per expert, in percent, and the busiest
// expert's load over the mean (1 = perfectly balanced).
void print_expert_load(std::ostream& out, const dynamic_schedule& s, const std::vector<std::int64_t>& load) {
    const int E = s.dims.moe.experts;
    out << "expert load: each layer's share of its (token, expert) pairs, % (top-" << s.dims.moe.experts_per_token << " of " << E
        << " experts)\nlayer width   max/mean  experts 0.." << E - 1 << '\n';
    for (int i = 0; i < s.layers(); ++i) {
        std::int64_t total = 0, most = 0;
        for (int e = 0; e < E; ++e) total += load[std::size_t(i * E + e)], most = std::max(most, load[std::size_t(i * E + e)]);
        char head[64];
        std::snprintf(head, sizeof head, "%5d %5d %10.2f ", i, s.width(i), total ? double(most) * E / double(total) : 0.0);
        out << head;
        for (int e = 0; e < E; ++e) {
            char cell[16];
            std::snprintf(cell, sizeof cell, " %5.1f", total ? 100.0 * double(load[std::size_t(i * E + e)]) / double(total) : 0.0);
            out << cell;
        }
        out << '\n';
    }
}

// Keeps the entries of log.jsonl up to `step` (the checkpoint a run resumes from), replacing the
// file atomically: steps a killed run logged after its last checkpoint are run again and must not
// appear twice. A torn last line (a kill mid-write) is dropped too.
void truncate_log(const std::filesystem::path& path, std::int64_t step) {
    if (!std::filesystem::exists(path)) return;
    const auto bytes = io::read_file_bytes(path);
    std::string kept, line;
    for (std::size_t begin = 0; begin < bytes.size();) {
        std::size_t end = begin;
        while (end < bytes.size() && bytes[end] != '\n') ++end;
        line.assign(bytes.begin() + static_cast<std::ptrdiff_t>(begin), bytes.begin() + static_cast<std::ptrdiff_t>(end));
        const bool complete = end < bytes.size();
        begin = end + 1;
        if (!complete) break;
        const auto entry = nlohmann::json::parse(line, nullptr, false);
        if (entry.is_discarded() || !entry.is_object() || !entry.contains("step") || !entry["step"].is_number_integer())
            continue;
        if (entry["step"].get<std::int64_t>() <= step) kept += line + '\n';
    }
    io::write_file_atomic(path, kept);
}

}  // namespace

std::string model_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    if (!fs::exists(fs::path(dir) / "config.json") && fs::exists(fs::path(dir) / "LATEST"))
        return train::latest_checkpoint(dir, "--model").string();
    return dir;
}

void add_train_commands(CLI::App& app) {
    {
        struct options {
            training_flags run;
            device_flags device;
            bool resume = false, quiet = false, json = false;
            int ranks = 1;
        };
        auto o = std::make_shared<options>();
        auto* cmd = app.add_subcommand("train", "train a model on a corpus (byte-level text or a token file)");
        o->run.schedule.add_to(*cmd);
        cmd->add_option("--data", o->run.data, "corpus file")->required();
        cmd->add_option("--format", o->run.format, "text (UTF-8 bytes), u16 or u32 (little-endian token ids)");
        cmd->add_option("--tokenizer", o->run.tokenizer,
                        "tokenizer.json (byte-level BPE) for a text corpus: the model's vocabulary is its ids, and checkpoints carry it");
        cmd->add_option("--steps", o->run.steps, "optimizer steps");
        cmd->add_option("--batch", o->run.batch, "sequences per micro-batch; a step is --batch x --accumulate sequences, whatever the ranks");
        cmd->add_option("--accumulate", o->run.accumulate, "micro-batches per step (gradient accumulation)");
        cmd->add_option("--ranks", o->ranks,
                        "data-parallel processes: starts this command under `mpirun -np N` (or run it under mpirun yourself)");
        cmd->add_option("--seq", o->run.seq, "sequence length");
        cmd->add_option("--lr", o->run.lr, "peak learning rate");
        cmd->add_option("--decay", o->run.decay, "cosine, constant or power");
        cmd->add_option("--warmup", o->run.warmup, "warmup steps (default 8% of --steps)");
        cmd->add_option("--clip", o->run.clip, "gradient clipping by global norm (0: off)");
        cmd->add_option("--validation", o->run.validation, "fraction of the corpus held out at its end");
        cmd->add_option("--seed", o->run.seed, "initialisation and data-order seed");
        o->device.add_to(*cmd);
        cmd->add_option("--eval-every", o->run.eval_every, "steps between validation losses");
        cmd->add_option("--checkpoint-every", o->run.checkpoint_every, "steps between checkpoints");
        cmd->add_option("--out", o->run.out, "output directory (checkpoints, log.jsonl)")->required();
        cmd->add_option("--max-shard-size", o->run.max_shard, "checkpoint weights in shards of at most this size (e.g. 2GB); 0: one file");
        cmd->add_flag("--resume", o->resume, "continue from the latest checkpoint in --out");
        cmd->add_flag("--standard", o->run.standard, "standard parametrisation instead of muP");
        cmd->add_flag("--quiet", o->quiet, "no progress on stderr (on a terminal a bar, else a line every 10 s)");
        cmd->add_flag("--json", o->json, "print the final summary as JSON");
        cmd->callback([o] {
            if (o->ranks < 1) detail::fail("--ranks: must be at least 1");
#if defined(VWT_WITH_MPI)
            if (o->ranks > 1) {
                if (train::mpi_environment::launched()) detail::fail("--ranks: already running under an MPI launcher; leave --ranks to mpirun -np");
                relaunch_with_mpirun(o->ranks);
            }
            std::optional<train::mpi_environment> mpi;
            if (train::mpi_environment::launched()) {
                mpi.emplace();
                // one GPU per rank on a node: --gpu plus the rank's place on its node
                if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"); local && o->device.device == "cuda")
                    o->device.gpu += std::atoi(local);
            }
#else
            if (o->ranks > 1) detail::fail("--ranks: this vwt was built without MPI (vwt::mpi; install libopenmpi-dev and rebuild)");
#endif
            auto setup = prepare_training(o->run, !o->quiet);
            const auto& name = setup.name;
            const auto& c = setup.config;
            const auto& params = setup.params;
            const auto& t = setup.options;
            auto& data = setup.data;
            std::filesystem::create_directories(o->run.out);
            try {
            o->device.run([&]<class B>(const typename B::context& ctx) {
                std::unique_ptr<train::communicator<B>> comm;
#if defined(VWT_WITH_MPI)
                if (mpi) {
                    if constexpr (B::memory::host_accessible)
                        comm = std::make_unique<train::mpi_communicator<B>>();
                    else
#if defined(VWT_WITH_NCCL)
                        comm = std::make_unique<train::nccl_communicator<B>>(ctx);
#else
                        detail::fail("mpirun --device cuda: GPU ranks need vwt::nccl (a build with CUDA, MPI and the toolkit's NCCL)");
#endif
                }
#endif
                train::trainer<B> tr(ctx, c, params, std::move(data), t, comm.get());
                const bool lead = !comm || comm->rank() == 0;  // rank 0 logs and prints
                const auto log_path = std::filesystem::path(o->run.out) / "log.jsonl";
                if (o->resume) {
                    tr.resume();
                    if (lead) truncate_log(log_path, tr.step());
                }
                std::ofstream log;
                if (lead) log.open(log_path, o->resume ? std::ios::app : std::ios::trunc);
                const auto start = std::chrono::steady_clock::now();
                const auto first = tr.step();
                progress_display progress(o->quiet || !lead);
                double last_loss = -1, last_validation = -1;
                tr.run([&](const train::step_report& r) {
                    if (!lead) return;
                    nlohmann::ordered_json j = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                                                {"tokens_per_s", r.tokens_per_second}};
                    if (r.validation_loss >= 0) j["val_loss"] = r.validation_loss;
                    if (r.aux_loss >= 0) {  // MoE: the routers' auxiliary loss and each layer's tokens per expert
                        j["aux_loss"] = r.aux_loss;
                        auto& load = j["expert_tokens"] = nlohmann::ordered_json::array();
                        const auto E = static_cast<std::size_t>(c.schedule.dims.moe.experts);
                        for (std::size_t at = 0; at < r.expert_tokens.size(); at += E)
                            load.push_back(std::vector<std::int64_t>(r.expert_tokens.begin() + static_cast<std::ptrdiff_t>(at),
                                                                     r.expert_tokens.begin() + static_cast<std::ptrdiff_t>(at + E)));
                    }
                    log << j.dump() << '\n' << std::flush;
                    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                    const double per_step = elapsed / static_cast<double>(r.step - first);
                    std::ostringstream line;
                    line << progress_bar(static_cast<double>(r.step), static_cast<double>(o->run.steps)) << " step " << r.step << "/" << o->run.steps
                         << " loss " << r.loss << (r.aux_loss >= 0 ? " aux " + std::to_string(r.aux_loss) : std::string()) << " "
                         << static_cast<long>(r.tokens_per_second) << " tok/s ETA " << eta(per_step * static_cast<double>(o->run.steps - r.step));
                    progress.update(line.str(), r.step == o->run.steps);
                    last_loss = r.loss;
                    if (r.validation_loss >= 0) {
                        last_validation = r.validation_loss;
                        std::ostringstream note;
                        note << "step " << r.step << ": validation loss " << r.validation_loss << " (perplexity " << std::exp(r.validation_loss) << ")";
                        progress.note(note.str());
                    }
            });
            progress.finish();
            const auto checkpoint = (std::filesystem::path(o->run.out) / train::checkpoint_name(tr.step())).string();
            if (lead && o->json) {
                nlohmann::ordered_json j = {{"model", name}, {"step", tr.step()}, {"checkpoint", checkpoint}, {"loss", last_loss}};
                if (last_validation >= 0) j["val_loss"] = last_validation;
                j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                std::cout << j.dump() << '\n';
            } else if (lead) {
                std::cout << "trained " << name << " to step " << tr.step() << "; checkpoint " << checkpoint << '\n';
            }
            });
            } catch (const std::exception& e) {
#if defined(VWT_WITH_MPI)
                int ranks = 1;
                if (mpi) MPI_Comm_size(MPI_COMM_WORLD, &ranks);
                if (ranks > 1) train::mpi_environment::abort(e.what(), 1);  // the other ranks must not wait for this one
#endif
                throw;
            }
        });
    }
    {
        struct options {
            std::string model, data, format = "text";
            int seq = 128;
            double validation = 0.1;
            bool experts = false, json = false;
            device_flags device;
        };
        auto o = std::make_shared<options>();
        auto* cmd = app.add_subcommand("eval", "validation loss and perplexity of a model on a corpus's held-out tail");
        cmd->add_option("--model", o->model, model_dir_help)->required();
        cmd->add_option("--data", o->data, "corpus file")->required();
        cmd->add_option("--format", o->format, "text, u16 or u32");
        cmd->add_flag("--json", o->json, "print the result as JSON");
        cmd->add_option("--seq", o->seq, "sequence length");
        cmd->add_option("--validation", o->validation, "held-out fraction at the end of the corpus");
        cmd->add_flag("--experts", o->experts, "MoE models: also print each layer's share of tokens per expert");
        o->device.add_to(*cmd);
        o->device.add_weights_to(*cmd);
        cmd->callback([o] {
            o->model = model_dir(o->model);
            const auto config = io::read_model_config(o->model);
            if (o->experts && !config.schedule.dims.moe.enabled()) detail::fail("--experts: model '", o->model, "' has no MoE layers");
            if (o->seq > config.schedule.dims.context)
                detail::fail("--seq: ", o->seq, " is above the model's context of ", config.schedule.dims.context);
            auto tokens = train::read_tokens(o->data, parse_token_format(o->format), config.schedule.dims.vocab);
            const train::window_loader data(std::move(tokens), o->seq, o->validation, 0, o->data);
            o->device.run_inference([&]<class B>(const typename B::context& ctx) {
                const auto m = io::load_model<B>(o->model, ctx);
                std::vector<std::int64_t> load;
                const double loss = train::validation_loss(ctx, m, data, 0, o->experts ? &load : nullptr);
                if (o->json) {
                    nlohmann::ordered_json j = {{"model", o->model}, {"loss", loss}, {"perplexity", std::exp(loss)},
                                                {"windows", data.validation_windows()}, {"seq", o->seq}};
                    if (o->experts) j["expert_tokens"] = load;  // layer-major: layers x experts
                    std::cout << j.dump() << '\n';
                    return;
                }
                std::cout << "validation loss " << loss << " perplexity " << std::exp(loss) << " over " << data.validation_windows()
                          << " windows of " << o->seq << " tokens\n";
                if (o->experts) print_expert_load(std::cout, config.schedule, load);
            });
        });
    }
}

}  // namespace vwt::cli
