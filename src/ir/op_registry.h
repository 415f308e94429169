// The op registry: for every op kind, how to validate its attributes, infer
// its output types, and count its FLOPs and bytes moved.
//
// The gradient rule of each differentiable op lives with autodiff
// (src/autodiff/gradients.cc), which is a later stage: the registry says
// whether an op is differentiable and autodiff's tests check that every such
// op has a rule.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/types.h"

namespace spillway::ir {

class Graph;
struct Node;

// What kind of work an op is, for the cost model: convolutions and matrix
// products are compute-bound, the rest are limited by memory bandwidth.
enum class OpClass : uint8_t {
  kConvolution,
  kMatMul,
  kElementwise,
  kNormalization,
  kPooling,
  kReduction,
  kDataMovement,  // reshape, transpose, concat, slice, resize
  kLoss,
  kOptimizer,
  kOpaque,  // a planning-only node: its time comes from the graph file, not a formula
};
std::string_view OpClassName(OpClass op_class);

struct OpCost {
  int64_t macs = 0;   // multiply-accumulates of convolutions and matrix products
  int64_t flops = 0;  // all floating-point operations (a MAC counts as two)
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

using ValidateFn = absl::Status (*)(const AttrMap& attrs);
using InferFn = absl::StatusOr<std::vector<TensorType>> (*)(const AttrMap& attrs,
                                                            std::span<const TensorType> inputs);
using CostFn = OpCost (*)(const AttrMap& attrs, std::span<const TensorType> inputs,
                          std::span<const TensorType> outputs);

struct OpDef {
  OpKind kind = OpKind::kRelu;
  OpClass op_class = OpClass::kElementwise;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number (add_n, concat)
  // Names of outputs after the first, used to name values ("bn1.saved_mean").
  // Index 0 is unused: the first output takes the node's name.
  std::vector<std::string_view> output_names;
  bool differentiable = false;
  // (output, input) pairs: the output is written in place over the input's
  // buffer (optimizer updates, running statistics). Liveness counts one buffer.
  std::vector<std::pair<int, int>> in_place;
  // The kernel may write its first output over any input of the same type
  // that nothing reads afterwards: it reads element i of every input before it
  // writes element i (elementwise ops). The rewriter donates such buffers.
  bool may_overwrite_inputs = false;
  // With may_overwrite_inputs: the one input whose buffer the first output
  // may take (conv2d_backward_data's accumulator, which it reads before it
  // writes; its other inputs it reads throughout); -1: any input.
  int overwritable_input = -1;
  // No kernel: the op exists to be planned and simulated (a node of a
  // cost-annotated graph). Backends refuse it; coverage checks skip it.
  bool planning_only = false;
  ValidateFn validate = nullptr;  // may be null: no attributes to check
  InferFn infer = nullptr;
  CostFn cost = nullptr;  // null: bytes of inputs and outputs, no FLOPs

  // Whether the first output may be written over input `input` (of the
  // output's type and dead after this node: the caller checks that).
  bool MayOverwrite(size_t input) const {
    return may_overwrite_inputs &&
           (overwritable_input < 0 || input == static_cast<size_t>(overwritable_input));
  }
};

// The definition of an op; every OpKind has one.
const OpDef& GetOpDef(OpKind kind);

// Checks the input count, validates the attributes and infers the output
// types. Errors say what is wrong without the node's name (the caller adds it).
absl::StatusOr<std::vector<TensorType>> InferOutputTypes(OpKind kind, const AttrMap& attrs,
                                                         std::span<const TensorType> inputs);

// The cost of one node of a graph that has passed inference.
OpCost NodeCost(const Graph& graph, const Node& node);

// The bytes of every input and output: the default cost of data-movement ops.
OpCost BytesOnlyCost(std::span<const TensorType> inputs, std::span<const TensorType> outputs);

}  // namespace spillway::ir
