// The `vwt` command line: info, init, generate, logits, train, eval, compare, bench.
// Every error a user can cause ends in one line on stderr naming what was wrong, and exit code 2;
// `vwt`, `vwt help` and `--help` print the commands and exit 0.
#include <iostream>
#include <string_view>

#include <vwt/vwt.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
    CLI::App app{"vwt: Variable-Width Transformers (><former) in C++", "vwt"};
    app.set_version_flag("--version", vwt::version_string);
    app.require_subcommand(0, 1);
    app.option_defaults()->always_capture_default();  // `CMD --help` and `vwt help CMD` show each flag's default
    vwt::cli::add_info_command(app);
    vwt::cli::add_model_commands(app);
    vwt::cli::add_train_commands(app);
    vwt::cli::add_tokenize_command(app);
    vwt::cli::add_compare_command(app);
    vwt::cli::add_analyze_command(app);
    vwt::cli::add_sweep_command(app);
    vwt::cli::add_fit_command(app);
    vwt::cli::add_bench_command(app);
#if defined(VWT_CLI_WITH_SERVE)
    vwt::cli::add_serve_command(app);
#endif
    auto* help = app.add_subcommand("help", "print the commands, or one command's flags (vwt help COMMAND)");
    std::string help_topic;
    help->add_option("command", help_topic, "the command to describe");

    // A first argument that is neither a flag nor a command is named, with the commands there are.
    if (argc > 1 && argv[1][0] != '-') {
        const std::string_view name = argv[1];
        bool known = false;
        std::string commands;
        for (const auto* sub : app.get_subcommands({})) {
            known = known || sub->get_name() == name;
            commands += (commands.empty() ? "" : ", ") + sub->get_name();
        }
        if (!known) {
            std::cerr << "vwt: error: unknown command '" << name << "' (commands: " << commands << ")\n";
            return 2;
        }
    }
    try {
        app.parse(argc, argv);
        // App::help() would describe the selected subcommand; the command list is the top level's.
        const auto command_list = [&] { return app.get_formatter()->make_help(&app, "", CLI::AppFormatMode::Normal); };
        if (app.get_subcommands().empty()) {
            std::cout << command_list();
        } else if (help->parsed()) {
            if (help_topic.empty()) std::cout << command_list();
            else {
                const CLI::App* topic = nullptr;
                try {
                    topic = app.get_subcommand(help_topic);
                } catch (const CLI::OptionNotFound&) {
                }
                if (!topic || topic == help) {
                    std::cerr << "vwt: error: help: unknown command '" << help_topic << "'\n";
                    return 2;
                }
                std::cout << topic->help(app.get_name());
            }
        }
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
        std::cerr << "vwt: error: " << e.what() << '\n';
        return 2;
    } catch (const vwt::error& e) {
        std::cerr << "vwt: error: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {  // e.g. std::bad_alloc, filesystem errors
        std::cerr << "vwt: error: " << e.what() << '\n';
        return 2;
    }
    return 0;
}
