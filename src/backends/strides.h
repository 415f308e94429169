// Where the elements of a dense row-major tensor lie when it is read as
// another shape: row-major strides, numpy's broadcasting, and the window a
// slice takes. Shared by the backends, whose kernels index the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "fmt/format.h"
#include "ir/attributes.h"
#include "ir/types.h"
#include "support/status_macros.h"

namespace spillway::backends {

// `axis` counted from the end when negative, checked against `rank`.
inline absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  const int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    return absl::InvalidArgumentError(
        fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return normalized;
}

// Strides, in elements, of a dense row-major tensor of `shape`.
inline std::vector<int64_t> RowMajorStrides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

// Whether a tensor of `shape` broadcasts to `target` by numpy's rules: axes
// aligned at the end, each of extent 1 or the target's.
inline bool BroadcastsTo(std::span<const int64_t> shape, std::span<const int64_t> target) {
  if (shape.size() > target.size()) return false;
  const size_t offset = target.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && shape[d] != target[offset + d]) return false;
  }
  return true;
}

// Strides that read a dense tensor of `shape` as if broadcast to `target`
// (numpy's rules: axes are aligned at the end; missing and stretched axes get
// stride 0). `shape` must broadcast to `target`.
inline std::vector<int64_t> BroadcastStrides(std::span<const int64_t> shape,
                                             std::span<const int64_t> target) {
  const std::vector<int64_t> dense = RowMajorStrides(shape);
  std::vector<int64_t> strides(target.size(), 0);
  const size_t offset = target.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1) strides[offset + d] = dense[d];
  }
  return strides;
}

// The elements a slice node selects from a tensor of `shape`, in numpy's
// basic slicing with a positive step: negative bounds count from the end,
// then both are clamped to [0, dim]. `base` and `strides` place the slice's
// elements, in its own row-major order, in the dense sliced tensor.
struct SliceWindow {
  ir::Shape shape;               // of the slice
  int64_t base = 0;              // the offset of its first element
  std::vector<int64_t> strides;  // per axis, the distance between neighbours
};

// An error (its message, for the caller to attach to the node) for
// attributes that do not describe a slice of `shape`.
inline absl::StatusOr<SliceWindow> ResolveSliceWindow(const ir::AttrMap& attrs,
                                                      const ir::Shape& shape) {
  ASSIGN_OR_RETURN(const ir::IntList axes, attrs.GetInts("axes"));
  ASSIGN_OR_RETURN(const ir::IntList starts, attrs.GetInts("starts"));
  ASSIGN_OR_RETURN(const ir::IntList ends, attrs.GetInts("ends"));
  ASSIGN_OR_RETURN(const ir::IntList steps, attrs.GetInts("steps", ir::IntList(axes.size(), 1)));
  if (starts.size() != axes.size() || ends.size() != axes.size() || steps.size() != axes.size()) {
    return absl::InvalidArgumentError("axes, starts, ends and steps must have one length");
  }
  const auto rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> first(shape.size(), 0);
  std::vector<int64_t> step(shape.size(), 1);
  SliceWindow window{shape, 0, {}};
  for (size_t i = 0; i < axes.size(); ++i) {
    ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axes[i], rank));
    if (steps[i] < 1) {
      return absl::InvalidArgumentError(fmt::format("steps must be >= 1, got {}", steps[i]));
    }
    const auto d = static_cast<size_t>(axis);
    const int64_t dim = shape[d];
    auto clamp = [dim](int64_t bound) {
      return std::clamp<int64_t>(bound < 0 ? bound + dim : bound, 0, dim);
    };
    const int64_t start = clamp(starts[i]);
    const int64_t end = clamp(ends[i]);
    first[d] = start;
    step[d] = steps[i];
    window.shape[d] = end > start ? 1 + (end - start - 1) / steps[i] : 0;
  }
  window.strides = RowMajorStrides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    window.base += first[d] * window.strides[d];
    window.strides[d] *= step[d];
  }
  return window;
}

}  // namespace spillway::backends
