// Helpers shared by the op definitions: input checks that produce the
// registry's error messages, window arithmetic, and common cost formulas.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fmt/format.h"
#include "ir/attributes.h"
#include "ir/op_registry.h"
#include "ir/types.h"

namespace spillway::ir::ops {

// "input 1 (weight) must have rank 4, got f32[3,3]".
absl::Status ExpectRank(const TensorType& type, int64_t rank, int index, std::string_view role);
absl::Status ExpectFloating(const TensorType& type, int index, std::string_view role);
absl::Status ExpectInteger(const TensorType& type, int index, std::string_view role);
// Same dtype and shape (layouts may differ).
absl::Status ExpectSameShape(const TensorType& a, int a_index, const TensorType& b, int b_index);

// A list attribute of exactly `size` entries (or the fallback when absent), each >= min_value.
absl::StatusOr<IntList> GetSizedInts(const AttrMap& attrs, std::string_view name, size_t size,
                                     IntList fallback, int64_t min_value);

// Like GetSizedInts for an attribute without a default: "missing attribute" when absent.
absl::StatusOr<IntList> GetRequiredSizedInts(const AttrMap& attrs, std::string_view name,
                                             size_t size, int64_t min_value);

// Output extent of a convolution or pooling window along one axis:
// floor((in + pad_begin + pad_end - dilation*(kernel-1) - 1) / stride) + 1,
// or an error when the window does not fit (an image too small for the model).
absl::StatusOr<int64_t> WindowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                                         int64_t pad_begin, int64_t pad_end, int64_t dilation,
                                         std::string_view axis);

// Normalizes a possibly negative axis against rank, or errors.
absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank);

// Numpy-style broadcast of two shapes, or an error naming both.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// NHWC if any input is NHWC and the output is rank 4, else row-major.
Layout OutputLayout(std::span<const TensorType> inputs, int64_t output_rank);

// Element-wise cost: `flops_per_element` per output element, all bytes moved.
OpCost ElementwiseCost(std::span<const TensorType> inputs, std::span<const TensorType> outputs,
                       int64_t flops_per_element);

int64_t Elements(const TensorType& type);  // checked-valid element count

// An OpDef with the common fields set; output names and in-place pairs are added after.
OpDef MakeDef(OpKind kind, OpClass op_class, int min_inputs, int max_inputs, bool differentiable,
              ValidateFn validate, InferFn infer, CostFn cost);

}  // namespace spillway::ir::ops
