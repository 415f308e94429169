// Planning-only ops. `opaque` is a node of a graph that came with its own
// costs (a node-link JSON file): Spillway knows what it reads and how many
// bytes it writes, and a cost model gives its time; it has no kernel.
#include <span>
#include <vector>

#include "ir/ops/op_defs.h"
#include "ir/ops/op_util.h"
#include "support/status_macros.h"

namespace spillway::ir::ops {
namespace {

using Types = std::vector<TensorType>;

absl::Status ValidateOpaque(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(int64_t bytes, attrs.GetInt("bytes"));
  if (bytes < 0) {
    return absl::InvalidArgumentError(fmt::format("attribute 'bytes' must be >= 0, got {}", bytes));
  }
  return absl::OkStatus();
}

// One output: a buffer of `bytes` bytes, typed as bytes (bool, one byte each).
absl::StatusOr<Types> InferOpaque(const AttrMap& attrs, std::span<const TensorType> /*inputs*/) {
  return Types{TensorType{DType::kBool, Shape{attrs.Int("bytes")}, Layout::kRowMajor}};
}

}  // namespace

void RegisterPlanningOps(std::vector<OpDef>& defs) {
  // The default cost (bytes of its inputs and output, no FLOPs) is only what
  // a roofline would charge without the file's duration.
  OpDef opaque = MakeDef(OpKind::kOpaque, OpClass::kOpaque, 0, -1, /*differentiable=*/false,
                         ValidateOpaque, InferOpaque, nullptr);
  opaque.planning_only = true;
  defs.push_back(std::move(opaque));
}

}  // namespace spillway::ir::ops
