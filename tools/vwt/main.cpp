// The `vwt` command line: info, init, generate, logits, train, eval, compare.
// Every error a user can cause ends in one line on stderr naming what was wrong, and exit code 2.
#include <iostream>

#include <vwt/vwt.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
    CLI::App app{"vwt: Variable-Width Transformers (><former) in C++"};
    app.set_version_flag("--version", vwt::version_string);
    app.require_subcommand(1);
    vwt::cli::add_info_command(app);
    vwt::cli::add_model_commands(app);
    vwt::cli::add_train_commands(app);
    vwt::cli::add_compare_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const vwt::error& e) {
        std::cerr << "vwt: error: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {  // e.g. std::bad_alloc, filesystem errors
        std::cerr << "vwt: error: " << e.what() << '\n';
        return 2;
    }
    return 0;
}
