// Reference kernels of the data-movement ops (concat, slice and its gradient,
// reshape, transpose, flatten), fill and reduce_sum.
//
// Data movement copies whole elements of any dtype (f32 elements are T), over
// the logical row-major shape: an NHWC tag changes nothing here.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/reference/ops.h"
#include "backends/reference/tensor_util.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// `axis` counted from the end when negative, checked against `rank`.
absl::StatusOr<size_t> NormalizeAxis(const KernelCall& call, int64_t axis, size_t rank) {
  absl::StatusOr<int64_t> normalized = backends::NormalizeAxis(axis, static_cast<int64_t>(rank));
  if (!normalized.ok()) return KernelError(call, std::string(normalized.status().message()));
  return static_cast<size_t>(*normalized);
}

absl::Status ExpectOutputShape(const KernelCall& call, const ir::Shape& shape) {
  if (call.outputs[0].type->shape == shape) return absl::OkStatus();
  return KernelError(
      call, fmt::format("the output is {}, expected shape {}",
                        ir::TypeToString(*call.outputs[0].type), ir::ShapeToString(shape)));
}

// Copies the whole of input 0 into output 0 (reshape, flatten): the same
// elements in the same row-major order. memmove, since they may share a buffer.
template <typename T>
absl::Status CopyElements(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInput(call, 0));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& x = call.inputs[0];
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  if (x.type->dtype != y.type->dtype || x.num_elements() != y.num_elements()) {
    return KernelError(call, fmt::format("cannot copy x {} to y {}", ir::TypeToString(*x.type),
                                         ir::TypeToString(*y.type)));
  }
  std::memmove(y.data, x.data, static_cast<size_t>(x.num_elements() * ElementBytes<T>(*x.type)));
  return absl::OkStatus();
}

// The slice's window in a tensor of `shape`, errors naming the node.
absl::StatusOr<SliceWindow> ReadSliceWindow(const KernelCall& call, const ir::Shape& shape) {
  absl::StatusOr<SliceWindow> window = ResolveSliceWindow(call.node.attrs, shape);
  if (!window.ok()) return KernelError(call, std::string(window.status().message()));
  return window;
}

}  // namespace

// y = the inputs side by side along `axis`: for each index of the axes before
// it, one block of each input in input order.
template <typename T>
absl::Status RunConcat(const KernelCall& call) {
  if (call.inputs.empty()) return KernelError(call, "needs at least one input");
  for (size_t k = 0; k < call.inputs.size(); ++k) RETURN_IF_ERROR(ExpectInput(call, k));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const ir::Shape& out_shape = y.type->shape;
  ASSIGN_OR_RETURN(int64_t axis_attr, NodeAttr(call, call.node.attrs.GetInt("axis")));
  ASSIGN_OR_RETURN(size_t axis, NormalizeAxis(call, axis_attr, out_shape.size()));
  int64_t outer = 1;
  for (size_t d = 0; d < axis; ++d) outer *= out_shape[d];
  const int64_t element_bytes = ElementBytes<T>(*y.type);
  // Bytes of one block of each input: its extent along the axis and every axis after it.
  std::vector<int64_t> block_bytes;
  int64_t concatenated = 0;
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const ir::TensorType& x = *call.inputs[k].type;
    bool matches = x.dtype == y.type->dtype && x.shape.size() == out_shape.size();
    for (size_t d = 0; matches && d < out_shape.size(); ++d) {
      matches = d == axis || x.shape[d] == out_shape[d];
    }
    if (!matches) {
      return KernelError(call,
                         fmt::format("input {} {} does not fit the output {} along axis {}", k,
                                     ir::TypeToString(x), ir::TypeToString(*y.type), axis));
    }
    concatenated += x.shape[axis];
    block_bytes.push_back(outer == 0 ? 0 : call.inputs[k].num_elements() / outer * element_bytes);
  }
  if (concatenated != out_shape[axis]) {
    return KernelError(call, fmt::format("the inputs' extents along axis {} sum to {}, not {}",
                                         axis, concatenated, out_shape[axis]));
  }
  auto* out = static_cast<std::byte*>(y.data);
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < call.inputs.size(); ++k) {
      const auto* in = static_cast<const std::byte*>(call.inputs[k].data);
      std::memcpy(out, in + o * block_bytes[k], static_cast<size_t>(block_bytes[k]));
      out += block_bytes[k];
    }
  }
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Concat);

template <typename T>
absl::Status RunSlice(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInput(call, 0));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& x = call.inputs[0];
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(SliceWindow window, ReadSliceWindow(call, x.type->shape));
  RETURN_IF_ERROR(ExpectOutputShape(call, window.shape));
  if (x.type->dtype != y.type->dtype) return KernelError(call, "x and y differ in dtype");
  const size_t element_bytes = static_cast<size_t>(ElementBytes<T>(*x.type));
  const auto* in = static_cast<const std::byte*>(x.data);
  auto* out = static_cast<std::byte*>(y.data);
  ForEachOffset<1>(window.shape, {window.strides}, [&](const auto& offsets) {
    std::memcpy(out, in + (window.base + offsets[0]) * element_bytes, element_bytes);
    out += element_bytes;
  });
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Slice);

// dx has the forward input's shape (attribute input_shape): dy's elements
// where the slice took them, zeros elsewhere.
template <typename T>
absl::Status RunSliceBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectFloatInput(call, 0));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& dy = call.inputs[0];
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(ir::IntList input_shape, NodeAttr(call, call.node.attrs.GetInts("input_shape")));
  RETURN_IF_ERROR(ExpectOutputShape(call, input_shape));
  ASSIGN_OR_RETURN(SliceWindow window, ReadSliceWindow(call, input_shape));
  if (window.shape != dy.type->shape) {
    return KernelError(call,
                       fmt::format("dy {} is not the slice's shape {}", ir::TypeToString(*dy.type),
                                   ir::ShapeToString(window.shape)));
  }
  T* out = dx.as<T>();
  std::fill_n(out, dx.num_elements(), T(0));
  const T* in = dy.as<const T>();
  ForEachOffset<1>(window.shape, {window.strides},
                   [&](const auto& offsets) { out[window.base + offsets[0]] = *in++; });
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(SliceBackward);

template <typename T>
absl::Status RunReshape(const KernelCall& call) {
  return CopyElements<T>(call);
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Reshape);

// y[i0, ..., in] = x at index j with j[perm[d]] = i_d.
template <typename T>
absl::Status RunTranspose(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInput(call, 0));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& x = call.inputs[0];
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(ir::IntList perm, NodeAttr(call, call.node.attrs.GetInts("perm")));
  const ir::Shape& in_shape = x.type->shape;
  std::vector<bool> seen(in_shape.size(), false);
  bool valid = perm.size() == in_shape.size();
  for (size_t d = 0; valid && d < perm.size(); ++d) {
    valid = perm[d] >= 0 && perm[d] < static_cast<int64_t>(perm.size()) &&
            !seen[static_cast<size_t>(perm[d])];
    if (valid) seen[static_cast<size_t>(perm[d])] = true;
  }
  if (!valid) {
    return KernelError(call, fmt::format("perm {} is not a permutation of x {}'s axes",
                                         ir::AttrValueToString(perm), ir::TypeToString(*x.type)));
  }
  const std::vector<int64_t> in_strides = RowMajorStrides(in_shape);
  ir::Shape out_shape(perm.size());
  std::vector<int64_t> strides(perm.size());  // x's stride along each axis of y
  for (size_t d = 0; d < perm.size(); ++d) {
    out_shape[d] = in_shape[static_cast<size_t>(perm[d])];
    strides[d] = in_strides[static_cast<size_t>(perm[d])];
  }
  RETURN_IF_ERROR(ExpectOutputShape(call, out_shape));
  if (x.type->dtype != y.type->dtype) return KernelError(call, "x and y differ in dtype");
  const size_t element_bytes = static_cast<size_t>(ElementBytes<T>(*x.type));
  const auto* in = static_cast<const std::byte*>(x.data);
  auto* out = static_cast<std::byte*>(y.data);
  ForEachOffset<1>(out_shape, {strides}, [&](const auto& offsets) {
    std::memcpy(out, in + offsets[0] * element_bytes, element_bytes);
    out += element_bytes;
  });
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Transpose);

template <typename T>
absl::Status RunFlatten(const KernelCall& call) {
  return CopyElements<T>(call);
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Flatten);

// Every element = `value`, in the output's dtype (f32 as T).
template <typename T>
absl::Status RunFill(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(double value, NodeAttr(call, call.node.attrs.GetFloat("value")));
  const int64_t count = y.num_elements();
  if (y.type->dtype == ir::DType::kBool) {
    std::fill_n(y.as<bool>(), count, value != 0.0);
    return absl::OkStatus();
  }
  return DispatchNumeric<T>(call, y.type->dtype, [&](auto element) {
    using E = decltype(element);
    std::fill_n(y.as<E>(), count, static_cast<E>(value));
    return absl::OkStatus();
  });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Fill);

// y = x summed over `axes` (kept as extent 1 with keepdims). The sum runs over
// x in row-major order, in double for f32.
template <typename T>
absl::Status RunReduceSum(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInput(call, 0));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& x = call.inputs[0];
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  if (x.type->dtype != y.type->dtype) return KernelError(call, "x and y differ in dtype");
  ASSIGN_OR_RETURN(ir::IntList axes, NodeAttr(call, call.node.attrs.GetInts("axes")));
  ASSIGN_OR_RETURN(bool keepdims, NodeAttr(call, call.node.attrs.GetBool("keepdims", false)));
  const ir::Shape& in_shape = x.type->shape;
  std::vector<bool> reduced(in_shape.size(), false);
  for (int64_t axis_attr : axes) {
    ASSIGN_OR_RETURN(size_t axis, NormalizeAxis(call, axis_attr, in_shape.size()));
    if (reduced[axis]) return KernelError(call, fmt::format("axis {} is reduced twice", axis));
    reduced[axis] = true;
  }
  // The kept axes, and y's stride along each axis of x (0 along reduced ones).
  ir::Shape kept;
  ir::Shape out_shape;
  for (size_t d = 0; d < in_shape.size(); ++d) {
    if (!reduced[d]) kept.push_back(in_shape[d]);
    if (!reduced[d] || keepdims) out_shape.push_back(reduced[d] ? 1 : in_shape[d]);
  }
  RETURN_IF_ERROR(ExpectOutputShape(call, out_shape));
  const std::vector<int64_t> kept_strides = RowMajorStrides(kept);
  std::vector<int64_t> strides(in_shape.size(), 0);
  for (size_t d = 0, k = 0; d < in_shape.size(); ++d) {
    if (!reduced[d]) strides[d] = kept_strides[k++];
  }
  return DispatchNumeric<T>(call, x.type->dtype, [&](auto element) {
    using E = decltype(element);
    std::vector<Accumulator<E>> sums(static_cast<size_t>(y.num_elements()), 0);
    const E* in = x.as<const E>();
    ForEachOffset<1>(in_shape, {strides}, [&](const auto& offsets) {
      Accumulator<E>& sum = sums[static_cast<size_t>(offsets[0])];
      sum = WrappingAdd<Accumulator<E>>(sum, *in++);
    });
    std::transform(sums.begin(), sums.end(), y.as<E>(),
                   [](Accumulator<E> sum) { return static_cast<E>(sum); });
    return absl::OkStatus();
  });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(ReduceSum);

}  // namespace spillway::backends::reference
