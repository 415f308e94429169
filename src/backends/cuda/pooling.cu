// Max, average and global average pooling and bilinear and nearest resizing
// over NHWC activations, with their backward ops. One thread per output
// element (per input element for the backward ops of the pools and the
// resizes, which gather instead of scattering).
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/element_math.h"
#include "backends/cuda/launch.cuh"

namespace spillway::backends::cuda {
namespace {

__global__ void MaxPool(const float* x, float* y, PoolGeometry g, int64_t outputs) {
  for (int64_t i = GridStart(); i < outputs; i += GridStride()) y[i] = MaxPoolAt(x, g, i);
}

__global__ void MaxPoolBackward(const float* dy, const float* x, float* dx, PoolGeometry g,
                                int64_t inputs) {
  for (int64_t i = GridStart(); i < inputs; i += GridStride()) {
    dx[i] = MaxPoolGradientAt(dy, x, g, i);
  }
}

__global__ void AvgPool(const float* x, float* y, PoolGeometry g, int64_t outputs) {
  for (int64_t i = GridStart(); i < outputs; i += GridStride()) y[i] = AvgPoolAt(x, g, i);
}

__global__ void AvgPoolBackward(const float* dy, float* dx, PoolGeometry g, int64_t inputs) {
  for (int64_t i = GridStart(); i < inputs; i += GridStride()) dx[i] = AvgPoolGradientAt(dy, g, i);
}

__global__ void ResizeBilinear(const float* x, float* y, ResizeGeometry g, int64_t outputs) {
  for (int64_t i = GridStart(); i < outputs; i += GridStride()) y[i] = ResizeBilinearAt(x, g, i);
}

__global__ void ResizeBilinearBackward(const float* dy, float* dx, ResizeGeometry g,
                                       int64_t inputs) {
  for (int64_t i = GridStart(); i < inputs; i += GridStride()) {
    dx[i] = ResizeBilinearGradientAt(dy, g, i);
  }
}

__global__ void ResizeNearest(const float* x, float* y, ResizeGeometry g, int64_t outputs) {
  for (int64_t i = GridStart(); i < outputs; i += GridStride()) y[i] = ResizeNearestAt(x, g, i);
}

__global__ void ResizeNearestBackward(const float* dy, float* dx, ResizeGeometry g,
                                      int64_t inputs) {
  for (int64_t i = GridStart(); i < inputs; i += GridStride()) {
    dx[i] = ResizeNearestGradientAt(dy, g, i);
  }
}

__global__ void GlobalAvgPool(const float* x, float* y, int64_t n, int64_t pixels,
                              int64_t channels) {
  for (int64_t i = GridStart(); i < n * channels; i += GridStride()) {
    const int64_t image = i / channels;
    const int64_t c = i % channels;
    const float* first = x + image * pixels * channels + c;
    double sum = 0;
    for (int64_t p = 0; p < pixels; ++p) sum += first[p * channels];
    y[i] = static_cast<float>(sum) / static_cast<float>(pixels);
  }
}

__global__ void GlobalAvgPoolBackward(const float* dy, float* dx, int64_t n, int64_t pixels,
                                      int64_t channels) {
  const int64_t count = n * pixels * channels;
  for (int64_t i = GridStart(); i < count; i += GridStride()) {
    const int64_t c = i % channels;
    const int64_t image = i / (pixels * channels);
    dx[i] = dy[image * channels + c] / static_cast<float>(pixels);
  }
}

}  // namespace

cudaError_t LaunchMaxPool(const float* x, float* y, const PoolGeometry& geometry,
                          cudaStream_t stream) {
  const int64_t outputs = geometry.n * geometry.out_h * geometry.out_w * geometry.c;
  if (outputs == 0) return cudaSuccess;
  if (geometry.stride_h < 1 || geometry.stride_w < 1) return cudaErrorInvalidValue;
  MaxPool<<<Blocks(outputs), kThreads, 0, stream>>>(x, y, geometry, outputs);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPoolBackward(const float* dy, const float* x, float* dx,
                                  const PoolGeometry& geometry, cudaStream_t stream) {
  const int64_t inputs = geometry.n * geometry.h * geometry.w * geometry.c;
  if (inputs == 0) return cudaSuccess;
  if (geometry.stride_h < 1 || geometry.stride_w < 1) return cudaErrorInvalidValue;
  MaxPoolBackward<<<Blocks(inputs), kThreads, 0, stream>>>(dy, x, dx, geometry, inputs);
  return cudaGetLastError();
}

cudaError_t LaunchGlobalAvgPool(const float* x, float* y, int64_t n, int64_t pixels,
                                int64_t channels, cudaStream_t stream) {
  if (n * channels == 0) return cudaSuccess;
  GlobalAvgPool<<<Blocks(n * channels), kThreads, 0, stream>>>(x, y, n, pixels, channels);
  return cudaGetLastError();
}

cudaError_t LaunchGlobalAvgPoolBackward(const float* dy, float* dx, int64_t n, int64_t pixels,
                                        int64_t channels, cudaStream_t stream) {
  const int64_t count = n * pixels * channels;
  return LaunchGrid(GlobalAvgPoolBackward, count, stream, dy, dx, n, pixels, channels);
}

cudaError_t LaunchAvgPool(const float* x, float* y, const PoolGeometry& geometry,
                          cudaStream_t stream) {
  const int64_t outputs = geometry.n * geometry.out_h * geometry.out_w * geometry.c;
  return LaunchGrid(AvgPool, outputs, stream, x, y, geometry, outputs);
}

cudaError_t LaunchAvgPoolBackward(const float* dy, float* dx, const PoolGeometry& geometry,
                                  cudaStream_t stream) {
  const int64_t inputs = geometry.n * geometry.h * geometry.w * geometry.c;
  return LaunchGrid(AvgPoolBackward, inputs, stream, dy, dx, geometry, inputs);
}

cudaError_t LaunchResizeBilinear(const float* x, float* y, const ResizeGeometry& geometry,
                                 cudaStream_t stream) {
  const int64_t outputs = geometry.n * geometry.out_h * geometry.out_w * geometry.c;
  return LaunchGrid(ResizeBilinear, outputs, stream, x, y, geometry, outputs);
}

cudaError_t LaunchResizeBilinearBackward(const float* dy, float* dx, const ResizeGeometry& geometry,
                                         cudaStream_t stream) {
  const int64_t inputs = geometry.n * geometry.h * geometry.w * geometry.c;
  return LaunchGrid(ResizeBilinearBackward, inputs, stream, dy, dx, geometry, inputs);
}

cudaError_t LaunchResizeNearest(const float* x, float* y, const ResizeGeometry& geometry,
                                cudaStream_t stream) {
  const int64_t outputs = geometry.n * geometry.out_h * geometry.out_w * geometry.c;
  return LaunchGrid(ResizeNearest, outputs, stream, x, y, geometry, outputs);
}

cudaError_t LaunchResizeNearestBackward(const float* dy, float* dx, const ResizeGeometry& geometry,
                                        cudaStream_t stream) {
  const int64_t inputs = geometry.n * geometry.h * geometry.w * geometry.c;
  return LaunchGrid(ResizeNearestBackward, inputs, stream, dy, dx, geometry, inputs);
}

}  // namespace spillway::backends::cuda
