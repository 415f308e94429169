// Max pooling and global average pooling over NHWC activations, with their
// backward ops. One thread per output element (per input element for the
// max pool's backward, which gathers instead of scattering).
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"

namespace spillway::backends::cuda {
namespace {

__device__ inline int64_t Offset(const PoolGeometry& g, int64_t n, int64_t h, int64_t w,
                                 int64_t c) {
  return ((n * g.h + h) * g.w + w) * g.c + c;
}

// The offset in x of the window's maximum, the first in window order on ties
// (as the reference kernel: a later value wins only if strictly greater).
__device__ inline int64_t ArgMax(const float* x, const PoolGeometry& g, int64_t n, int64_t oh,
                                 int64_t ow, int64_t c) {
  int64_t best = -1;
  for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
    const int64_t ih = oh * g.stride_h - g.pad_top + kh;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      const int64_t iw = ow * g.stride_w - g.pad_left + kw;
      if (iw < 0 || iw >= g.w) continue;
      const int64_t i = Offset(g, n, ih, iw, c);
      if (best < 0 || x[i] > x[best]) best = i;
    }
  }
  return best;
}

__global__ void MaxPool(const float* x, float* y, PoolGeometry g, int64_t outputs) {
  for (int64_t i = GridStart(); i < outputs; i += GridStride()) {
    int64_t rest = i;
    const int64_t c = rest % g.c;
    rest /= g.c;
    const int64_t ow = rest % g.out_w;
    rest /= g.out_w;
    const int64_t oh = rest % g.out_h;
    const int64_t n = rest / g.out_h;
    y[i] = x[ArgMax(x, g, n, oh, ow, c)];
  }
}

// The first output index along one axis whose window reaches input index i:
// the smallest o with o * stride - pad + kernel - 1 >= i.
__device__ inline int64_t FirstWindow(int64_t i, int64_t stride, int64_t pad, int64_t kernel) {
  const int64_t reach = i + pad - kernel + 1;
  if (reach <= 0) return 0;
  return (reach + stride - 1) / stride;
}

__global__ void MaxPoolBackward(const float* dy, const float* x, float* dx, PoolGeometry g,
                                int64_t inputs) {
  for (int64_t i = GridStart(); i < inputs; i += GridStride()) {
    int64_t rest = i;
    const int64_t c = rest % g.c;
    rest /= g.c;
    const int64_t iw = rest % g.w;
    rest /= g.w;
    const int64_t ih = rest % g.h;
    const int64_t n = rest / g.h;
    // The windows that contain (ih, iw), in output order; the last has
    // o * stride - pad <= i.
    int64_t last_h = (ih + g.pad_top) / g.stride_h;
    int64_t last_w = (iw + g.pad_left) / g.stride_w;
    last_h = last_h < g.out_h - 1 ? last_h : g.out_h - 1;
    last_w = last_w < g.out_w - 1 ? last_w : g.out_w - 1;
    float sum = 0.0f;
    for (int64_t oh = FirstWindow(ih, g.stride_h, g.pad_top, g.kernel_h); oh <= last_h; ++oh) {
      for (int64_t ow = FirstWindow(iw, g.stride_w, g.pad_left, g.kernel_w); ow <= last_w; ++ow) {
        if (ArgMax(x, g, n, oh, ow, c) == i) {
          sum += dy[((n * g.out_h + oh) * g.out_w + ow) * g.c + c];
        }
      }
    }
    dx[i] = sum;
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
  if (count == 0) return cudaSuccess;
  GlobalAvgPoolBackward<<<Blocks(count), kThreads, 0, stream>>>(dy, dx, n, pixels, channels);
  return cudaGetLastError();
}

}  // namespace spillway::backends::cuda
