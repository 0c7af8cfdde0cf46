// A model directory: config.json (HF style, the authors' field names plus an explicit `widths`
// list) and the weights, as model.safetensors or as shards named by model.safetensors.index.json
// (what save_pretrained writes past its max_shard_size), in F32, F16, BF16 or F64 with the
// authors' state-dict names. Weight files are mapped, not read: a tensor's pages are read when it
// is converted, and handed back once it has been; a file whose tensors already are the parameter
// buffer (vwt's own layout, in the dtype asked for) is used in place.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "../params/layout.hpp"
#include "../tensor/weight_format.hpp"
#include "config.hpp"
#include "json.hpp"
#include "mapped_file.hpp"
#include "safetensors.hpp"

namespace vwt::io {

inline constexpr const char* weights_file = "model.safetensors";
inline constexpr const char* weights_index_file = "model.safetensors.index.json";

// The file dtype whose bytes are weights of type W exactly (F32 for float, BF16 for bf16), or
// none (q8 blocks are always converted).
template <class W>
constexpr bool stored_as(dtype t) {
    if constexpr (std::is_same_v<W, float>) return t == dtype::f32;
    else if constexpr (std::is_same_v<W, bf16>) return t == dtype::bf16;
    else return false;
}

// DIR/config.json, checked against vwt's limits.
inline model_config read_model_config(const std::filesystem::path& dir, const log_function& log = {}) {
    if (!std::filesystem::is_directory(dir)) vwt::detail::fail("model directory '", dir.string(), "' does not exist");
    const auto config_path = (dir / "config.json").string();
    const auto config_bytes = read_file_bytes(config_path, max_config_bytes);
    const auto j = parse_json(std::span(reinterpret_cast<const char*>(config_bytes.data()), config_bytes.size()),
                              "config '" + config_path + "'");
    return config_from_json(j, config_path, log);
}

// The weight files of a model directory, mapped, their headers validated against a layout: every
// tensor of the layout is present once, with the schedule's shape and a float dtype, and nothing
// else is: all before any parameter memory is allocated.
class checkpoint_weights {
public:
    checkpoint_weights(const std::filesystem::path& dir, const parameter_layout& layout) {
        const auto single = dir / weights_file, index = dir / weights_index_file;
        const bool has_single = std::filesystem::exists(single), has_index = std::filesystem::exists(index);
        if (has_single && has_index)
            vwt::detail::fail("model directory '", dir.string(), "' holds both ", weights_file, " and ", weights_index_file,
                              "; keep one");
        if (!has_single && !has_index)
            vwt::detail::fail("model directory '", dir.string(), "' has neither ", weights_file, " nor ", weights_index_file);
        std::map<std::string, std::string> shard_of;  // tensor -> shard file (sharded directories)
        if (has_single) {
            open(single);
        } else {
            const auto text = read_file_bytes(index, max_config_bytes);
            const auto where = "index '" + index.string() + "'";
            const auto j = parse_json(std::span(reinterpret_cast<const char*>(text.data()), text.size()), where);
            if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
                vwt::detail::fail(where, ": no \"weight_map\" object");
            std::map<std::string, std::size_t> opened;
            for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
                if (!it->is_string()) vwt::detail::fail(where, ": the shard of tensor '", it.key(), "' is not a file name");
                const auto name = it->get<std::string>();
                if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos || name == "." ||
                    name == "..")
                    vwt::detail::fail(where, ": shard '", name, "' of tensor '", it.key(), "' is not a file name in the directory");
                if (!opened.count(name)) {
                    opened[name] = files_.size();
                    open(dir / name);
                }
                shard_of[it.key()] = name;
            }
            if (files_.empty()) vwt::detail::fail(where, ": the weight map is empty");
            if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size")) {
                const auto& total = j["metadata"]["total_size"];
                std::uint64_t bytes = 0;
                for (const auto& v : views_)
                    for (const auto& t : v.tensors()) bytes += t.end - t.begin;
                if (!total.is_number_unsigned() || total.get<std::uint64_t>() != bytes)
                    vwt::detail::fail(where, ": metadata.total_size ", total.dump(), " but the shards hold ", bytes, " bytes of tensors");
            }
        }
        // every tensor of every file, once, where the index says
        for (std::size_t f = 0; f < views_.size(); ++f)
            for (const auto& e : views_[f].tensors()) {
                if (!layout.find(e.name)) vwt::detail::fail(source(f), ": unexpected tensor '", e.name, "'");
                if (!shard_of.empty()) {
                    const auto it = shard_of.find(e.name);
                    if (it == shard_of.end() || files_[f]->path().filename() != it->second)
                        vwt::detail::fail(source(f), ": tensor '", e.name, "' is not mapped to this shard by ", weights_index_file);
                }
                if (!found_.emplace(e.name, located{f, &e}).second)
                    vwt::detail::fail(source(f), ": tensor '", e.name, "' is also in ", source(found_.at(e.name).file));
            }
        for (const auto& t : layout.tensors()) {
            const auto it = found_.find(t.name);
            if (it == found_.end())
                vwt::detail::fail(has_single ? source(0) : "index '" + index.string() + "'", ": missing tensor '", t.name, "'");
            const auto& e = *it->second.entry;
            if (e.shape != t.shape) {
                std::string got, want;
                for (auto s : e.shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
                for (auto s : t.shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
                vwt::detail::fail(source(it->second.file), ": tensor '", t.name, "' has shape [", got, "], the schedule needs [", want, "]");
            }
            if (!is_float(e.type))
                vwt::detail::fail(source(it->second.file), ": tensor '", t.name, "' has dtype ", info(e.type).name,
                                  "; F32, F16, BF16 or F64 expected");
        }
        for (const auto& [name, where] : shard_of)
            if (!layout.find(name)) vwt::detail::fail("index '", index.string(), "': unexpected tensor '", name, "'");
    }

    std::size_t files() const { return files_.size(); }
    const std::filesystem::path& path(std::size_t file) const { return files_.at(file)->path(); }

    // Tensor t as numel() / elements_per_item<W> items of W, from whatever float dtype the file
    // holds (float: widened; bf16: the stored bits, or rounded to nearest; q8: quantized block by
    // block), a slice at a time, each slice's file pages handed back once converted: at most one
    // slice of the file is resident beside the converted weights.
    template <class W>
    void read(const tensor_info& t, W* out) const {
        const auto& [file, entry] = found_.at(t.name);
        const auto& view = views_[file];
        const auto width = static_cast<std::int64_t>(info(entry->type).bytes);
        constexpr std::int64_t slice = 1 << 18;  // elements per slice (a multiple of 32: whole q8 blocks)
        std::vector<float> wide;
        for (std::int64_t first = 0; first < entry->numel(); first += slice) {
            const std::int64_t n = std::min(slice, entry->numel() - first);
            const auto bytes = view.bytes_of(*entry).subspan(static_cast<std::size_t>(first * width), static_cast<std::size_t>(n * width));
            if (stored_as<W>(entry->type)) {
                std::memcpy(static_cast<void*>(out + first), bytes.data(), bytes.size());
            } else if constexpr (std::is_same_v<W, float>) {
                view.read_as(*entry, first, n, out + first);
            } else {
                wide.resize(static_cast<std::size_t>(n));
                view.read_as(*entry, first, n, wide.data());
                const auto items = convert_elements<W>(std::span<const float>(wide));
                std::copy(items.begin(), items.end(), out + first / elements_per_item<W>);
            }
            files_[file]->release(bytes);
        }
    }

    // The parameters as items of W inside the mapping itself, when the directory allows it: one
    // file whose tensors are, in order and without gaps, exactly the layout's, all stored as W,
    // starting on data_alignment; otherwise empty. Writes go to private copies of the pages.
    template <class W>
    std::span<W> in_place(const parameter_layout& layout) {
        if (files_.size() != 1) return {};
        const auto& view = views_[0];
        std::uint64_t at = 0;
        for (const auto& t : layout.tensors()) {
            const auto* e = found_.at(t.name).entry;
            if (!stored_as<W>(e->type) || e->begin != at) return {};
            at = e->end;
        }
        const auto data = view.data();
        if (reinterpret_cast<std::uintptr_t>(data.data()) % data_alignment != 0) return {};
        const auto offset = static_cast<std::size_t>(data.data() - files_[0]->bytes().data());
        const auto bytes = files_[0]->private_bytes().subspan(offset, static_cast<std::size_t>(at));
        return {reinterpret_cast<W*>(bytes.data()), bytes.size() / sizeof(W)};
    }

    // What keeps the mapping of file 0 alive (for parameters used in place).
    std::shared_ptr<void> keep_alive() const { return files_.at(0); }

private:
    struct located {
        std::size_t file;
        const tensor_entry* entry;
    };
    void open(const std::filesystem::path& p) {
        auto f = std::make_shared<mapped_file>(p);
        views_.emplace_back(f->bytes(), p.string());
        files_.push_back(std::move(f));
    }
    std::string source(std::size_t file) const { return "safetensors '" + files_.at(file)->path().string() + "'"; }

    std::vector<std::shared_ptr<mapped_file>> files_;
    std::vector<safetensors_view> views_;  // entries stay put: views_ is not resized after the constructor
    std::map<std::string, located> found_;
};

struct loaded_model {
    model_config config;
    std::vector<float> params;
};

// Reads DIR's config and weights as float parameters (for training and tools that change them;
// io::load_model builds a model without this copy).
inline loaded_model load_model_dir(const std::filesystem::path& dir, const log_function& log = {}) {
    loaded_model m{read_model_config(dir, log), {}};
    const parameter_layout layout(m.config);
    const checkpoint_weights weights(dir, layout);
    m.params.resize(static_cast<std::size_t>(layout.size()));
    for (const auto& t : layout.tensors()) weights.read(t, m.params.data() + t.offset);
    return m;
}

// Writes config.json and the weights into DIR (created if needed), each file atomically: one
// model.safetensors, or with max_shard_bytes > 0 and more bytes than that, shards of at most
// max_shard_bytes (a larger tensor alone in its shard) named model-0000i-of-0000n.safetensors and
// model.safetensors.index.json, as save_pretrained names them. The weights of the other form are
// removed once the new ones are written.
inline void save_model_dir(const std::filesystem::path& dir, const model_config& c, std::span<const float> params,
                           dtype type = dtype::f32, const schedule_spec* generator = nullptr, std::uint64_t max_shard_bytes = 0) {
    const parameter_layout layout(c);
    if (static_cast<std::int64_t>(params.size()) != layout.size())
        vwt::detail::fail("save_model_dir: ", params.size(), " parameters given, the schedule needs ", layout.size());
    std::filesystem::create_directories(dir);
    std::vector<std::vector<tensor_to_write>> shards(1);
    std::uint64_t in_shard = 0, total = 0;
    for (const auto& t : layout.tensors()) {
        const auto bytes = static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(info(type).bytes);
        if (max_shard_bytes > 0 && in_shard > 0 && in_shard + bytes > max_shard_bytes) {
            shards.emplace_back();
            in_shard = 0;
        }
        shards.back().push_back(
            {t.name, t.shape, params.subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.numel()))});
        in_shard += bytes;
        total += bytes;
    }
    std::vector<std::filesystem::path> stale;  // the previous weights that the new ones replace
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (name == weights_file || name == weights_index_file || (name.starts_with("model-") && name.ends_with(".safetensors")))
            stale.push_back(e.path());
    }
    std::vector<std::string> written;
    if (shards.size() == 1) {
        write_safetensors(dir / weights_file, shards[0], type);
        written.push_back(weights_file);
    } else {
        nlohmann::ordered_json index;
        index["metadata"] = {{"total_size", total}};
        index["weight_map"] = nlohmann::ordered_json::object();
        for (std::size_t i = 0; i < shards.size(); ++i) {
            char name[64];
            std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
            write_safetensors(dir / name, shards[i], type);
            written.push_back(name);
            for (const auto& t : shards[i]) index["weight_map"][t.name] = name;
        }
        write_file_atomic(dir / weights_index_file, index.dump(2) + "\n");
        written.push_back(weights_index_file);
    }
    for (const auto& p : stale)
        if (std::find(written.begin(), written.end(), p.filename().string()) == written.end()) std::filesystem::remove(p);
    write_file_atomic(dir / "config.json", config_to_json(c, generator).dump(2) + "\n");
}

}  // namespace vwt::io
