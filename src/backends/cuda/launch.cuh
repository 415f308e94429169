// What the CUDA backend's kernel files share: the block size, the grid of a
// grid-stride loop and the loop itself. Internal to backends/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace spillway::backends::cuda {

inline constexpr int kThreads = 256;

// Enough blocks to cover n elements with a grid-stride loop, capped so that a
// huge tensor does not ask for more blocks than a launch allows (the loop
// covers the rest).
inline unsigned Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// Launches `kernel`, a grid-stride loop over `count` elements, on `stream`
// with `args` (nothing for none), and returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchGrid(void (*kernel)(Params...), int64_t count, cudaStream_t stream,
                       const Args&... args) {
  if (count == 0) return cudaSuccess;
  kernel<<<Blocks(count), kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

// The first index of this thread in a grid-stride loop, and the stride.
__device__ inline int64_t GridStart() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace spillway::backends::cuda
