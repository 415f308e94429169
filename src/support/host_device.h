// SPILLWAY_HOST_DEVICE marks a function that the CUDA kernels call on the
// device and the CPU (a backend, or a test of the kernels' arithmetic) calls
// on the host: __host__ __device__ under nvcc, nothing elsewhere.
#pragma once

#if defined(__CUDACC__)
#define SPILLWAY_HOST_DEVICE __host__ __device__
#else
#define SPILLWAY_HOST_DEVICE
#endif
