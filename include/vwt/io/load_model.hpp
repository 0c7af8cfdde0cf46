// A model of policy B from a model directory with as few copies of the weights as their files
// allow: used in place from the mapped file when it already is the parameter buffer (a single
// file vwt wrote, in B's weight dtype), else converted tensor by tensor straight into the
// model's buffer, each tensor's file pages handed back once converted. Peak memory is then about
// one copy of the weights in B's format, not the file plus a float copy.
#pragma once

#include <filesystem>
#include <utility>
#include <vector>

#include "../model/model.hpp"
#include "checkpoint.hpp"

namespace vwt::io {

template <class B>
model<B> load_model(const std::filesystem::path& dir, const typename B::context& ctx = {}, const log_function& log = {}) {
    using W = typename B::weight_type;
    constexpr index_t per_item = elements_per_item<W>;
    auto config = read_model_config(dir, log);
    const parameter_layout layout(config);
    checkpoint_weights weights(dir, layout);
    check_whole_items<W>(layout);
    if constexpr (B::memory::host_accessible) {
        if (const auto in_place = weights.in_place<W>(layout); !in_place.empty())
            return model<B>(std::move(config), borrowed_parameters<W>{in_place, weights.keep_alive()}, ctx);
        typename B::template buffer<W> params(layout.size() / per_item);
        W* at = params.view().data();
        for (const auto& t : layout.tensors()) weights.read(t, at + t.offset / per_item);
        return model<B>(std::move(config), std::move(params), ctx);
    } else {
        std::vector<W> host(static_cast<std::size_t>(layout.size() / per_item));
        for (const auto& t : layout.tensors()) weights.read(t, host.data() + t.offset / per_item);
        return model<B>(std::move(config), std::span<const W>(host), ctx);
    }
}

}  // namespace vwt::io
