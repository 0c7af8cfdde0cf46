// vwt::cuda_emulation: the CUDA policy's kernels and host code compiled as C++ for the CPU
// (see include/vwt/backend/cuda/device_api.hpp).
#define VWT_CUDA_EMULATION 1
#include "device_api.cu"
