// Bilinear and nearest resize of NHWC activations and their backward ops.
//
// Bilinear uses PyTorch's source coordinates (F.interpolate(mode="bilinear")):
// - align_corners=true maps the corner pixels onto each other:
//   src = dst * (in - 1) / (out - 1), and src = 0 when out == 1;
// - align_corners=false maps pixel centres: src = (dst + 0.5) * in / out - 0.5,
//   clamped below at 0.
// An output interpolates between floor(src) and the next input pixel (the
// same pixel at the last row or column).
//
// Nearest copies the input pixel floor(dst * in / out) along each axis:
// PyTorch's mode="nearest", and ONNX Resize with mode="nearest",
// coordinate_transformation_mode="asymmetric" and nearest_mode="floor". The
// index is computed exactly in integers (PyTorch multiplies by a float scale
// in/out, which agrees for whole upsampling factors), and dst < out makes it
// smaller than in: no clamp is needed.
#include <cstdint>

#include "backends/reference/ops.h"
#include "backends/reference/spatial_util.h"
#include "ir/attributes.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// The two input pixels an output pixel reads along one axis, and their weights.
template <typename T>
struct AxisTaps {
  int64_t near = 0;
  int64_t far = 0;
  T near_weight = 1;
  T far_weight = 0;
};

template <typename T>
AxisTaps<T> TapsAlongAxis(int64_t out_index, int64_t in_size, int64_t out_size,
                          bool align_corners) {
  T source = 0;
  if (align_corners) {
    if (out_size > 1) {
      source =
          static_cast<T>(out_index) * static_cast<T>(in_size - 1) / static_cast<T>(out_size - 1);
    }
  } else {
    source =
        (static_cast<T>(out_index) + T(0.5)) * static_cast<T>(in_size) / static_cast<T>(out_size) -
        T(0.5);
    if (source < 0) source = 0;
  }
  AxisTaps<T> taps;
  taps.near = static_cast<int64_t>(source);  // floor: source >= 0
  taps.far = taps.near < in_size - 1 ? taps.near + 1 : taps.near;
  taps.far_weight = source - static_cast<T>(taps.near);
  taps.near_weight = T(1) - taps.far_weight;
  return taps;
}

// Calls pixel(n, h_taps, w_taps, y_offset_of_channel_0) for every output pixel
// of y [N, OH, OW, C] resized from x [N, H, W, C], in NHWC order.
template <typename T, typename Pixel>
void ForEachOutputPixel(const ir::Shape& x, const ir::Shape& y, bool align_corners, Pixel pixel) {
  for (int64_t n = 0; n < y[0]; ++n) {
    for (int64_t oh = 0; oh < y[1]; ++oh) {
      const AxisTaps<T> h = TapsAlongAxis<T>(oh, x[1], y[1], align_corners);
      for (int64_t ow = 0; ow < y[2]; ++ow) {
        const AxisTaps<T> w = TapsAlongAxis<T>(ow, x[2], y[2], align_corners);
        pixel(n, h, w, NhwcOffset(y, n, oh, ow, 0));
      }
    }
  }
}

// Calls pixel(x_offset, y_offset), the offsets of channel 0, for every output
// pixel of y [N, OH, OW, C] and the input pixel of x [N, H, W, C] it copies,
// in NHWC order of y.
template <typename Pixel>
void ForEachNearestPixel(const ir::Shape& x, const ir::Shape& y, Pixel pixel) {
  for (int64_t n = 0; n < y[0]; ++n) {
    for (int64_t oh = 0; oh < y[1]; ++oh) {
      const int64_t h = oh * x[1] / y[1];
      for (int64_t ow = 0; ow < y[2]; ++ow) {
        const int64_t w = ow * x[2] / y[2];
        pixel(NhwcOffset(x, n, h, w, 0), NhwcOffset(y, n, oh, ow, 0));
      }
    }
  }
}

}  // namespace

template <typename T>
absl::Status RunResizeBilinear(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const bool align_corners = *call.node.attrs.GetBool("align_corners", false);
  const ir::Shape& x_shape = call.inputs[0].type->shape;
  const T* x = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  ForEachOutputPixel<T>(
      x_shape, y.type->shape, align_corners,
      [&](int64_t n, const AxisTaps<T>& h, const AxisTaps<T>& w, int64_t yi) {
        for (int64_t c = 0; c < x_shape[3]; ++c) {
          const T top = w.near_weight * x[NhwcOffset(x_shape, n, h.near, w.near, c)] +
                        w.far_weight * x[NhwcOffset(x_shape, n, h.near, w.far, c)];
          const T bottom = w.near_weight * x[NhwcOffset(x_shape, n, h.far, w.near, c)] +
                           w.far_weight * x[NhwcOffset(x_shape, n, h.far, w.far, c)];
          y_data[yi + c] = h.near_weight * top + h.far_weight * bottom;
        }
      });
  return absl::OkStatus();
}

// Input dy; attributes input_shape, align_corners. Each dy is scattered to the
// four input pixels it was interpolated from, with the same weights.
template <typename T>
absl::Status RunResizeBilinearBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const bool align_corners = *call.node.attrs.GetBool("align_corners", false);
  const ir::Shape& x_shape = dx.type->shape;
  const T* dy = call.inputs[0].as<const T>();
  T* dx_data = dx.as<T>();
  FillZero<T>(dx);
  ForEachOutputPixel<T>(
      x_shape, call.inputs[0].type->shape, align_corners,
      [&](int64_t n, const AxisTaps<T>& h, const AxisTaps<T>& w, int64_t yi) {
        for (int64_t c = 0; c < x_shape[3]; ++c) {
          const T g = dy[yi + c];
          dx_data[NhwcOffset(x_shape, n, h.near, w.near, c)] += h.near_weight * w.near_weight * g;
          dx_data[NhwcOffset(x_shape, n, h.near, w.far, c)] += h.near_weight * w.far_weight * g;
          dx_data[NhwcOffset(x_shape, n, h.far, w.near, c)] += h.far_weight * w.near_weight * g;
          dx_data[NhwcOffset(x_shape, n, h.far, w.far, c)] += h.far_weight * w.far_weight * g;
        }
      });
  return absl::OkStatus();
}

template <typename T>
absl::Status RunResizeNearest(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const ir::Shape& x_shape = call.inputs[0].type->shape;
  const int64_t channels = x_shape[3];
  const T* x = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  ForEachNearestPixel(x_shape, y.type->shape, [&](int64_t xi, int64_t yi) {
    for (int64_t c = 0; c < channels; ++c) y_data[yi + c] = x[xi + c];
  });
  return absl::OkStatus();
}

// Input dy; attribute input_shape. Each dy is added to the input pixel its
// output copied, in NHWC order of dy: a fixed summation order, so the result
// is deterministic.
template <typename T>
absl::Status RunResizeNearestBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const ir::Shape& x_shape = dx.type->shape;
  const int64_t channels = x_shape[3];
  const T* dy = call.inputs[0].as<const T>();
  T* dx_data = dx.as<T>();
  FillZero<T>(dx);
  ForEachNearestPixel(x_shape, call.inputs[0].type->shape, [&](int64_t xi, int64_t yi) {
    for (int64_t c = 0; c < channels; ++c) dx_data[xi + c] += dy[yi + c];
  });
  return absl::OkStatus();
}

SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(ResizeBilinear);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(ResizeBilinearBackward);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(ResizeNearest);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(ResizeNearestBackward);

}  // namespace spillway::backends::reference
