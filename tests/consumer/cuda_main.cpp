// A consumer of the installed vwt::cuda component: the CUDA policy's header and library link, and
// a context reports the devices it can reach (none on a machine without a GPU).
#include <cstdio>

#include <vwt/backend/cuda/backend.hpp>

int main() {
    static_assert(vwt::backend_policy<vwt::cuda::backend<float>>);
    std::printf("consumer: cuda available %s\n", vwt::cuda::context::available() ? "yes" : "no");
    return 0;
}
