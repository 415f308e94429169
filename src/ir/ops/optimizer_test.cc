#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
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

AttrMap PlainSgd() { return {{"lr", 0.1}}; }
AttrMap MomentumSgd() { return {{"lr", 0.1}, {"momentum", 0.9}}; }
AttrMap Adam() { return {{"lr", 3e-4}}; }

std::vector<TensorType> AdamInputs(const TensorType& param) {
  return {param, param, param, param, I64({})};
}

TEST(OptimizerOpsTest, RegistryEntries) {
  const OpDef& sgd = GetOpDef(OpKind::kSgdUpdate);
  EXPECT_EQ(sgd.op_class, OpClass::kOptimizer);
  EXPECT_FALSE(sgd.differentiable);
  // param over param, the new momentum buffer over the old one (input 2).
  EXPECT_EQ(sgd.in_place, (std::vector<std::pair<int, int>>{{0, 0}, {1, 2}}));
  const OpDef& adam = GetOpDef(OpKind::kAdamUpdate);
  EXPECT_EQ(adam.op_class, OpClass::kOptimizer);
  EXPECT_FALSE(adam.differentiable);
  EXPECT_EQ(adam.in_place, (std::vector<std::pair<int, int>>{{0, 0}, {1, 2}, {2, 3}}));
}

TEST(OptimizerOpsTest, PlainSgdUpdatesTheParamOnly) {
  EXPECT_THAT(InferTypes(OpKind::kSgdUpdate, {F32({64, 3, 3, 3}), F32({64, 3, 3, 3})}, PlainSgd()),
              ElementsAre("f32[64,3,3,3]"));
}

TEST(OptimizerOpsTest, MomentumSgdUpdatesParamAndBuffer) {
  EXPECT_THAT(
      InferTypes(OpKind::kSgdUpdate, {F32({1000, 2048}), F32({1000, 2048}), F32({1000, 2048})},
                 {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 1e-4}, {"nesterov", true}}),
      ElementsAre("f32[1000,2048]", "f32[1000,2048]"));
}

TEST(OptimizerOpsTest, SgdInputCountFollowsMomentum) {
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4}), F32({4}), F32({4})}, PlainSgd()),
              HasSubstr("momentum is 0, so there is no momentum_buf input"));
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4}), F32({4})}, MomentumSgd()),
              HasSubstr("momentum 0.9 needs a momentum_buf as input 2"));
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4})}, PlainSgd()),
              HasSubstr("expects 2 to 3 inputs, got 1"));
}

TEST(OptimizerOpsTest, SgdGradMustMatchParam) {
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4, 5}), F32({5, 4})}, PlainSgd()),
              HasSubstr("inputs 0 and 1 must have the same type, got f32[4,5] and f32[5,4]"));
  const TensorType half{DType::kF16, {4}, Layout::kRowMajor};
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4}), half}, PlainSgd()),
              HasSubstr("got f32[4] and f16[4]"));
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4}), F32({4}), F32({3})}, MomentumSgd()),
              HasSubstr("inputs 0 and 2 must have the same type"));
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {I64({4}), I64({4})}, PlainSgd()),
              HasSubstr("input 0 (param) must be floating point"));
}

TEST(OptimizerOpsTest, SgdRejectsBadAttributes) {
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4}), F32({4})}),
              HasSubstr("missing attribute 'lr'"));
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4}), F32({4})}, {{"lr", -0.1}}),
              HasSubstr("attribute 'lr' must be >= 0.0, got -0.1"));
  EXPECT_THAT(InferError(OpKind::kSgdUpdate, {F32({4}), F32({4}), F32({4})},
                         {{"lr", 0.1}, {"momentum", 1.0}}),
              HasSubstr("attribute 'momentum' must be in [0.0, 1.0), got 1.0"));
  EXPECT_THAT(
      InferError(OpKind::kSgdUpdate, {F32({4}), F32({4})}, {{"lr", 0.1}, {"nesterov", true}}),
      HasSubstr("attribute 'nesterov' needs a nonzero 'momentum'"));
  EXPECT_THAT(
      InferError(OpKind::kSgdUpdate, {F32({4}), F32({4})}, {{"lr", 0.1}, {"weight_decay", -1.0}}),
      HasSubstr("attribute 'weight_decay' must be >= 0.0"));
}

TEST(OptimizerOpsTest, AdamUpdatesParamAndMoments) {
  EXPECT_THAT(InferTypes(OpKind::kAdamUpdate, AdamInputs(F32({2304, 768})),
                         {{"lr", 3e-4}, {"beta1", 0.9}, {"beta2", 0.95}, {"weight_decay", 0.1}}),
              ElementsAre("f32[2304,768]", "f32[2304,768]", "f32[2304,768]"));
}

TEST(OptimizerOpsTest, AdamStepMustBeAnI64Scalar) {
  std::vector<TensorType> inputs = AdamInputs(F32({8}));
  inputs[4] = TensorType{DType::kI32, {}, Layout::kRowMajor};
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, Adam()),
              HasSubstr("input 4 (step) must be i64[], got i32[]"));
  inputs[4] = I64({1});
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, Adam()),
              HasSubstr("input 4 (step) must be i64[], got i64[1]"));
}

TEST(OptimizerOpsTest, AdamStateMustMatchParam) {
  std::vector<TensorType> inputs = AdamInputs(F32({8}));
  inputs[3] = F32({9});
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, Adam()),
              HasSubstr("inputs 0 and 3 must have the same type, got f32[8] and f32[9]"));
  inputs = AdamInputs(F32({8}));
  inputs[1] = F32({8, 1});
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, Adam()),
              HasSubstr("inputs 0 and 1 must have the same type"));
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, {F32({8}), F32({8}), F32({8}), F32({8})}, Adam()),
              HasSubstr("expects 5 inputs, got 4"));
}

TEST(OptimizerOpsTest, AdamRejectsBadAttributes) {
  const std::vector<TensorType> inputs = AdamInputs(F32({8}));
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs), HasSubstr("missing attribute 'lr'"));
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, {{"lr", 1e-3}, {"beta1", 1.0}}),
              HasSubstr("attribute 'beta1' must be in [0.0, 1.0), got 1.0"));
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, {{"lr", 1e-3}, {"beta2", -0.1}}),
              HasSubstr("attribute 'beta2' must be in [0.0, 1.0)"));
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, {{"lr", 1e-3}, {"epsilon", 0.0}}),
              HasSubstr("attribute 'epsilon' must be positive"));
  EXPECT_THAT(InferError(OpKind::kAdamUpdate, inputs, {{"lr", 1e-3}, {"decoupled", int64_t{1}}}),
              HasSubstr("attribute 'decoupled' must be a bool"));
}

TEST(OptimizerOpsTest, SgdCostReadsAndWritesState) {
  // Momentum SGD on f32[1000]: 2 flops (lr·g, subtract) + 2 (buffer update) = 4
  // per element; reads param, grad and buffer (3·4000 bytes), writes param and
  // buffer (2·4000).
  const std::vector<TensorType> inputs(3, F32({1000}));
  const std::vector<TensorType> outputs(2, F32({1000}));
  const OpCost cost = GetOpDef(OpKind::kSgdUpdate).cost(MomentumSgd(), inputs, outputs);
  EXPECT_EQ(cost.flops, 4000);
  EXPECT_EQ(cost.bytes_read, 12'000);
  EXPECT_EQ(cost.bytes_written, 8'000);
}

TEST(OptimizerOpsTest, AdamCost) {
  // 19 flops per element on f32[1000]; reads four f32[1000] tensors and the
  // 8-byte step, writes three.
  const std::vector<TensorType> inputs = AdamInputs(F32({1000}));
  const std::vector<TensorType> outputs(3, F32({1000}));
  const OpCost cost = GetOpDef(OpKind::kAdamUpdate).cost(Adam(), inputs, outputs);
  EXPECT_EQ(cost.flops, 19'000);
  EXPECT_EQ(cost.bytes_read, 16'008);
  EXPECT_EQ(cost.bytes_written, 12'000);
}

TEST(OptimizerOpsTest, GraphNamesStateOutputs) {
  Graph graph;
  const ValueId param = graph.AddInput("fc.w", F32({10, 4}), ValueKind::kParameter);
  const ValueId grad = graph.AddInput("fc.w.grad", F32({10, 4}));
  const ValueId m = graph.AddInput("fc.w.m", F32({10, 4}), ValueKind::kOptimizerState);
  const ValueId v = graph.AddInput("fc.w.v", F32({10, 4}), ValueKind::kOptimizerState);
  const ValueId step = graph.AddInput("step", I64({}), ValueKind::kOptimizerState);
  absl::StatusOr<NodeId> node = graph.AddNode(OpKind::kAdamUpdate, {param, grad, m, v, step},
                                              Adam(), "adam.fc.w", Phase::kUpdate);
  ASSERT_TRUE(node.ok()) << StatusMessage(node.status());
  const Node& update = graph.node(*node);
  ASSERT_EQ(update.outputs.size(), 3u);
  EXPECT_EQ(graph.value(update.outputs[0]).name, "adam.fc.w");
  EXPECT_EQ(graph.value(update.outputs[1]).name, "adam.fc.w.m");
  EXPECT_EQ(graph.value(update.outputs[2]).name, "adam.fc.w.v");
}

TEST(OptimizerOpsTest, GraphErrorNamesTheNode) {
  Graph graph;
  const ValueId param = graph.AddInput("w", F32({10, 4}), ValueKind::kParameter);
  const ValueId grad = graph.AddInput("w.grad", F32({4, 10}));
  absl::StatusOr<NodeId> node =
      graph.AddNode(OpKind::kSgdUpdate, {param, grad}, PlainSgd(), "sgd.w", Phase::kUpdate);
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(std::string(StatusMessage(node.status())),
              HasSubstr("node 'sgd.w' (sgd_update): inputs 0 and 1 must have the same type"));
}

}  // namespace
}  // namespace spillway::ir
