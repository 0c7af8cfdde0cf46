// expect-error: no matching|constraints not satisfied|cannot convert|could not convert|no viable conversion
// Host memory handed to an op of a policy with its own memory space does not compile.
#include <vector>

#include <vwt/backend/reference/backend.hpp>

int main() {
    using B = vwt::reference::backend<float>;
    B::buffer<float> device(6);
#ifdef VWT_EXPECT_OK
    B::buffer<float> source(6);
    const auto from = source.view().as_matrix(2, 3);
#else
    std::vector<float> host(6, 1.0f);
    const vwt::host_matrix<float> from{host.data(), 2, 3, 3};
#endif
    B::copy(B::context{}, from, device.view().as_matrix(2, 3));
    return 0;
}
