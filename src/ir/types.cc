#include "ir/types.h"

#include <array>
#include <limits>
#include <utility>

#include "fmt/format.h"
#include "support/check.h"
#include "support/checked_math.h"

namespace spillway::ir {
namespace {

constexpr std::array<std::pair<DType, std::string_view>, 6> kDTypeNames = {{
    {DType::kF32, "f32"},
    {DType::kF16, "f16"},
    {DType::kBF16, "bf16"},
    {DType::kI32, "i32"},
    {DType::kI64, "i64"},
    {DType::kBool, "bool"},
}};

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const auto& [d, name] : kDTypeNames) {
    if (d == dtype) return name;
  }
  SPILLWAY_CHECK(false, "unknown dtype");
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& [d, n] : kDTypeNames) {
    if (n == name) return d;
  }
  return std::nullopt;
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kBool:
      return 1;
  }
  SPILLWAY_CHECK(false, "unknown dtype");
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

std::string_view LayoutName(Layout layout) {
  return layout == Layout::kNHWC ? "nhwc" : "row_major";
}

std::optional<Layout> ParseLayout(std::string_view name) {
  if (name == "nhwc") return Layout::kNHWC;
  if (name == "row_major") return Layout::kRowMajor;
  return std::nullopt;
}

std::optional<int64_t> NumElements(const Shape& shape) {
  std::optional<int64_t> count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    count = CheckedMul(*count, dim);
    if (!count) return std::nullopt;
  }
  return count;
}

MatrixExtent AsMatrix(const Shape& shape) {
  MatrixExtent matrix;
  matrix.columns = shape.empty() ? 1 : shape.back();
  for (size_t d = 0; d + 1 < shape.size(); ++d) matrix.rows *= shape[d];
  return matrix;
}

std::string ShapeToString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

std::optional<int64_t> TensorType::Bytes() const {
  std::optional<int64_t> count = NumElements(shape);
  if (!count) return std::nullopt;
  return CheckedMul(*count, DTypeSize(dtype));
}

int64_t TensorType::bytes() const {
  std::optional<int64_t> b = Bytes();
  SPILLWAY_CHECK(b.has_value(), "tensor size overflows int64");
  return *b;
}

TensorType F32(Shape shape, Layout layout) { return {DType::kF32, std::move(shape), layout}; }
TensorType Activation(Shape nhwc) { return {DType::kF32, std::move(nhwc), Layout::kNHWC}; }
TensorType I64(Shape shape) { return {DType::kI64, std::move(shape), Layout::kRowMajor}; }

std::string TypeToString(const TensorType& type) {
  std::string text = std::string(DTypeName(type.dtype)) + ShapeToString(type.shape);
  if (type.layout != Layout::kRowMajor) {
    text += " ";
    text += LayoutName(type.layout);
  }
  return text;
}

}  // namespace spillway::ir
