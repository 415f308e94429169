// Matrix products (matmul, linear and linear's weight gradient) and the
// embedding lookup with its gradient.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "ir/ops/op_defs.h"
#include "ir/ops/op_util.h"
#include "support/status_macros.h"

namespace spillway::ir::ops {
namespace {

using Types = std::vector<TensorType>;

absl::Status ExpectMinRank(const TensorType& type, int64_t min_rank, int index,
                           std::string_view role) {
  if (type.rank() >= min_rank) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must have rank >= {}, got {}", index,
                                                role, min_rank, TypeToString(type)));
}

absl::Status ExpectSameDType(const TensorType& a, int a_index, const TensorType& b, int b_index) {
  if (a.dtype == b.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("inputs {} and {} must have one dtype, got {} and {}", a_index, b_index,
                  TypeToString(a), TypeToString(b)));
}

// A product's cost: its MACs, two flops each, and every input and output moved once.
OpCost ProductCost(std::span<const TensorType> inputs, std::span<const TensorType> outputs,
                   int64_t macs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.macs = macs;
  cost.flops = 2 * macs;
  return cost;
}

// ---- matmul ----

absl::Status ValidateMatMul(const AttrMap& attrs) {
  RETURN_IF_ERROR(attrs.GetBool("transpose_a", false).status());
  RETURN_IF_ERROR(attrs.GetBool("transpose_b", false).status());
  ASSIGN_OR_RETURN(double alpha, attrs.GetFloat("alpha", 1.0));
  if (!std::isfinite(alpha)) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'alpha' must be finite, got {}", AttrValueToString(alpha)));
  }
  return absl::OkStatus();
}

// The reduction length K of a: its last axis, or the one before when transposed.
int64_t MatMulDepth(const AttrMap& attrs, const TensorType& a) {
  const bool transpose_a = *attrs.GetBool("transpose_a", false);
  return a.shape[a.shape.size() - (transpose_a ? 2 : 1)];
}

absl::StatusOr<Types> InferMatMul(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& a = inputs[0];
  const TensorType& b = inputs[1];
  RETURN_IF_ERROR(ExpectMinRank(a, 2, 0, "a"));
  RETURN_IF_ERROR(ExpectMinRank(b, 2, 1, "b"));
  RETURN_IF_ERROR(ExpectFloating(a, 0, "a"));
  RETURN_IF_ERROR(ExpectSameDType(a, 0, b, 1));
  const bool transpose_a = *attrs.GetBool("transpose_a", false);
  const bool transpose_b = *attrs.GetBool("transpose_b", false);
  const size_t a_rank = a.shape.size();
  const size_t b_rank = b.shape.size();
  const int64_t m = a.shape[a_rank - (transpose_a ? 1 : 2)];
  const int64_t k_a = MatMulDepth(attrs, a);
  const int64_t k_b = b.shape[b_rank - (transpose_b ? 1 : 2)];
  const int64_t n = b.shape[b_rank - (transpose_b ? 2 : 1)];
  if (k_a != k_b) {
    std::string transposed;
    if (transpose_a) transposed += ", transpose_a";
    if (transpose_b) transposed += ", transpose_b";
    return absl::InvalidArgumentError(
        fmt::format("inner dimensions do not match: a {} (K={}) and b {} (K={}){}", TypeToString(a),
                    k_a, TypeToString(b), k_b, transposed));
  }
  const Shape a_batch(a.shape.begin(), a.shape.end() - 2);
  const Shape b_batch(b.shape.begin(), b.shape.end() - 2);
  absl::StatusOr<Shape> batch = BroadcastShapes(a_batch, b_batch);
  if (!batch.ok()) {
    return Annotate(batch.status(), fmt::format("batch dimensions of a {} and b {}",
                                                TypeToString(a), TypeToString(b)));
  }
  Shape shape = *std::move(batch);
  shape.push_back(m);
  shape.push_back(n);
  // The last two axes are a matrix, not channels: the result is plain row-major.
  return Types{TensorType{a.dtype, std::move(shape), Layout::kRowMajor}};
}

// batch·M·N (the output's elements) times K.
OpCost MatMulCost(const AttrMap& attrs, std::span<const TensorType> inputs,
                  std::span<const TensorType> outputs) {
  return ProductCost(inputs, outputs, Elements(outputs[0]) * MatMulDepth(attrs, inputs[0]));
}

// ---- linear ----

absl::StatusOr<Types> InferLinear(const AttrMap& /*attrs*/, std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  const TensorType& w = inputs[1];
  RETURN_IF_ERROR(ExpectMinRank(x, 1, 0, "x"));
  RETURN_IF_ERROR(ExpectFloating(x, 0, "x"));
  RETURN_IF_ERROR(ExpectRank(w, 2, 1, "w"));
  RETURN_IF_ERROR(ExpectSameDType(x, 0, w, 1));
  const int64_t out_features = w.shape[0];
  const int64_t in_features = w.shape[1];
  if (x.shape.back() != in_features) {
    return absl::InvalidArgumentError(fmt::format(
        "in_features do not match: x {} has {} in its last axis, w {} ([out,in]) has {}",
        TypeToString(x), x.shape.back(), TypeToString(w), in_features));
  }
  if (inputs.size() == 3) {
    const TensorType& b = inputs[2];
    RETURN_IF_ERROR(ExpectSameDType(x, 0, b, 2));
    if (b.shape != Shape{out_features}) {
      return absl::InvalidArgumentError(
          fmt::format("input 2 (b) must be [{}] to match w {}, got {}", out_features,
                      TypeToString(w), TypeToString(b)));
    }
  }
  Shape shape = x.shape;
  shape.back() = out_features;
  const int64_t rank = static_cast<int64_t>(shape.size());
  // Over an NHWC activation a linear layer maps channels to channels, so the layout holds.
  return Types{TensorType{x.dtype, std::move(shape), OutputLayout(inputs, rank)}};
}

// rows·out (the output's elements) times in. The bias add is not counted, as
// in torchvision's and fvcore's MAC counts.
OpCost LinearCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                  std::span<const TensorType> outputs) {
  return ProductCost(inputs, outputs, Elements(outputs[0]) * inputs[1].shape[1]);
}

absl::StatusOr<Types> InferLinearBackwardWeight(const AttrMap& /*attrs*/,
                                                std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  const TensorType& x = inputs[1];
  RETURN_IF_ERROR(ExpectMinRank(dy, 1, 0, "dy"));
  RETURN_IF_ERROR(ExpectMinRank(x, 1, 1, "x"));
  RETURN_IF_ERROR(ExpectFloating(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectSameDType(dy, 0, x, 1));
  if (!std::equal(dy.shape.begin(), dy.shape.end() - 1, x.shape.begin(), x.shape.end() - 1)) {
    return absl::InvalidArgumentError(
        fmt::format("leading dimensions of dy {} and x {} must match (all but the last axis)",
                    TypeToString(dy), TypeToString(x)));
  }
  return Types{TensorType{dy.dtype, {dy.shape.back(), x.shape.back()}, Layout::kRowMajor}};
}

// rows·out (dy's elements) times in.
OpCost LinearBackwardWeightCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                                std::span<const TensorType> outputs) {
  return ProductCost(inputs, outputs, Elements(inputs[0]) * inputs[1].shape.back());
}

// ---- embedding ----

absl::StatusOr<Types> InferEmbedding(const AttrMap& /*attrs*/, std::span<const TensorType> inputs) {
  const TensorType& table = inputs[0];
  const TensorType& indices = inputs[1];
  RETURN_IF_ERROR(ExpectRank(table, 2, 0, "table"));
  RETURN_IF_ERROR(ExpectFloating(table, 0, "table"));
  RETURN_IF_ERROR(ExpectInteger(indices, 1, "indices"));
  Shape shape = indices.shape;
  shape.push_back(table.shape[1]);
  return Types{TensorType{table.dtype, std::move(shape), Layout::kRowMajor}};
}

// A gather reads the indices and only the rows it copies, not the whole table.
OpCost EmbeddingCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                     std::span<const TensorType> outputs) {
  OpCost cost;
  cost.bytes_read = inputs[1].bytes() + outputs[0].bytes();
  cost.bytes_written = outputs[0].bytes();
  return cost;
}

absl::Status ValidateEmbeddingBackward(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(int64_t num_embeddings, attrs.GetInt("num_embeddings"));
  if (num_embeddings < 1) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'num_embeddings' must be >= 1, got {}", num_embeddings));
  }
  return absl::OkStatus();
}

absl::StatusOr<Types> InferEmbeddingBackward(const AttrMap& attrs,
                                             std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  const TensorType& indices = inputs[1];
  RETURN_IF_ERROR(ExpectMinRank(dy, 1, 0, "dy"));
  RETURN_IF_ERROR(ExpectFloating(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectInteger(indices, 1, "indices"));
  if (!std::equal(dy.shape.begin(), dy.shape.end() - 1, indices.shape.begin(),
                  indices.shape.end())) {
    return absl::InvalidArgumentError(
        fmt::format("dy {} must be the indices' shape {} plus the embedding axis", TypeToString(dy),
                    TypeToString(indices)));
  }
  return Types{
      TensorType{dy.dtype, {attrs.Int("num_embeddings"), dy.shape.back()}, Layout::kRowMajor}};
}

// Zero the whole table, then one add per element of dy (a scatter-add).
OpCost EmbeddingBackwardCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                             std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]);
  return cost;
}

}  // namespace

void RegisterMatMulOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef(OpKind::kMatMul, OpClass::kMatMul, 2, 2, true, ValidateMatMul, InferMatMul,
                         MatMulCost));
  defs.push_back(
      MakeDef(OpKind::kLinear, OpClass::kMatMul, 2, 3, true, nullptr, InferLinear, LinearCost));
  defs.push_back(MakeDef(OpKind::kLinearBackwardWeight, OpClass::kMatMul, 2, 2, false, nullptr,
                         InferLinearBackwardWeight, LinearBackwardWeightCost));
  defs.push_back(MakeDef(OpKind::kEmbedding, OpClass::kDataMovement, 2, 2, true, nullptr,
                         InferEmbedding, EmbeddingCost));
  defs.push_back(MakeDef(OpKind::kEmbeddingBackward, OpClass::kDataMovement, 2, 2, false,
                         ValidateEmbeddingBackward, InferEmbeddingBackward, EmbeddingBackwardCost));
}

}  // namespace spillway::ir::ops
