// What one thread of a CUDA kernel computes, where the index arithmetic is
// the risk: the windows of a max pool and its gradient, the unravelling of a
// reduction, batch norm's chunked per-channel sums and its element-wise
// passes, layer norm's rows and features, the cross-entropy's rows and
// chunks, softmax's lines. The kernels
// (pooling.cu, cuda_kernels.cu, normalization.cu, loss.cu, softmax.cu) call
// these on the device; cuda_test calls them on the host, in the kernels'
// order, and compares with the reference kernels, so the arithmetic is tested
// on a machine without a GPU. (What the host cannot test: the launch, shared
// memory, and the device's contraction of a * b + c into one rounding.)
//
// Plain C++17 (the kernels' dialect).
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_kernels.h"
#include "program/workspace_sizes.h"
#include "support/host_device.h"

namespace spillway::backends::cuda {

// ---- The activations (ActivationParams), as the reference kernels compute
// them in float: the same constants, rounded once from double, and the same
// operations in the same order (erff, tanhf and expf are the float functions
// the reference's std::erf, std::tanh and std::exp call on float). ----

inline constexpr double kSqrt2 = 1.4142135623730951;      // std::numbers::sqrt2
inline constexpr double kInvSqrtPi = 0.5641895835477563;  // std::numbers::inv_sqrtpi
inline constexpr float kGeluTanhScale = static_cast<float>(kSqrt2 * kInvSqrtPi);  // √(2/π)
inline constexpr float kGeluTanhCubic = static_cast<float>(0.044715);
inline constexpr float kGeluInvSqrt2 = static_cast<float>(kSqrt2 / 2);
inline constexpr float kGeluInvSqrt2Pi = static_cast<float>(kInvSqrtPi / kSqrt2);

SPILLWAY_HOST_DEVICE inline float ActivationAt(float x, const ActivationParams& p) {
  switch (p.kind) {
    case Activation::kGelu:
      return 0.5f * x * (1.0f + erff(x * kGeluInvSqrt2));
    case Activation::kGeluTanh: {
      const float inner = kGeluTanhScale * (x + kGeluTanhCubic * x * x * x);
      return 0.5f * x * (1.0f + tanhf(inner));
    }
    case Activation::kSigmoid:
      return 1.0f / (1.0f + expf(-x));
    case Activation::kTanh:
      return tanhf(x);
    case Activation::kLeakyRelu:
      return x > 0.0f ? x : p.alpha * x;
    case Activation::kClip:
      // So that NaN passes through.
      return x < p.min ? p.min : (x > p.max ? p.max : x);
  }
  return x;
}

// `saved` is what the gradient op reads (LaunchActivationGradient).
SPILLWAY_HOST_DEVICE inline float ActivationGradientAt(float dy, float saved,
                                                       const ActivationParams& p) {
  switch (p.kind) {
    case Activation::kGelu: {
      const float x = saved;
      const float cdf = 0.5f * (1.0f + erff(x * kGeluInvSqrt2));
      const float pdf = kGeluInvSqrt2Pi * expf(-0.5f * x * x);
      return dy * (cdf + x * pdf);
    }
    case Activation::kGeluTanh: {
      const float x = saved;
      const float t = tanhf(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x));
      const float du_dx = kGeluTanhScale * (1.0f + 3.0f * kGeluTanhCubic * x * x);
      return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx);
    }
    case Activation::kSigmoid:
      return dy * saved * (1.0f - saved);
    case Activation::kTanh:
      return dy * (1.0f - saved * saved);
    case Activation::kLeakyRelu:
      return saved > 0.0f ? dy : p.alpha * dy;
    case Activation::kClip:
      // 0 at the bounds and outside; NaN passes dy.
      return saved <= p.min || saved >= p.max ? 0.0f : dy;
  }
  return dy;
}

// ---- NHWC indexing, and the max pool ----

// An element of an NHWC tensor of height h, width w and c channels.
struct NhwcIndex {
  int64_t n = 0, h = 0, w = 0, c = 0;
};

SPILLWAY_HOST_DEVICE inline NhwcIndex UnravelNhwc(int64_t index, int64_t h, int64_t w, int64_t c) {
  NhwcIndex at;
  at.c = index % c;
  index /= c;
  at.w = index % w;
  index /= w;
  at.h = index % h;
  at.n = index / h;
  return at;
}

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
  const NhwcIndex at = UnravelNhwc(index, g.out_h, g.out_w, g.c);
  return x[PoolArgMax(x, g, at.n, at.h, at.w, at.c)];
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
  const NhwcIndex at = UnravelNhwc(index, g.h, g.w, g.c);
  const int64_t n = at.n, ih = at.h, iw = at.w, c = at.c;
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

// The real inputs of output (oh, ow)'s window along each axis: rows
// [row_begin, row_end) and columns [column_begin, column_end) of x.
struct PoolWindow {
  int64_t row_begin = 0, row_end = 0, column_begin = 0, column_end = 0;
};

SPILLWAY_HOST_DEVICE inline PoolWindow PoolWindowAt(const PoolGeometry& g, int64_t oh, int64_t ow) {
  const int64_t top = oh * g.stride_h - g.pad_top;
  const int64_t left = ow * g.stride_w - g.pad_left;
  PoolWindow window;
  window.row_begin = top > 0 ? top : 0;
  window.row_end = top + g.kernel_h < g.h ? top + g.kernel_h : g.h;
  window.column_begin = left > 0 ? left : 0;
  window.column_end = left + g.kernel_w < g.w ? left + g.kernel_w : g.w;
  return window;
}

// An average's divisor: the window's real inputs, or the whole kernel.
SPILLWAY_HOST_DEVICE inline float AvgPoolDivisor(const PoolGeometry& g, const PoolWindow& window) {
  if (g.count_include_pad) return static_cast<float>(g.kernel_h * g.kernel_w);
  return static_cast<float>((window.row_end - window.row_begin) *
                            (window.column_end - window.column_begin));
}

// Element `index` of the average pool's output (NHWC order).
SPILLWAY_HOST_DEVICE inline float AvgPoolAt(const float* x, const PoolGeometry& g, int64_t index) {
  const NhwcIndex out = UnravelNhwc(index, g.out_h, g.out_w, g.c);
  const PoolWindow window = PoolWindowAt(g, out.h, out.w);
  float sum = 0.0f;
  for (int64_t h = window.row_begin; h < window.row_end; ++h) {
    for (int64_t w = window.column_begin; w < window.column_end; ++w) {
      sum += x[PoolInputOffset(g, out.n, h, w, out.c)];
    }
  }
  return sum / AvgPoolDivisor(g, window);
}

// Element `index` of the average pool's input gradient: dy / divisor of
// every window that holds it, added in output order.
SPILLWAY_HOST_DEVICE inline float AvgPoolGradientAt(const float* dy, const PoolGeometry& g,
                                                    int64_t index) {
  const NhwcIndex at = UnravelNhwc(index, g.h, g.w, g.c);
  int64_t last_h = (at.h + g.pad_top) / g.stride_h;
  int64_t last_w = (at.w + g.pad_left) / g.stride_w;
  last_h = last_h < g.out_h - 1 ? last_h : g.out_h - 1;
  last_w = last_w < g.out_w - 1 ? last_w : g.out_w - 1;
  float sum = 0.0f;
  for (int64_t oh = FirstWindowReaching(at.h, g.stride_h, g.pad_top, g.kernel_h); oh <= last_h;
       ++oh) {
    for (int64_t ow = FirstWindowReaching(at.w, g.stride_w, g.pad_left, g.kernel_w); ow <= last_w;
         ++ow) {
      const float share = dy[((at.n * g.out_h + oh) * g.out_w + ow) * g.c + at.c] /
                          AvgPoolDivisor(g, PoolWindowAt(g, oh, ow));
      sum += share;
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

// ---- Bilinear resizing (ResizeGeometry), as the reference computes it in
// float ----

// The two input pixels an output pixel reads along one axis, and their
// weights.
struct ResizeTaps {
  int64_t near = 0;
  int64_t far = 0;
  float near_weight = 1.0f;
  float far_weight = 0.0f;
};

SPILLWAY_HOST_DEVICE inline ResizeTaps ResizeTapsAlong(int64_t out_index, int64_t in_size,
                                                       int64_t out_size, bool align_corners) {
  float source = 0.0f;
  if (align_corners) {
    if (out_size > 1) {
      source = static_cast<float>(out_index) * static_cast<float>(in_size - 1) /
               static_cast<float>(out_size - 1);
    }
  } else {
    source = (static_cast<float>(out_index) + 0.5f) * static_cast<float>(in_size) /
                 static_cast<float>(out_size) -
             0.5f;
    if (source < 0.0f) source = 0.0f;
  }
  ResizeTaps taps;
  taps.near = static_cast<int64_t>(source);  // floor: source >= 0
  taps.far = taps.near < in_size - 1 ? taps.near + 1 : taps.near;
  taps.far_weight = source - static_cast<float>(taps.near);
  taps.near_weight = 1.0f - taps.far_weight;
  return taps;
}

// Output element `index` (NHWC) of the bilinear resize.
SPILLWAY_HOST_DEVICE inline float ResizeBilinearAt(const float* x, const ResizeGeometry& g,
                                                   int64_t index) {
  const NhwcIndex out = UnravelNhwc(index, g.out_h, g.out_w, g.c);
  const int64_t n = out.n, oh = out.h, ow = out.w, c = out.c;
  const ResizeTaps h = ResizeTapsAlong(oh, g.h, g.out_h, g.align_corners);
  const ResizeTaps w = ResizeTapsAlong(ow, g.w, g.out_w, g.align_corners);
  const auto at = [&](int64_t row, int64_t column) {
    return x[((n * g.h + row) * g.w + column) * g.c + c];
  };
  const float top = w.near_weight * at(h.near, w.near) + w.far_weight * at(h.near, w.far);
  const float bottom = w.near_weight * at(h.far, w.near) + w.far_weight * at(h.far, w.far);
  return h.near_weight * top + h.far_weight * bottom;
}

// The first output index along an axis whose taps may reach input index i:
// the first whose near tap is at least i - 1 (near taps never decrease
// along the axis, since every float operation that makes them is monotone).
SPILLWAY_HOST_DEVICE inline int64_t FirstOutputReaching(int64_t i, int64_t in_size,
                                                        int64_t out_size, bool align_corners) {
  int64_t lo = 0;
  int64_t hi = out_size;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ResizeTapsAlong(mid, in_size, out_size, align_corners).near < i - 1) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Input element `index` (NHWC) of the bilinear resize's gradient: the sum of
// weight * dy over every output pixel that read it, added as the reference
// kernel scatters them: output pixels in row-major order, each one's taps in
// the order (near, near), (near, far), (far, near), (far, far).
SPILLWAY_HOST_DEVICE inline float ResizeBilinearGradientAt(const float* dy, const ResizeGeometry& g,
                                                           int64_t index) {
  const NhwcIndex at = UnravelNhwc(index, g.h, g.w, g.c);
  const int64_t n = at.n, ih = at.h, iw = at.w, c = at.c;
  float sum = 0.0f;
  for (int64_t oh = FirstOutputReaching(ih, g.h, g.out_h, g.align_corners); oh < g.out_h; ++oh) {
    const ResizeTaps h = ResizeTapsAlong(oh, g.h, g.out_h, g.align_corners);
    if (h.near > ih) break;
    if (h.near != ih && h.far != ih) continue;
    for (int64_t ow = FirstOutputReaching(iw, g.w, g.out_w, g.align_corners); ow < g.out_w; ++ow) {
      const ResizeTaps w = ResizeTapsAlong(ow, g.w, g.out_w, g.align_corners);
      if (w.near > iw) break;
      if (w.near != iw && w.far != iw) continue;
      const float grad = dy[((n * g.out_h + oh) * g.out_w + ow) * g.c + c];
      if (h.near == ih && w.near == iw) sum += h.near_weight * w.near_weight * grad;
      if (h.near == ih && w.far == iw) sum += h.near_weight * w.far_weight * grad;
      if (h.far == ih && w.near == iw) sum += h.far_weight * w.near_weight * grad;
      if (h.far == ih && w.far == iw) sum += h.far_weight * w.far_weight * grad;
    }
  }
  return sum;
}

// Output element `index` of the nearest resize: the input pixel
// floor(dst * in / out) along each axis, computed in integers as the
// reference kernel computes it.
SPILLWAY_HOST_DEVICE inline float ResizeNearestAt(const float* x, const ResizeGeometry& g,
                                                  int64_t index) {
  const NhwcIndex out = UnravelNhwc(index, g.out_h, g.out_w, g.c);
  const int64_t h = out.h * g.h / g.out_h;
  const int64_t w = out.w * g.w / g.out_w;
  return x[((out.n * g.h + h) * g.w + w) * g.c + out.c];
}

// The first output index along an axis that copies input index i or a later
// one: floor(o * in / out) >= i exactly when o >= ceil(i * out / in).
SPILLWAY_HOST_DEVICE inline int64_t FirstNearestOutput(int64_t i, int64_t in_size,
                                                       int64_t out_size) {
  return (i * out_size + in_size - 1) / in_size;
}

// Input element `index` of the nearest resize's gradient: the dy of every
// output pixel that copied it, added in dy's NHWC order (the reference's).
SPILLWAY_HOST_DEVICE inline float ResizeNearestGradientAt(const float* dy, const ResizeGeometry& g,
                                                          int64_t index) {
  const NhwcIndex at = UnravelNhwc(index, g.h, g.w, g.c);
  const int64_t oh_end = FirstNearestOutput(at.h + 1, g.h, g.out_h);
  const int64_t ow_end = FirstNearestOutput(at.w + 1, g.w, g.out_w);
  float sum = 0.0f;
  for (int64_t oh = FirstNearestOutput(at.h, g.h, g.out_h); oh < oh_end; ++oh) {
    for (int64_t ow = FirstNearestOutput(at.w, g.w, g.out_w); ow < ow_end; ++ow) {
      sum += dy[((at.n * g.out_h + oh) * g.out_w + ow) * g.c + at.c];
    }
  }
  return sum;
}

// ---- Strided views (StridedView) and embeddings ----

// Where element i of the view's dense tensor lies in the tensor it reads:
// i unravelled over the extents, last axis fastest.
SPILLWAY_HOST_DEVICE inline int64_t StridedOffset(const StridedView& v, int64_t i) {
  int64_t offset = v.base;
  for (int d = v.rank - 1; d >= 0; --d) {
    offset += (i % v.extent[d]) * v.stride[d];
    i /= v.extent[d];
  }
  return offset;
}

// The index of a table row, i32 or i64, or -1 outside the table's `rows`.
SPILLWAY_HOST_DEVICE inline int64_t EmbeddingRow(const void* indices, bool indices_i32, int64_t i,
                                                 int64_t rows) {
  const int64_t row = indices_i32 ? static_cast<const int32_t*>(indices)[i]
                                  : static_cast<const int64_t*>(indices)[i];
  return row >= 0 && row < rows ? row : -1;
}

// Column d of an embedding's gradient: dy's rows added into dtable's rows
// in index order (dtable zeroed before). False at the first index outside
// the table, having added the rows before it.
SPILLWAY_HOST_DEVICE inline bool EmbeddingGradientColumn(const float* dy, const void* indices,
                                                         bool indices_i32, int64_t count,
                                                         int64_t rows, int64_t width, int64_t d,
                                                         float* dtable) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = EmbeddingRow(indices, indices_i32, i, rows);
    if (row < 0) return false;
    dtable[row * width + d] += dy[i * width + d];
  }
  return true;
}

// ---- Softmax and log_softmax (SoftmaxGeometry), one line per thread ----

// The element i of line (o, k).
SPILLWAY_HOST_DEVICE inline int64_t SoftmaxOffset(const SoftmaxGeometry& g, int64_t o, int64_t i,
                                                  int64_t k) {
  return (o * g.length + i) * g.inner + k;
}

// How many leading elements of line (o, .) the softmax sees: all of them, or
// a causal query's keys (none where there are more queries than keys).
SPILLWAY_HOST_DEVICE inline int64_t SoftmaxVisible(const SoftmaxGeometry& g, int64_t o) {
  if (g.causal_queries == 0) return g.length;
  const int64_t visible = o % g.causal_queries + (g.length - g.causal_queries) + 1;
  return visible < 0 ? 0 : (visible > g.length ? g.length : visible);
}

// Line `line` (= o * inner + k) of softmax or log_softmax: the maximum of
// the visible elements (a later one wins only if greater, as std::max), the
// sum of exp(x - max) in float in index order, then each output.
SPILLWAY_HOST_DEVICE inline void SoftmaxLine(const SoftmaxGeometry& g, const float* x, float* y,
                                             int64_t line) {
  const int64_t o = line / g.inner;
  const int64_t k = line % g.inner;
  const int64_t visible = SoftmaxVisible(g, o);
  float max = 0.0f;
  float sum = 0.0f;
  if (visible > 0) {
    max = x[SoftmaxOffset(g, o, 0, k)];
    for (int64_t i = 1; i < visible; ++i) {
      const float v = x[SoftmaxOffset(g, o, i, k)];
      max = max < v ? v : max;
    }
    for (int64_t i = 0; i < visible; ++i) sum += expf(x[SoftmaxOffset(g, o, i, k)] - max);
  }
  if (g.kind == SoftmaxKind::kLogSoftmax) {
    const float log_sum = logf(sum);
    for (int64_t i = 0; i < g.length; ++i) {
      const int64_t at = SoftmaxOffset(g, o, i, k);
      y[at] = x[at] - max - log_sum;
    }
    return;
  }
  for (int64_t i = 0; i < g.length; ++i) {
    const int64_t at = SoftmaxOffset(g, o, i, k);
    y[at] = i < visible ? expf(x[at] - max) / sum : 0.0f;
  }
}

// Line `line` of the backward op: the line's sum (of dy * y for softmax, of
// dy for log_softmax) in float in index order, then each dx.
SPILLWAY_HOST_DEVICE inline void SoftmaxGradientLine(const SoftmaxGeometry& g, const float* dy,
                                                     const float* y, float* dx, int64_t line) {
  const int64_t o = line / g.inner;
  const int64_t k = line % g.inner;
  const bool log = g.kind == SoftmaxKind::kLogSoftmax;
  float sum = 0.0f;
  for (int64_t i = 0; i < g.length; ++i) {
    const int64_t at = SoftmaxOffset(g, o, i, k);
    sum += log ? dy[at] : dy[at] * y[at];
  }
  for (int64_t i = 0; i < g.length; ++i) {
    const int64_t at = SoftmaxOffset(g, o, i, k);
    dx[at] = log ? dy[at] - expf(y[at]) * sum : y[at] * (dy[at] - sum);
  }
}

// ---- Adam (AdamSettings) ----

// The update's scalar factors for step t, computed in double and rounded to
// float once, as the reference kernel computes them. Trivially constructible
// (no member initializers; MakeAdamFactors sets every member), since the
// kernel keeps one in shared memory.
struct AdamFactors {
  float step_size;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float shrink;                 // 1 - lr * weight_decay (decoupled)
  float l2;                     // weight_decay (not decoupled)
  float beta1, beta2, one_minus_beta1, one_minus_beta2, epsilon;
  bool decay;
  bool decoupled;
};

SPILLWAY_HOST_DEVICE inline AdamFactors MakeAdamFactors(int64_t step, const AdamSettings& s) {
  const double t = static_cast<double>(step);
  AdamFactors f;
  f.step_size = static_cast<float>(s.lr / (1.0 - pow(s.beta1, t)));
  f.bias_correction2_sqrt = static_cast<float>(sqrt(1.0 - pow(s.beta2, t)));
  f.shrink = static_cast<float>(1.0 - s.lr * s.weight_decay);
  f.l2 = static_cast<float>(s.weight_decay);
  f.beta1 = static_cast<float>(s.beta1);
  f.beta2 = static_cast<float>(s.beta2);
  f.one_minus_beta1 = static_cast<float>(1.0 - s.beta1);
  f.one_minus_beta2 = static_cast<float>(1.0 - s.beta2);
  f.epsilon = static_cast<float>(s.epsilon);
  f.decay = s.weight_decay != 0.0;
  f.decoupled = s.decoupled;
  return f;
}

// Element i of the update, in the reference kernel's order of operations.
SPILLWAY_HOST_DEVICE inline void AdamUpdateAt(const AdamFactors& f, const float* param,
                                              const float* grad, const float* m, const float* v,
                                              int64_t i, float* param_out, float* m_out,
                                              float* v_out) {
  float p = param[i];
  float g = grad[i];
  if (f.decay) {
    if (f.decoupled) {
      p *= f.shrink;
    } else {
      g += f.l2 * p;
    }
  }
  const float new_m = f.beta1 * m[i] + f.one_minus_beta1 * g;
  const float new_v = f.beta2 * v[i] + f.one_minus_beta2 * g * g;
  const float denominator = sqrtf(new_v) / f.bias_correction2_sqrt + f.epsilon;
  if (m_out != nullptr) m_out[i] = new_m;
  if (v_out != nullptr) v_out[i] = new_v;
  if (param_out != nullptr) param_out[i] = p - f.step_size * (new_m / denominator);
}

// ---- Batch norm ----
//
// x is [rows, channels]. A chunk's partial sums per channel are kBatchNormLanes
// lanes' sums (lane l takes the chunk's rows l, l + lanes, ...), added in lane
// order; the chunks' partials are added in chunk order.

inline constexpr int kBatchNormLanes = 8;

struct PairSum {
  double first = 0;
  double second = 0;
};

// The rows [begin, end) of a chunk.
SPILLWAY_HOST_DEVICE inline int64_t ChunkBegin(const program::BatchNormChunking& chunking,
                                               int64_t chunk) {
  return chunk * chunking.rows_per_chunk;
}
SPILLWAY_HOST_DEVICE inline int64_t ChunkEnd(const program::BatchNormChunking& chunking,
                                             int64_t chunk, int64_t rows) {
  const int64_t end = (chunk + 1) * chunking.rows_per_chunk;
  return end < rows ? end : rows;
}

// One lane's sums of x and x^2 over its rows of a chunk, for one channel.
SPILLWAY_HOST_DEVICE inline PairSum LaneMoments(const float* x, int64_t rows, int64_t channels,
                                                const program::BatchNormChunking& chunking,
                                                int64_t chunk, int lane, int64_t channel) {
  PairSum sums;
  const int64_t end = ChunkEnd(chunking, chunk, rows);
  for (int64_t r = ChunkBegin(chunking, chunk) + lane; r < end; r += kBatchNormLanes) {
    const double value = x[r * channels + channel];
    sums.first += value;
    sums.second += value * value;
  }
  return sums;
}

// One lane's sums of dy and dy * x_hat over its rows of a chunk.
SPILLWAY_HOST_DEVICE inline PairSum LaneGradientSums(const float* dy, const float* x, float mean,
                                                     float inv_std, int64_t rows, int64_t channels,
                                                     const program::BatchNormChunking& chunking,
                                                     int64_t chunk, int lane, int64_t channel) {
  PairSum sums;
  const int64_t end = ChunkEnd(chunking, chunk, rows);
  for (int64_t r = ChunkBegin(chunking, chunk) + lane; r < end; r += kBatchNormLanes) {
    const int64_t i = r * channels + channel;
    const float x_hat = (x[i] - mean) * inv_std;
    sums.first += dy[i];
    sums.second += static_cast<double>(dy[i]) * x_hat;
  }
  return sums;
}

// A channel's totals: its partials ([chunks][channels][2]) in chunk order.
SPILLWAY_HOST_DEVICE inline PairSum ChannelTotals(const double* partials, int64_t chunks,
                                                  int64_t channels, int64_t channel) {
  PairSum totals;
  for (int64_t k = 0; k < chunks; ++k) {
    totals.first += partials[(k * channels + channel) * 2];
    totals.second += partials[(k * channels + channel) * 2 + 1];
  }
  return totals;
}

// Batch norm's and layer norm's 1 / sqrt(variance + epsilon).
SPILLWAY_HOST_DEVICE inline float InvStd(float variance, float epsilon) {
  return 1.0f / sqrtf(variance + epsilon);
}

// The batch's mean, biased variance and inverse standard deviation from the
// totals of x and x^2.
struct BatchStatistics {
  float mean = 0;
  float variance = 0;
  float inv_std = 0;
};
SPILLWAY_HOST_DEVICE inline BatchStatistics FinishBatchStatistics(const PairSum& totals,
                                                                  int64_t rows, float epsilon) {
  const double mean = totals.first / static_cast<double>(rows);
  double variance = totals.second / static_cast<double>(rows) - mean * mean;
  variance = variance < 0 ? 0 : variance;
  BatchStatistics statistics;
  statistics.mean = static_cast<float>(mean);
  statistics.variance = static_cast<float>(variance);
  statistics.inv_std = InvStd(statistics.variance, epsilon);
  return statistics;
}

// A running average: (1 - momentum) * running + momentum * batch.
SPILLWAY_HOST_DEVICE inline float RunningAverage(float running, float batch, float momentum) {
  return (1.0f - momentum) * running + momentum * batch;
}

// Channel c's statistics from the chunks' partial sums: the batch's mean and
// inverse standard deviation to `mean` and `inv_std` (and to the saved
// statistics where given), and the running statistics updated in place where
// given (the variance unbiased, rows / (rows - 1), as PyTorch's).
SPILLWAY_HOST_DEVICE inline void FinishChannelMoments(const double* partials, int64_t chunks,
                                                      int64_t rows, int64_t channels, int64_t c,
                                                      const BatchNormTraining& settings,
                                                      float* mean, float* inv_std,
                                                      float* saved_mean, float* saved_inv_std,
                                                      float* running_mean, float* running_var) {
  const BatchStatistics batch =
      FinishBatchStatistics(ChannelTotals(partials, chunks, channels, c), rows, settings.epsilon);
  mean[c] = batch.mean;
  inv_std[c] = batch.inv_std;
  if (saved_mean != nullptr) saved_mean[c] = batch.mean;
  if (saved_inv_std != nullptr) saved_inv_std[c] = batch.inv_std;
  const float bessel = static_cast<float>(rows) / static_cast<float>(rows - 1);
  if (running_mean != nullptr) {
    running_mean[c] = RunningAverage(running_mean[c], batch.mean, settings.momentum);
  }
  if (running_var != nullptr) {
    running_var[c] = RunningAverage(running_var[c], batch.variance * bessel, settings.momentum);
  }
}

// Channel c's gradient sums from the chunks' partial sums: sum(dy) and
// sum(dy * x_hat) for the input gradient, and to dbeta and dgamma where given.
SPILLWAY_HOST_DEVICE inline void FinishChannelGradientSums(const double* partials, int64_t chunks,
                                                           int64_t channels, int64_t c,
                                                           float* sum_dy, float* sum_dy_x_hat,
                                                           float* dgamma, float* dbeta) {
  const PairSum totals = ChannelTotals(partials, chunks, channels, c);
  sum_dy[c] = static_cast<float>(totals.first);
  sum_dy_x_hat[c] = static_cast<float>(totals.second);
  if (dgamma != nullptr) dgamma[c] = static_cast<float>(totals.second);
  if (dbeta != nullptr) dbeta[c] = static_cast<float>(totals.first);
}

// The one normalization expression (as the reference kernel's Normalize), of
// batch norm and layer norm alike.
SPILLWAY_HOST_DEVICE inline float Normalize(float x, float mean, float inv_std, float gamma,
                                            float beta) {
  return (x - mean) * inv_std * gamma + beta;
}

// dx of one element: gamma * inv_std * (dy - sum_dy / rows - x_hat *
// sum_dy_x_hat / rows) in training, gamma * inv_std * dy in inference.
SPILLWAY_HOST_DEVICE inline float BatchNormInputGradient(float dy, float x, float gamma, float mean,
                                                         float inv_std, float sum_dy,
                                                         float sum_dy_x_hat, float rows,
                                                         bool training) {
  const float scale = gamma * inv_std;
  if (!training) return scale * dy;
  const float x_hat = (x - mean) * inv_std;
  return scale * (dy - sum_dy / rows - x_hat * sum_dy_x_hat / rows);
}

// ---- Layer norm ----
//
// x is [rows, features], normalized per row. The forward op and dx take one
// thread per row, dgamma and dbeta one per feature; each sums in float in the
// reference kernel's order (backends/reference/normalization.cc).

// Row r: its mean and rstd (written where given) and y (where given).
SPILLWAY_HOST_DEVICE inline void LayerNormRow(const float* x, const float* gamma, const float* beta,
                                              int64_t features, float epsilon, int64_t r, float* y,
                                              float* mean_out, float* rstd_out) {
  const float* row = x + r * features;
  const float count = static_cast<float>(features);
  float sum = 0.0f;
  for (int64_t c = 0; c < features; ++c) sum += row[c];
  const float mean = sum / count;
  float squares = 0.0f;
  for (int64_t c = 0; c < features; ++c) squares += (row[c] - mean) * (row[c] - mean);
  const float rstd = InvStd(squares / count, epsilon);
  if (mean_out != nullptr) mean_out[r] = mean;
  if (rstd_out != nullptr) rstd_out[r] = rstd;
  if (y == nullptr) return;
  for (int64_t c = 0; c < features; ++c) {
    y[r * features + c] = Normalize(row[c], mean, rstd, gamma[c], beta[c]);
  }
}

// Row r of dx: with x_hat = (x - mean) * rstd and g = dy * gamma,
// rstd * (g - sum(g) / features - x_hat * sum(g * x_hat) / features).
SPILLWAY_HOST_DEVICE inline void LayerNormGradientRow(const float* dy, const float* x,
                                                      const float* gamma, const float* mean,
                                                      const float* rstd, int64_t features,
                                                      int64_t r, float* dx) {
  const int64_t base = r * features;
  const float count = static_cast<float>(features);
  float sum_g = 0.0f;
  float sum_g_x_hat = 0.0f;
  for (int64_t c = 0; c < features; ++c) {
    const float g = dy[base + c] * gamma[c];
    sum_g += g;
    sum_g_x_hat += g * ((x[base + c] - mean[r]) * rstd[r]);
  }
  for (int64_t c = 0; c < features; ++c) {
    const float g = dy[base + c] * gamma[c];
    const float x_hat = (x[base + c] - mean[r]) * rstd[r];
    dx[base + c] = rstd[r] * (g - sum_g / count - x_hat * sum_g_x_hat / count);
  }
}

// Feature c's dgamma = sum(dy * x_hat) and dbeta = sum(dy) over the rows in
// order, each written where given.
SPILLWAY_HOST_DEVICE inline void LayerNormParameterGradient(const float* dy, const float* x,
                                                            const float* mean, const float* rstd,
                                                            int64_t rows, int64_t features,
                                                            int64_t c, float* dgamma,
                                                            float* dbeta) {
  float sum_dy = 0.0f;
  float sum_dy_x_hat = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r * features + c;
    sum_dy += dy[i];
    sum_dy_x_hat += dy[i] * ((x[i] - mean[r]) * rstd[r]);
  }
  if (dgamma != nullptr) dgamma[c] = sum_dy_x_hat;
  if (dbeta != nullptr) dbeta[c] = sum_dy;
}

// ---- Cross-entropy ----

SPILLWAY_HOST_DEVICE inline int64_t LabelAt(const void* labels, bool labels_i32, int64_t row) {
  return labels_i32 ? static_cast<const int32_t*>(labels)[row]
                    : static_cast<const int64_t*>(labels)[row];
}

// log(sum(exp(row))), computed around the row's maximum, the sum in double.
SPILLWAY_HOST_DEVICE inline float LogSumExp(const float* row, int64_t classes) {
  float largest = row[0];
  for (int64_t c = 1; c < classes; ++c) largest = row[c] > largest ? row[c] : largest;
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += expf(row[c] - largest);
  return largest + static_cast<float>(log(sum));
}

// A counted row's loss; NaN for a label outside [0, classes).
SPILLWAY_HOST_DEVICE inline float RowLoss(const float* logits, int64_t label, const CrossEntropy& s,
                                          int64_t r) {
  if (label < 0 || label >= s.classes) return NAN;
  const float* row = logits + r * s.classes;
  return LogSumExp(row, s.classes) - row[label];
}

// Chunk k's sum of its counted rows' losses (with `with_losses`) and their
// count, its rows in order (program/workspace_sizes.h's chunks).
SPILLWAY_HOST_DEVICE inline void LossChunkTotals(const float* logits, const void* labels,
                                                 const CrossEntropy& s, bool with_losses, int64_t k,
                                                 double* sum, int64_t* count) {
  const int64_t chunk_rows = program::LossChunkRows(s.rows);
  const int64_t end = (k + 1) * chunk_rows < s.rows ? (k + 1) * chunk_rows : s.rows;
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = k * chunk_rows; r < end; ++r) {
    const int64_t label = LabelAt(labels, s.labels_i32, r);
    if (label == s.ignore_index) continue;
    if (with_losses) total += RowLoss(logits, label, s, r);
    ++counted;
  }
  *sum = total;
  *count = counted;
}

// The chunks' totals added in chunk order: the count of rows that count,
// and (where `loss` is given) their mean loss, 0 if none counts.
SPILLWAY_HOST_DEVICE inline int64_t FinishLossTotals(const double* sums, const int64_t* counts,
                                                     int64_t chunks, float* loss) {
  double sum = 0;
  int64_t count = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    sum += sums[k];
    count += counts[k];
  }
  if (loss != nullptr) {
    loss[0] = count > 0 ? static_cast<float>(sum / static_cast<double>(count)) : 0.0f;
  }
  return count;
}

// Row r's gradient, every class: scale * (softmax - onehot(label)), scale
// dloss[0] / counted ("mean") or dloss[r] ("none"); 0 for an ignored row,
// NaN for a label out of range.
SPILLWAY_HOST_DEVICE inline void LossGradientRow(const float* dloss, const float* logits,
                                                 const void* labels, const CrossEntropy& s,
                                                 int64_t counted, int64_t r, float* dlogits) {
  const int64_t label = LabelAt(labels, s.labels_i32, r);
  const float* row = logits + r * s.classes;
  float* grad = dlogits + r * s.classes;
  if (label == s.ignore_index) {
    for (int64_t c = 0; c < s.classes; ++c) grad[c] = 0.0f;
    return;
  }
  const bool valid = label >= 0 && label < s.classes;
  const float scale = s.mean ? dloss[0] / static_cast<float>(counted) : dloss[r];
  const float log_sum = LogSumExp(row, s.classes);
  for (int64_t c = 0; c < s.classes; ++c) {
    const float probability = expf(row[c] - log_sum);
    grad[c] = valid ? scale * (c == label ? probability - 1.0f : probability) : NAN;
  }
}

}  // namespace spillway::backends::cuda
