// Max, average and global average pooling over NHWC activations, with their
// backward ops. Pads are [top, left, bottom, right]; padded positions never
// take part in a max, and count in an average's divisor only with
// count_include_pad. Shape inference guarantees every window holds at least
// one real input (pads are smaller than the kernel).
#include <cstdint>

#include "backends/reference/ops.h"
#include "backends/reference/spatial_util.h"
#include "ir/attributes.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

struct PoolGeometry {
  ir::Shape x;  // [N, H, W, C]
  ir::Shape y;  // [N, OH, OW, C]
  ir::IntList kernel;
  ir::IntList strides;
  ir::IntList pads;
  bool count_include_pad = false;
};

PoolGeometry MakeGeometry(const ir::AttrMap& attrs, const ir::Shape& x, const ir::Shape& y) {
  const ir::IntList kernel = attrs.Ints("kernel");
  return {.x = x,
          .y = y,
          .kernel = kernel,
          .strides = *attrs.GetInts("strides", kernel),
          .pads = *attrs.GetInts("pads", {0, 0, 0, 0}),
          .count_include_pad = *attrs.GetBool("count_include_pad", false)};
}

// Calls visit(x_offset) for the real (unpadded) inputs of the window of output
// [n, oh, ow, c], in row-major window order.
template <typename Visit>
void ForEachInWindow(const PoolGeometry& g, int64_t n, int64_t oh, int64_t ow, int64_t c,
                     Visit visit) {
  for (int64_t kh = 0; kh < g.kernel[0]; ++kh) {
    const int64_t ih = oh * g.strides[0] - g.pads[0] + kh;
    if (ih < 0 || ih >= g.x[1]) continue;
    for (int64_t kw = 0; kw < g.kernel[1]; ++kw) {
      const int64_t iw = ow * g.strides[1] - g.pads[1] + kw;
      if (iw < 0 || iw >= g.x[2]) continue;
      visit(NhwcOffset(g.x, n, ih, iw, c));
    }
  }
}

// Calls window(n, oh, ow, c, y_offset) for every output element, in NHWC order.
template <typename Window>
void ForEachOutput(const PoolGeometry& g, Window window) {
  for (int64_t n = 0; n < g.y[0]; ++n) {
    for (int64_t oh = 0; oh < g.y[1]; ++oh) {
      for (int64_t ow = 0; ow < g.y[2]; ++ow) {
        for (int64_t c = 0; c < g.y[3]; ++c) window(n, oh, ow, c, NhwcOffset(g.y, n, oh, ow, c));
      }
    }
  }
}

// The offset in x of the window's maximum; on ties the first in window order,
// so that the forward and the backward agree on which input gets the gradient.
template <typename T>
int64_t ArgMaxInWindow(const PoolGeometry& g, const T* x, int64_t n, int64_t oh, int64_t ow,
                       int64_t c) {
  int64_t best = -1;
  ForEachInWindow(g, n, oh, ow, c, [&](int64_t xi) {
    if (best < 0 || x[xi] > x[best]) best = xi;
  });
  return best;
}

// The divisor of an average: the whole kernel with count_include_pad, else
// the real inputs in the window.
int64_t WindowCount(const PoolGeometry& g, int64_t n, int64_t oh, int64_t ow, int64_t c) {
  if (g.count_include_pad) return g.kernel[0] * g.kernel[1];
  int64_t count = 0;
  ForEachInWindow(g, n, oh, ow, c, [&](int64_t) { ++count; });
  return count;
}

}  // namespace

template <typename T>
absl::Status RunMaxPool(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const PoolGeometry geometry =
      MakeGeometry(call.node.attrs, call.inputs[0].type->shape, y.type->shape);
  const T* x = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  ForEachOutput(geometry, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t yi) {
    y_data[yi] = x[ArgMaxInWindow(geometry, x, n, oh, ow, c)];
  });
  return absl::OkStatus();
}

// Inputs dy, x. Each dy goes to its window's first maximum, found again in x
// exactly as the forward found it.
template <typename T>
absl::Status RunMaxPoolBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const PoolGeometry geometry =
      MakeGeometry(call.node.attrs, dx.type->shape, call.inputs[0].type->shape);
  const T* dy = call.inputs[0].as<const T>();
  const T* x = call.inputs[1].as<const T>();
  T* dx_data = dx.as<T>();
  FillZero<T>(dx);
  ForEachOutput(geometry, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t yi) {
    dx_data[ArgMaxInWindow(geometry, x, n, oh, ow, c)] += dy[yi];
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status RunAvgPool(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const PoolGeometry geometry =
      MakeGeometry(call.node.attrs, call.inputs[0].type->shape, y.type->shape);
  const T* x = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  ForEachOutput(geometry, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t yi) {
    T sum = 0;
    ForEachInWindow(geometry, n, oh, ow, c, [&](int64_t xi) { sum += x[xi]; });
    y_data[yi] = sum / static_cast<T>(WindowCount(geometry, n, oh, ow, c));
  });
  return absl::OkStatus();
}

// Input dy; attribute input_shape. Each dy is shared evenly by its window.
template <typename T>
absl::Status RunAvgPoolBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const PoolGeometry geometry =
      MakeGeometry(call.node.attrs, dx.type->shape, call.inputs[0].type->shape);
  const T* dy = call.inputs[0].as<const T>();
  T* dx_data = dx.as<T>();
  FillZero<T>(dx);
  ForEachOutput(geometry, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t yi) {
    const T share = dy[yi] / static_cast<T>(WindowCount(geometry, n, oh, ow, c));
    ForEachInWindow(geometry, n, oh, ow, c, [&](int64_t xi) { dx_data[xi] += share; });
  });
  return absl::OkStatus();
}

// y[n, 0, 0, c] = the mean of x[n, :, :, c].
template <typename T>
absl::Status RunGlobalAvgPool(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const ir::Shape& shape = call.inputs[0].type->shape;
  const T* x = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  const T pixels = static_cast<T>(shape[1] * shape[2]);
  for (int64_t n = 0; n < shape[0]; ++n) {
    for (int64_t c = 0; c < shape[3]; ++c) {
      T sum = 0;
      for (int64_t h = 0; h < shape[1]; ++h) {
        for (int64_t w = 0; w < shape[2]; ++w) sum += x[NhwcOffset(shape, n, h, w, c)];
      }
      y_data[n * shape[3] + c] = sum / pixels;
    }
  }
  return absl::OkStatus();
}

// Input dy [N,1,1,C]; attribute input_shape. dx = dy / (H*W) at every pixel.
template <typename T>
absl::Status RunGlobalAvgPoolBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const ir::Shape& shape = dx.type->shape;
  const T* dy = call.inputs[0].as<const T>();
  T* dx_data = dx.as<T>();
  const T pixels = static_cast<T>(shape[1] * shape[2]);
  for (int64_t n = 0; n < shape[0]; ++n) {
    for (int64_t h = 0; h < shape[1]; ++h) {
      for (int64_t w = 0; w < shape[2]; ++w) {
        for (int64_t c = 0; c < shape[3]; ++c) {
          dx_data[NhwcOffset(shape, n, h, w, c)] = dy[n * shape[3] + c] / pixels;
        }
      }
    }
  }
  return absl::OkStatus();
}

SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(MaxPool);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(MaxPoolBackward);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(AvgPool);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(AvgPoolBackward);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(GlobalAvgPool);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(GlobalAvgPoolBackward);

}  // namespace spillway::backends::reference
