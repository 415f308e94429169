#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "support/status_macros.h"

namespace spillway::ir {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The inferred output types as the text format writes them, or the error.
std::vector<std::string> InferTypes(OpKind op, std::vector<TensorType> inputs,
                                    const AttrMap& attrs = {}) {
  absl::StatusOr<std::vector<TensorType>> outputs = InferOutputTypes(op, attrs, inputs);
  if (!outputs.ok()) return {"error: " + std::string(StatusMessage(outputs.status()))};
  std::vector<std::string> types;
  for (const TensorType& type : *outputs) types.push_back(TypeToString(type));
  return types;
}

// The message of an inference that must fail; a success yields a text no check matches.
std::string InferError(OpKind op, std::vector<TensorType> inputs, const AttrMap& attrs = {}) {
  absl::StatusOr<std::vector<TensorType>> outputs = InferOutputTypes(op, attrs, inputs);
  if (outputs.ok()) return "<inference succeeded>";
  return std::string(StatusMessage(outputs.status()));
}

TensorType I32(Shape shape) { return {DType::kI32, std::move(shape), Layout::kRowMajor}; }

AttrMap NoReduction() { return {{"reduction", std::string("none")}}; }

TEST(LossOpsTest, RegistryEntries) {
  EXPECT_EQ(GetOpDef(OpKind::kCrossEntropyLoss).op_class, OpClass::kLoss);
  EXPECT_EQ(GetOpDef(OpKind::kCrossEntropyLossBackward).op_class, OpClass::kLoss);
  EXPECT_TRUE(GetOpDef(OpKind::kCrossEntropyLoss).differentiable);
  EXPECT_FALSE(GetOpDef(OpKind::kCrossEntropyLossBackward).differentiable);
}

TEST(LossOpsTest, MeanReductionGivesAScalar) {
  // ImageNet-style: 8 rows of 1000 classes, one label per row.
  EXPECT_THAT(InferTypes(OpKind::kCrossEntropyLoss, {F32({8, 1000}), I64({8})}),
              ElementsAre("f32[]"));
  // Language modelling: [batch 2, seq 16, vocab 100] logits, i32 [2,16] labels.
  EXPECT_THAT(InferTypes(OpKind::kCrossEntropyLoss, {F32({2, 16, 100}), I32({2, 16})},
                         {{"ignore_index", int64_t{0}}}),
              ElementsAre("f32[]"));
}

TEST(LossOpsTest, NoReductionGivesOneLossPerLabel) {
  EXPECT_THAT(
      InferTypes(OpKind::kCrossEntropyLoss, {F32({2, 16, 100}), I64({2, 16})}, NoReduction()),
      ElementsAre("f32[2,16]"));
}

TEST(LossOpsTest, LossIsF32ForHalfLogits) {
  const TensorType half_logits{DType::kF16, {8, 10}, Layout::kRowMajor};
  EXPECT_THAT(InferTypes(OpKind::kCrossEntropyLoss, {half_logits, I64({8})}), ElementsAre("f32[]"));
}

TEST(LossOpsTest, RejectsLabelShapeMismatch) {
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLoss, {F32({8, 10}), I64({4})}),
              HasSubstr("labels i64[4] must have the shape of logits f32[8,10] without its last "
                        "(class) axis, [8]"));
  // One-hot labels are not accepted: labels are class indices.
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLoss, {F32({8, 10}), I64({8, 10})}),
              HasSubstr("without its last (class) axis"));
}

TEST(LossOpsTest, RejectsWrongDTypes) {
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLoss, {F32({8, 10}), F32({8})}),
              HasSubstr("input 1 (labels) must be i32 or i64, got f32[8]"));
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLoss, {I64({8, 10}), I64({8})}),
              HasSubstr("input 0 (logits) must be floating point, got i64[8,10]"));
}

TEST(LossOpsTest, RejectsScalarLogits) {
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLoss, {F32({}), I64({})}),
              HasSubstr("input 0 (logits) must have a class axis, got f32[]"));
}

TEST(LossOpsTest, RejectsBadAttributes) {
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLoss, {F32({8, 10}), I64({8})},
                         {{"reduction", std::string("sum")}}),
              HasSubstr("attribute 'reduction' must be \"mean\" or \"none\", got \"sum\""));
  EXPECT_THAT(
      InferError(OpKind::kCrossEntropyLoss, {F32({8, 10}), I64({8})}, {{"ignore_index", 0.5}}),
      HasSubstr("attribute 'ignore_index' must be a int"));
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLoss, {F32({8, 10})}),
              HasSubstr("expects 2 inputs, got 1"));
}

TEST(LossOpsTest, BackwardGivesLogitsGradient) {
  EXPECT_THAT(InferTypes(OpKind::kCrossEntropyLossBackward, {F32({}), F32({8, 10}), I64({8})}),
              ElementsAre("f32[8,10]"));
  EXPECT_THAT(InferTypes(OpKind::kCrossEntropyLossBackward,
                         {F32({2, 16}), F32({2, 16, 100}), I64({2, 16})}, NoReduction()),
              ElementsAre("f32[2,16,100]"));
}

TEST(LossOpsTest, BackwardRejectsDlossOfTheWrongShape) {
  // "mean" made a scalar loss, so its gradient is a scalar too.
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLossBackward, {F32({8}), F32({8, 10}), I64({8})}),
              HasSubstr("input 0 (dloss) must be a floating tensor of the loss's shape [], got "
                        "f32[8]"));
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLossBackward, {F32({}), F32({8, 10}), I64({8})},
                         NoReduction()),
              HasSubstr("loss's shape [8], got f32[]"));
}

TEST(LossOpsTest, BackwardChecksLogitsAndLabels) {
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLossBackward, {F32({}), F32({8, 10}), F32({8})}),
              HasSubstr("input 2 (labels) must be i32 or i64"));
  EXPECT_THAT(InferError(OpKind::kCrossEntropyLossBackward, {F32({}), F32({8, 10})}),
              HasSubstr("expects 3 inputs, got 2"));
}

TEST(LossOpsTest, CostIsPerLogit) {
  // 8·10 = 80 logits at 7 flops each (max, subtract, exp counted as 4, sum) = 560;
  // reads 320 bytes of logits and 64 of i64 labels, writes a 4-byte scalar.
  const std::vector<TensorType> inputs = {F32({8, 10}), I64({8})};
  const std::vector<TensorType> outputs = {F32({})};
  const OpCost cost = GetOpDef(OpKind::kCrossEntropyLoss).cost({}, inputs, outputs);
  EXPECT_EQ(cost.macs, 0);
  EXPECT_EQ(cost.flops, 560);
  EXPECT_EQ(cost.bytes_read, 384);
  EXPECT_EQ(cost.bytes_written, 4);
  // The backward counts its logits (input 1) at 14 flops each: 1120.
  const std::vector<TensorType> backward_inputs = {F32({}), F32({8, 10}), I64({8})};
  const std::vector<TensorType> backward_outputs = {F32({8, 10})};
  EXPECT_EQ(
      GetOpDef(OpKind::kCrossEntropyLossBackward).cost({}, backward_inputs, backward_outputs).flops,
      1120);
}

TEST(LossOpsTest, GraphErrorNamesTheNode) {
  Graph graph;
  const ValueId logits = graph.AddInput("logits", F32({4, 10}));
  const ValueId labels = graph.AddInput("labels", I64({5}));
  absl::StatusOr<NodeId> node =
      graph.AddNode(OpKind::kCrossEntropyLoss, {logits, labels}, {}, "loss");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(std::string(StatusMessage(node.status())),
              HasSubstr("node 'loss' (cross_entropy_loss): labels i64[5]"));
}

}  // namespace
}  // namespace spillway::ir
