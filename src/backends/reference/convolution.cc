// conv2d and its two backward ops. x and y are NHWC, w is OHWI
// ([O, KH, KW, C/groups]); pads are [top, left, bottom, right].
//
// All three kernels walk the same taps, the (input, weight, output) element
// triples of the forward's products, in one fixed order, so each backward op
// is visibly the transpose of the forward and every sum is deterministic.
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/reference/ops.h"
#include "backends/reference/spatial_util.h"
#include "ir/attributes.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

struct ConvGeometry {
  ir::Shape x;  // [N, H, W, C]
  ir::Shape w;  // [O, KH, KW, C/groups]
  ir::Shape y;  // [N, OH, OW, O]
  ir::IntList strides;
  ir::IntList pads;
  ir::IntList dilations;
  int64_t groups = 1;
};

ConvGeometry MakeGeometry(const ir::AttrMap& attrs, ir::Shape x, ir::Shape w, ir::Shape y) {
  return {.x = std::move(x),
          .w = std::move(w),
          .y = std::move(y),
          .strides = *attrs.GetInts("strides", {1, 1}),
          .pads = *attrs.GetInts("pads", {0, 0, 0, 0}),
          .dilations = *attrs.GetInts("dilations", {1, 1}),
          .groups = *attrs.GetInt("groups", 1)};
}

// Calls tap(x_offset, w_offset, y_offset) for every product of the forward,
// in the order n, oh, ow, o, kh, kw, ci. Taps that fall into the padding are
// skipped (they multiply zeros).
template <typename Tap>
void ForEachTap(const ConvGeometry& g, Tap tap) {
  const int64_t out_per_group = g.w[0] / g.groups;
  const int64_t in_per_group = g.w[3];
  for (int64_t n = 0; n < g.y[0]; ++n) {
    for (int64_t oh = 0; oh < g.y[1]; ++oh) {
      for (int64_t ow = 0; ow < g.y[2]; ++ow) {
        for (int64_t o = 0; o < g.y[3]; ++o) {
          const int64_t y_offset = NhwcOffset(g.y, n, oh, ow, o);
          const int64_t first_channel = (o / out_per_group) * in_per_group;
          for (int64_t kh = 0; kh < g.w[1]; ++kh) {
            const int64_t ih = oh * g.strides[0] - g.pads[0] + kh * g.dilations[0];
            if (ih < 0 || ih >= g.x[1]) continue;
            for (int64_t kw = 0; kw < g.w[2]; ++kw) {
              const int64_t iw = ow * g.strides[1] - g.pads[1] + kw * g.dilations[1];
              if (iw < 0 || iw >= g.x[2]) continue;
              for (int64_t ci = 0; ci < in_per_group; ++ci) {
                tap(NhwcOffset(g.x, n, ih, iw, first_channel + ci), NhwcOffset(g.w, o, kh, kw, ci),
                    y_offset);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

// y = sum over taps of x * w, plus b.
template <typename T>
absl::Status RunConv2d(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const bool has_bias = call.inputs.size() == 3;
  if (has_bias) {
    RETURN_IF_ERROR(ExpectInputs(call, {2}));
  }
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const ConvGeometry geometry = MakeGeometry(call.node.attrs, call.inputs[0].type->shape,
                                             call.inputs[1].type->shape, y.type->shape);
  const T* x_data = call.inputs[0].as<const T>();
  const T* w_data = call.inputs[1].as<const T>();
  T* y_data = y.as<T>();
  FillZero<T>(y);
  ForEachTap(geometry,
             [&](int64_t xi, int64_t wi, int64_t yi) { y_data[yi] += x_data[xi] * w_data[wi]; });
  if (has_bias) {
    const T* b = call.inputs[2].as<const T>();
    const int64_t channels = geometry.y[3];
    for (int64_t i = 0; i < y.num_elements(); ++i) y_data[i] += b[i % channels];
  }
  return absl::OkStatus();
}

// Inputs dy, w and optionally acc; attribute input_shape. dx = sum over taps
// of dy * w, plus acc when given. dx may be acc's buffer: acc is copied
// before dx is cleared, and added to the finished sum.
template <typename T>
absl::Status RunConv2dBackwardData(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const bool accumulates = call.inputs.size() == 3;
  if (accumulates) RETURN_IF_ERROR(ExpectInput(call, 2));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const ConvGeometry geometry = MakeGeometry(
      call.node.attrs, dx.type->shape, call.inputs[1].type->shape, call.inputs[0].type->shape);
  const T* dy = call.inputs[0].as<const T>();
  const T* w = call.inputs[1].as<const T>();
  T* dx_data = dx.as<T>();
  std::vector<T> acc;
  if (accumulates) {
    const T* acc_data = call.inputs[2].as<const T>();
    acc.assign(acc_data, acc_data + dx.num_elements());
  }
  FillZero<T>(dx);
  ForEachTap(geometry, [&](int64_t xi, int64_t wi, int64_t yi) { dx_data[xi] += dy[yi] * w[wi]; });
  for (size_t i = 0; i < acc.size(); ++i) dx_data[i] = acc[i] + dx_data[i];
  return absl::OkStatus();
}

// Inputs dy, x; attribute kernel. dw = sum over taps of dy * x.
template <typename T>
absl::Status RunConv2dBackwardWeight(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const TensorRef& dw = call.outputs[0];
  if (dw.data == nullptr) return absl::OkStatus();
  const ConvGeometry geometry = MakeGeometry(call.node.attrs, call.inputs[1].type->shape,
                                             dw.type->shape, call.inputs[0].type->shape);
  const T* dy = call.inputs[0].as<const T>();
  const T* x = call.inputs[1].as<const T>();
  T* dw_data = dw.as<T>();
  FillZero<T>(dw);
  ForEachTap(geometry, [&](int64_t xi, int64_t wi, int64_t yi) { dw_data[wi] += dy[yi] * x[xi]; });
  return absl::OkStatus();
}

SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Conv2d);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Conv2dBackwardData);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Conv2dBackwardWeight);

}  // namespace spillway::backends::reference
