#include "ir/ops/op_util.h"

#include <algorithm>

#include "support/check.h"

namespace spillway::ir::ops {

absl::Status ExpectRank(const TensorType& type, int64_t rank, int index, std::string_view role) {
  if (type.rank() == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must have rank {}, got {}", index,
                                                role, rank, TypeToString(type)));
}

absl::Status ExpectFloating(const TensorType& type, int index, std::string_view role) {
  if (IsFloating(type.dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("input {} ({}) must be floating point, got {}", index, role, TypeToString(type)));
}

absl::Status ExpectInteger(const TensorType& type, int index, std::string_view role) {
  if (type.dtype == DType::kI32 || type.dtype == DType::kI64) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("input {} ({}) must be i32 or i64, got {}", index, role, TypeToString(type)));
}

absl::Status ExpectSameShape(const TensorType& a, int a_index, const TensorType& b, int b_index) {
  if (a.dtype == b.dtype && a.shape == b.shape) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("inputs {} and {} must have the same type, got {} and {}", a_index, b_index,
                  TypeToString(a), TypeToString(b)));
}

absl::StatusOr<IntList> GetSizedInts(const AttrMap& attrs, std::string_view name, size_t size,
                                     IntList fallback, int64_t min_value) {
  absl::StatusOr<IntList> list = attrs.GetInts(name, std::move(fallback));
  if (!list.ok()) return list.status();
  if (list->size() != size) {
    return absl::InvalidArgumentError(fmt::format("attribute '{}' must have {} entries, got {}",
                                                  name, size, AttrValueToString(*list)));
  }
  for (int64_t v : *list) {
    if (v < min_value) {
      return absl::InvalidArgumentError(fmt::format("attribute '{}' entries must be >= {}, got {}",
                                                    name, min_value, AttrValueToString(*list)));
    }
  }
  return list;
}

absl::StatusOr<IntList> GetRequiredSizedInts(const AttrMap& attrs, std::string_view name,
                                             size_t size, int64_t min_value) {
  if (!attrs.Has(name)) {
    return absl::InvalidArgumentError(fmt::format("missing attribute '{}'", name));
  }
  return GetSizedInts(attrs, name, size, {}, min_value);
}

absl::StatusOr<int64_t> WindowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                                         int64_t pad_begin, int64_t pad_end, int64_t dilation,
                                         std::string_view axis) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t padded = in + pad_begin + pad_end;
  if (padded < span) {
    return absl::InvalidArgumentError(
        fmt::format("{} extent {} ({} padded) is smaller than the window of {}: the input is too "
                    "small for this layer",
                    axis, in, padded, span));
  }
  return (padded - span) / stride + 1;
}

absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    return absl::InvalidArgumentError(
        fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return normalized;
}

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(
          fmt::format("shapes {} and {} do not broadcast", ShapeToString(a), ShapeToString(b)));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Layout OutputLayout(std::span<const TensorType> inputs, int64_t output_rank) {
  if (output_rank != 4) return Layout::kRowMajor;
  for (const TensorType& t : inputs) {
    if (t.layout == Layout::kNHWC) return Layout::kNHWC;
  }
  return Layout::kRowMajor;
}

OpCost ElementwiseCost(std::span<const TensorType> inputs, std::span<const TensorType> outputs,
                       int64_t flops_per_element) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  for (const TensorType& t : outputs) cost.flops += Elements(t) * flops_per_element;
  return cost;
}

int64_t Elements(const TensorType& type) {
  std::optional<int64_t> n = NumElements(type.shape);
  SPILLWAY_CHECK(n.has_value(), "element count overflows int64");
  return *n;
}

OpDef MakeDef(OpKind kind, OpClass op_class, int min_inputs, int max_inputs, bool differentiable,
              ValidateFn validate, InferFn infer, CostFn cost) {
  OpDef def;
  def.kind = kind;
  def.op_class = op_class;
  def.min_inputs = min_inputs;
  def.max_inputs = max_inputs;
  def.differentiable = differentiable;
  def.validate = validate;
  def.infer = infer;
  def.cost = cost;
  return def;
}

}  // namespace spillway::ir::ops
