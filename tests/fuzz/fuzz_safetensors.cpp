// libFuzzer target: the safetensors reader over arbitrary bytes. A malformed file must be a
// vwt::error; a file that parses must have every float tensor readable within its bytes.
#include <cstdint>
#include <vector>

#include <vwt/io/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const vwt::io::safetensors_view st(std::span(data, size), "fuzz.safetensors");
        std::vector<float> values;
        for (const auto& t : st.tensors()) {
            if (!vwt::io::is_float(t.type)) continue;
            values.resize(static_cast<std::size_t>(t.numel()));
            st.read_as(t, values.data());
        }
    } catch (const vwt::error&) {
    }
    return 0;
}
