// softmax and log_softmax along one axis, with their backward ops: one
// thread per line, which sums in the reference kernel's order.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/element_math.h"
#include "backends/cuda/launch.cuh"

namespace spillway::backends::cuda {
namespace {

__global__ void Softmax(SoftmaxGeometry g, const float* x, float* y, int64_t lines) {
  for (int64_t line = GridStart(); line < lines; line += GridStride()) SoftmaxLine(g, x, y, line);
}

__global__ void SoftmaxBackward(SoftmaxGeometry g, const float* dy, const float* y, float* dx,
                                int64_t lines) {
  for (int64_t line = GridStart(); line < lines; line += GridStride()) {
    SoftmaxGradientLine(g, dy, y, dx, line);
  }
}

}  // namespace

cudaError_t LaunchSoftmax(const SoftmaxGeometry& geometry, const float* x, float* y,
                          cudaStream_t stream) {
  const int64_t lines = geometry.outer * geometry.inner;
  if (lines == 0 || geometry.length == 0) return cudaSuccess;
  Softmax<<<Blocks(lines), kThreads, 0, stream>>>(geometry, x, y, lines);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackward(const SoftmaxGeometry& geometry, const float* dy, const float* y,
                                  float* dx, cudaStream_t stream) {
  const int64_t lines = geometry.outer * geometry.inner;
  if (lines == 0 || geometry.length == 0) return cudaSuccess;
  SoftmaxBackward<<<Blocks(lines), kThreads, 0, stream>>>(geometry, dy, y, dx, lines);
  return cudaGetLastError();
}

}  // namespace spillway::backends::cuda
