// expect-error: no matching|constraints not satisfied|invalid reference|no member
// A view of a policy's own memory cannot be read by host code: element access is host-only.
#include <vwt/backend/reference/backend.hpp>

int main() {
    using B = vwt::reference::backend<float>;
    B::buffer<float> device(6);
    const auto m = device.view().as_matrix(2, 3);
#ifdef VWT_EXPECT_OK
    std::vector<float> host(6);
    B::download(B::context{}, vwt::vector_view<const float, B::memory>(device.view()), std::span<float>(host));
    return host.size() == 6 && m.rows() == 2 ? 0 : 1;
#else
    return m(1, 2) > 0.0f ? 0 : 1;
#endif
}
