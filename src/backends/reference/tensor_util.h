// Helpers of the reference kernels: errors that name the node, checks of the
// tensors a kernel is handed, dispatch on the element type, and a row-major
// walk over strided (transposed, sliced, broadcast) tensors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/kernel.h"
#include "backends/strides.h"
#include "fmt/format.h"
#include "ir/op_kind.h"
#include "ir/types.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {

// An InvalidArgument error "<node> (<op>): <message>".
inline absl::Status KernelError(const KernelCall& call, std::string_view message) {
  return absl::InvalidArgumentError(
      fmt::format("{} ({}): {}", call.node.name, ir::OpName(call.node.op), message));
}

// An attribute read (`call.node.attrs.GetXxx(...)`), its error naming the node.
template <typename V>
absl::StatusOr<V> NodeAttr(const KernelCall& call, absl::StatusOr<V> value) {
  if (value.ok()) return value;
  return Annotate(value.status(), fmt::format("{} ({})", call.node.name, ir::OpName(call.node.op)));
}

// Input `index` exists, has a type and data.
inline absl::Status ExpectInput(const KernelCall& call, size_t index) {
  if (index >= call.inputs.size() || call.inputs[index].type == nullptr ||
      call.inputs[index].data == nullptr) {
    return KernelError(call, fmt::format("input {} is missing", index));
  }
  return absl::OkStatus();
}

// Output `index` has a type (its data may be null: not wanted).
inline absl::Status ExpectOutput(const KernelCall& call, size_t index) {
  if (index >= call.outputs.size() || call.outputs[index].type == nullptr) {
    return KernelError(call, fmt::format("output {} is missing", index));
  }
  return absl::OkStatus();
}

// Input `index` exists and is f32 (its elements are T).
inline absl::Status ExpectFloatInput(const KernelCall& call, size_t index) {
  if (absl::Status present = ExpectInput(call, index); !present.ok()) return present;
  const ir::TensorType& type = *call.inputs[index].type;
  if (type.dtype != ir::DType::kF32) {
    return KernelError(call, fmt::format("input {} is {}; the reference kernel takes f32", index,
                                         ir::TypeToString(type)));
  }
  return absl::OkStatus();
}

// Bytes of one element of `type` when f32 tensors hold T (the gradient check
// runs the f32 graph in double).
template <typename T>
int64_t ElementBytes(const ir::TensorType& type) {
  return type.dtype == ir::DType::kF32 ? static_cast<int64_t>(sizeof(T))
                                       : ir::DTypeSize(type.dtype);
}

// Calls fn(E{}) with E the element type of `dtype`'s tensors: T for f32,
// int64_t and int32_t for the integer types. Other dtypes are an error.
template <typename T, typename Fn>
absl::Status DispatchNumeric(const KernelCall& call, ir::DType dtype, Fn&& fn) {
  switch (dtype) {
    case ir::DType::kF32:
      return fn(T{});
    case ir::DType::kI64:
      return fn(int64_t{});
    case ir::DType::kI32:
      return fn(int32_t{});
    default:
      return KernelError(call,
                         fmt::format("no reference kernel for {} tensors", ir::DTypeName(dtype)));
  }
}

// Sums accumulate in double for floating types (the reference is the accurate
// side of every comparison) and in the element type for integers.
template <typename E>
using Accumulator = std::conditional_t<std::is_floating_point_v<E>, double, E>;

// a + b, a - b and a · b; integers wrap around (two's complement) instead of
// overflowing, as in numpy and PyTorch.
template <typename E>
E WrappingAdd(E a, E b) {
  if constexpr (std::is_integral_v<E>) {
    using U = std::make_unsigned_t<E>;
    return static_cast<E>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename E>
E WrappingSub(E a, E b) {
  if constexpr (std::is_integral_v<E>) {
    using U = std::make_unsigned_t<E>;
    return static_cast<E>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <typename E>
E WrappingMul(E a, E b) {
  if constexpr (std::is_integral_v<E>) {
    using U = std::make_unsigned_t<E>;
    return static_cast<E>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// Visits every index of `shape` in row-major order and calls fn(offsets),
// where offsets[k] = sum_d index[d] · strides[k][d] (each stride list has one
// entry per axis). Nothing is visited when an extent is 0.
template <size_t N, typename Fn>
void ForEachOffset(std::span<const int64_t> shape,
                   const std::array<std::span<const int64_t>, N>& strides, Fn&& fn) {
  for (int64_t extent : shape) {
    if (extent == 0) return;
  }
  const size_t rank = shape.size();
  std::vector<int64_t> index(rank, 0);
  std::array<int64_t, N> offsets{};
  while (true) {
    fn(offsets);
    // Advance the last axis, carrying into the ones before it; done when the first wraps.
    size_t d = rank;
    for (; d > 0; --d) {
      const size_t axis = d - 1;
      ++index[axis];
      for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][axis];
      if (index[axis] < shape[axis]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][axis] * shape[axis];
      index[axis] = 0;
    }
    if (d == 0) return;
  }
}

}  // namespace spillway::backends::reference
