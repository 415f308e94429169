// Element types, shapes and tensor types of the IR.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spillway::ir {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kBool };

std::string_view DTypeName(DType dtype);  // "f32", "f16", "bf16", "i32", "i64", "bool"
std::optional<DType> ParseDType(std::string_view name);
int64_t DTypeSize(DType dtype);
bool IsFloating(DType dtype);

// How a 4-D activation is laid out in memory. Activations are NHWC (the layout
// oneDNN and cuDNN are fastest in); everything else (weights, vectors, token
// tensors) is plain row-major.
enum class Layout : uint8_t { kRowMajor, kNHWC };

std::string_view LayoutName(Layout layout);  // "row_major", "nhwc"
std::optional<Layout> ParseLayout(std::string_view name);

// Dimensions of a dense tensor. Rank 0 is a scalar.
using Shape = std::vector<int64_t>;

// Product of the dimensions, or nullopt if it overflows int64 or a dim is negative.
std::optional<int64_t> NumElements(const Shape& shape);

std::string ShapeToString(const Shape& shape);  // "[1,224,224,3]"

// A tensor [..., n] seen as a matrix: `rows` is the product of every axis but
// the last, `columns` the last (1 for a scalar). Batch norm's channels and a
// linear layer's features are the columns of an NHWC or [..., features]
// tensor. For a shape inference has accepted (no overflow).
struct MatrixExtent {
  int64_t rows = 1;
  int64_t columns = 1;
};
MatrixExtent AsMatrix(const Shape& shape);

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  Layout layout = Layout::kRowMajor;

  // Bytes of a dense buffer, or nullopt if the count overflows int64.
  std::optional<int64_t> Bytes() const;
  // Like Bytes() for a type that inference has already accepted (never overflows).
  int64_t bytes() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }

  friend bool operator==(const TensorType&, const TensorType&) = default;
  template <typename H>
  friend H AbslHashValue(H state, const TensorType& type) {
    return H::combine(std::move(state), type.dtype, type.shape, type.layout);
  }
};

TensorType F32(Shape shape, Layout layout = Layout::kRowMajor);
TensorType Activation(Shape nhwc);  // f32, NHWC layout
TensorType I64(Shape shape);

// "f32[1,224,224,3] nhwc" / "i64[8]": the type as the text format writes it.
std::string TypeToString(const TensorType& type);

}  // namespace spillway::ir
