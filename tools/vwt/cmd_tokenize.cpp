// `vwt tokenize`: a text corpus to a token file (little-endian u16 or u32 ids) with the BPE of a
// tokenizer.json, for `vwt train --format u16|u32` on corpora too large to tokenize at every run.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <vwt/io/bpe_tokenizer.hpp>
#include <vwt/vwt.hpp>

#include "commands.hpp"
#include "training_setup.hpp"

namespace vwt::cli {

void add_tokenize_command(CLI::App& app) {
    struct options {
        std::string tokenizer, in, out, format = "u32";
        bool quiet = false;
    };
    auto o = std::make_shared<options>();
    auto* cmd = app.add_subcommand("tokenize", "write a text corpus as token ids (u16 or u32) with a tokenizer.json");
    cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json (byte-level BPE)")->required();
    cmd->add_option("--in", o->in, "UTF-8 text")->required();
    cmd->add_option("--out", o->out, "token file to write")->required();
    cmd->add_option("--format", o->format, "u16 (vocabularies up to 65536) or u32");
    cmd->add_flag("--quiet", o->quiet, "no progress bar");
    cmd->callback([o] {
        if (o->format != "u16" && o->format != "u32") detail::fail("--format: unknown format '", o->format, "' (u16, u32)");
        const auto tok = io::bpe_tokenizer::from_file(o->tokenizer);
        const int width = o->format == "u16" ? 2 : 4;
        if (width == 2 && tok.vocab_size() > 65536)
            detail::fail("--format u16: the tokenizer has ", tok.vocab_size(), " ids, more than 16 bits hold (use u32)");
        const io::mapped_file text(o->in);
        const auto bytes = text.bytes();
        const auto ids = tokenize_text(tok, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), !o->quiet);
        std::string out;
        out.reserve(ids.size() * static_cast<std::size_t>(width));
        for (int id : ids)
            for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((static_cast<std::uint32_t>(id) >> (8 * b)) & 0xff));
        io::write_file_atomic(o->out, out);
        std::cout << "wrote " << o->out << ": " << ids.size() << " tokens (" << o->format << ") from " << bytes.size() << " bytes\n";
    });
}

}  // namespace vwt::cli
