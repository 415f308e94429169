// What one thread of a CUDA kernel computes for one element, where the index
// arithmetic is the risk: the windows of a max pool and its gradient, and the
// unravelling of a reduction. The kernels (pooling.cu, cuda_kernels.cu) call
// these on the device; cuda_test calls them on the host for every element and
// compares with the reference kernels, so the arithmetic is tested on a
// machine without a GPU.
//
// Plain C++17 (the kernels' dialect).
#pragma once

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"
#include "backends/host_device.h"

namespace spillway::backends::cuda {

SPILLWAY_HOST_DEVICE inline int64_t PoolInputOffset(const PoolGeometry& g, int64_t n, int64_t h,
                                                    int64_t w, int64_t c) {
  return ((n * g.h + h) * g.w + w) * g.c + c;
}

// The offset in x of the window of output [n, oh, ow, c]'s maximum, the first
// in window order on ties (as the reference kernel: a later value wins only
// if strictly greater); padded positions never take part.
SPILLWAY_HOST_DEVICE inline int64_t PoolArgMax(const float* x, const PoolGeometry& g, int64_t n,
                                               int64_t oh, int64_t ow, int64_t c) {
  int64_t best = -1;
  for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
    const int64_t ih = oh * g.stride_h - g.pad_top + kh;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      const int64_t iw = ow * g.stride_w - g.pad_left + kw;
      if (iw < 0 || iw >= g.w) continue;
      const int64_t i = PoolInputOffset(g, n, ih, iw, c);
      if (best < 0 || x[i] > x[best]) best = i;
    }
  }
  return best;
}

// Element `index` of the max pool's output (NHWC order).
SPILLWAY_HOST_DEVICE inline float MaxPoolAt(const float* x, const PoolGeometry& g, int64_t index) {
  int64_t rest = index;
  const int64_t c = rest % g.c;
  rest /= g.c;
  const int64_t ow = rest % g.out_w;
  rest /= g.out_w;
  const int64_t oh = rest % g.out_h;
  const int64_t n = rest / g.out_h;
  return x[PoolArgMax(x, g, n, oh, ow, c)];
}

// The first output index along one axis whose window reaches input index i:
// the smallest o with o * stride - pad + kernel - 1 >= i.
SPILLWAY_HOST_DEVICE inline int64_t FirstWindowReaching(int64_t i, int64_t stride, int64_t pad,
                                                        int64_t kernel) {
  const int64_t reach = i + pad - kernel + 1;
  if (reach <= 0) return 0;
  return (reach + stride - 1) / stride;
}

// Element `index` of the max pool's input gradient: the dy of every window
// whose maximum it is, added in output order (the reference kernel's order
// of additions, so the sum is its bits).
SPILLWAY_HOST_DEVICE inline float MaxPoolGradientAt(const float* dy, const float* x,
                                                    const PoolGeometry& g, int64_t index) {
  int64_t rest = index;
  const int64_t c = rest % g.c;
  rest /= g.c;
  const int64_t iw = rest % g.w;
  rest /= g.w;
  const int64_t ih = rest % g.h;
  const int64_t n = rest / g.h;
  // The windows containing (ih, iw); the last has o * stride - pad <= i.
  int64_t last_h = (ih + g.pad_top) / g.stride_h;
  int64_t last_w = (iw + g.pad_left) / g.stride_w;
  last_h = last_h < g.out_h - 1 ? last_h : g.out_h - 1;
  last_w = last_w < g.out_w - 1 ? last_w : g.out_w - 1;
  float sum = 0.0f;
  for (int64_t oh = FirstWindowReaching(ih, g.stride_h, g.pad_top, g.kernel_h); oh <= last_h;
       ++oh) {
    for (int64_t ow = FirstWindowReaching(iw, g.stride_w, g.pad_left, g.kernel_w); ow <= last_w;
         ++ow) {
      if (PoolArgMax(x, g, n, oh, ow, c) == index) {
        sum += dy[((n * g.out_h + oh) * g.out_w + ow) * g.c + c];
      }
    }
  }
  return sum;
}

// Element `out` of a reduce_sum: the sum, in double, of x over the reduced
// axes in row-major order (the reference kernel's order).
SPILLWAY_HOST_DEVICE inline float ReduceSumAt(const float* x, const ReduceGeometry& g,
                                              int64_t out) {
  int64_t base = 0;
  int64_t rest = out;
  for (int d = g.kept_rank - 1; d >= 0; --d) {
    base += (rest % g.kept_extent[d]) * g.kept_stride[d];
    rest /= g.kept_extent[d];
  }
  int64_t reduced_count = 1;
  for (int d = 0; d < g.reduced_rank; ++d) reduced_count *= g.reduced_extent[d];
  double sum = 0;
  for (int64_t j = 0; j < reduced_count; ++j) {
    int64_t offset = base;
    int64_t index = j;
    for (int d = g.reduced_rank - 1; d >= 0; --d) {
      offset += (index % g.reduced_extent[d]) * g.reduced_stride[d];
      index /= g.reduced_extent[d];
    }
    sum += x[offset];
  }
  return static_cast<float>(sum);
}

}  // namespace spillway::backends::cuda
