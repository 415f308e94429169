// Helpers the spatial reference kernels share (convolution, pooling,
// normalization, resize, softmax and losses, embedding), beside those of
// tensor_util.h: presence checks of several inputs, NHWC indexing, zeroing
// and integer tensor reads.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "backends/kernel.h"
#include "backends/reference/tensor_util.h"
#include "ir/types.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {

// Every listed input is present (has a type and data).
inline absl::Status ExpectInputs(const KernelCall& call, std::initializer_list<size_t> indices) {
  for (size_t index : indices) RETURN_IF_ERROR(ExpectInput(call, index));
  return absl::OkStatus();
}

// The offset of element [n,h,w,c] in a dense NHWC tensor of `shape`.
inline int64_t NhwcOffset(const ir::Shape& shape, int64_t n, int64_t h, int64_t w, int64_t c) {
  return ((n * shape[1] + h) * shape[2] + w) * shape[3] + c;
}

// Sets every element of `tensor` to zero: the start of every accumulation.
template <typename T>
void FillZero(const TensorRef& tensor) {
  T* data = tensor.as<T>();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) data[i] = T(0);
}

// Element i of an integer tensor (labels, token indices), i64 or i32.
inline int64_t IntegerAt(const TensorRef& tensor, int64_t i) {
  return tensor.type->dtype == ir::DType::kI32 ? tensor.as<const int32_t>()[i]
                                               : tensor.as<const int64_t>()[i];
}

}  // namespace spillway::backends::reference
