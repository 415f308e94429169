// batch_norm, layer_norm, softmax, log_softmax and their backward ops.
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

std::string InferError(OpKind kind, const AttrMap& attrs, const std::vector<TensorType>& inputs) {
  absl::StatusOr<std::vector<TensorType>> outputs = InferOutputTypes(kind, attrs, inputs);
  EXPECT_FALSE(outputs.ok()) << "inferred " << TypeToString(outputs->front());
  return outputs.ok() ? "" : std::string(StatusMessage(outputs.status()));
}

std::vector<TensorType> Infer(OpKind kind, const AttrMap& attrs,
                              const std::vector<TensorType>& inputs) {
  absl::StatusOr<std::vector<TensorType>> outputs = InferOutputTypes(kind, attrs, inputs);
  EXPECT_TRUE(outputs.ok()) << StatusMessage(outputs.status());
  return outputs.ok() ? *outputs : std::vector<TensorType>{};
}

OpCost Cost(OpKind kind, const AttrMap& attrs, const std::vector<TensorType>& inputs) {
  std::vector<TensorType> outputs = Infer(kind, attrs, inputs);
  return GetOpDef(kind).cost(attrs, inputs, outputs);
}

TensorType F16(Shape shape, Layout layout = Layout::kRowMajor) {
  return {DType::kF16, std::move(shape), layout};
}

// ResNet-50's bn1 at batch 8: x [8,56,56,64] and four [64] vectors.
std::vector<TensorType> BatchNormInputs() {
  return {Activation({8, 56, 56, 64}), F32({64}), F32({64}), F32({64}), F32({64})};
}

// ---- batch_norm ----

TEST(BatchNormTest, OnlyBatchNormBackwardMayWriteOverItsInputs) {
  // Batch-norm backward's kernels reduce dy and x before they write dx;
  // layer norm's write dx first, so the rewriter may not donate to it.
  EXPECT_TRUE(GetOpDef(OpKind::kBatchNormBackward).may_overwrite_inputs);
  EXPECT_FALSE(GetOpDef(OpKind::kLayerNormBackward).may_overwrite_inputs);
  EXPECT_FALSE(GetOpDef(OpKind::kBatchNorm).may_overwrite_inputs);
}

TEST(BatchNormTest, TrainingHasFiveOutputs) {
  std::vector<TensorType> outputs = Infer(OpKind::kBatchNorm, {}, BatchNormInputs());
  // training defaults to true: y keeps x's NHWC type, and each statistic is one per channel.
  EXPECT_THAT(outputs,
              ElementsAre(Activation({8, 56, 56, 64}), F32({64}), F32({64}), F32({64}), F32({64})));
  const OpDef& def = GetOpDef(OpKind::kBatchNorm);
  EXPECT_EQ(def.op_class, OpClass::kNormalization);
  EXPECT_TRUE(def.differentiable);
  // The running statistics are written over inputs 3 and 4.
  EXPECT_THAT(def.in_place, ElementsAre(std::pair{3, 3}, std::pair{4, 4}));
}

TEST(BatchNormTest, GraphNamesTheStatistics) {
  Graph graph;
  ValueId x = graph.AddInput("x", Activation({8, 56, 56, 64}));
  std::vector<ValueId> inputs{x};
  for (const char* name : {"gamma", "beta"}) {
    inputs.push_back(graph.AddInput(name, F32({64}), ValueKind::kParameter));
  }
  for (const char* name : {"mean", "var"}) {
    inputs.push_back(graph.AddInput(name, F32({64}), ValueKind::kBuffer));
  }
  absl::StatusOr<NodeId> bn = graph.AddNode(OpKind::kBatchNorm, inputs, {}, "bn1");
  ASSERT_TRUE(bn.ok()) << StatusMessage(bn.status());
  std::vector<std::string> names;
  for (ValueId v : graph.node(*bn).outputs) names.push_back(graph.value(v).name);
  EXPECT_THAT(names, ElementsAre("bn1", "bn1.saved_mean", "bn1.saved_inv_std", "bn1.running_mean",
                                 "bn1.running_var"));
}

TEST(BatchNormTest, InferenceHasOneOutput) {
  EXPECT_THAT(Infer(OpKind::kBatchNorm, {{"training", false}}, BatchNormInputs()),
              ElementsAre(Activation({8, 56, 56, 64})));
}

TEST(BatchNormTest, HalfActivationsKeepF32Statistics) {
  // Mixed precision: f16 activations, f32 parameters and statistics.
  std::vector<TensorType> inputs = BatchNormInputs();
  inputs[0] = F16({8, 56, 56, 64}, Layout::kNHWC);
  std::vector<TensorType> outputs = Infer(OpKind::kBatchNorm, {}, inputs);
  ASSERT_EQ(outputs.size(), 5u);
  EXPECT_EQ(outputs[0], F16({8, 56, 56, 64}, Layout::kNHWC));
  EXPECT_EQ(outputs[1], F32({64}));
}

TEST(BatchNormTest, WorksOnFeatureVectors) {
  // BatchNorm1d over [N,C].
  EXPECT_EQ(
      Infer(OpKind::kBatchNorm, {}, {F32({32, 10}), F32({10}), F32({10}), F32({10}), F32({10})})[0],
      F32({32, 10}));
}

TEST(BatchNormTest, TrainingCostIsMemoryBound) {
  OpCost cost = Cost(OpKind::kBatchNorm, {}, BatchNormInputs());
  // 8*56*56*64 = 1,605,632 elements at 8 FLOPs each (mean 1, variance 3,
  // normalize and affine 4) = 12,845,056. x and y are 6,422,528 bytes each;
  // four [64] f32 vectors are read and four written, 256 bytes each.
  EXPECT_EQ(cost.macs, 0);
  EXPECT_EQ(cost.flops, 12'845'056);
  EXPECT_EQ(cost.bytes_read, 6'422'528 + 4 * 256);
  EXPECT_EQ(cost.bytes_written, 6'422'528 + 4 * 256);
}

TEST(BatchNormTest, InferenceCostIsOneMultiplyAddPerElement) {
  OpCost cost = Cost(OpKind::kBatchNorm, {{"training", false}}, BatchNormInputs());
  // 1,605,632 elements * 2 FLOPs; only y is written.
  EXPECT_EQ(cost.flops, 3'211'264);
  EXPECT_EQ(cost.bytes_written, 6'422'528);
}

TEST(BatchNormTest, RejectsBadShapes) {
  EXPECT_THAT(
      InferError(OpKind::kBatchNorm, {}, {F32({64}), F32({64}), F32({64}), F32({64}), F32({64})}),
      HasSubstr("input 0 (x) must have rank >= 2 ([...,C]), got f32[64]"));
  std::vector<TensorType> inputs = BatchNormInputs();
  inputs[1] = F32({32});
  EXPECT_THAT(InferError(OpKind::kBatchNorm, {}, inputs),
              HasSubstr("input 1 (gamma) must be [64] to match x f32[8,56,56,64] nhwc, got "
                        "f32[32]"));
  inputs = BatchNormInputs();
  inputs[4] = I64({64});
  EXPECT_THAT(InferError(OpKind::kBatchNorm, {}, inputs),
              HasSubstr("input 4 (running_var) must be floating point"));
}

TEST(BatchNormTest, RejectsBadAttributes) {
  EXPECT_THAT(InferError(OpKind::kBatchNorm, {{"momentum", 1.5}}, BatchNormInputs()),
              HasSubstr("attribute 'momentum' must be in [0, 1], got 1.5"));
  EXPECT_THAT(InferError(OpKind::kBatchNorm, {{"epsilon", 0.0}}, BatchNormInputs()),
              HasSubstr("attribute 'epsilon' must be a positive number"));
  EXPECT_THAT(InferError(OpKind::kBatchNorm, {{"epsilon", -1e-5}}, BatchNormInputs()),
              HasSubstr("attribute 'epsilon' must be a positive number"));
  EXPECT_THAT(InferError(OpKind::kBatchNorm, {{"training", int64_t{1}}}, BatchNormInputs()),
              HasSubstr("attribute 'training' must be a bool"));
}

TEST(BatchNormTest, RejectsWrongInputCount) {
  std::vector<TensorType> inputs = BatchNormInputs();
  inputs.pop_back();
  EXPECT_EQ(InferError(OpKind::kBatchNorm, {}, inputs), "expects 5 inputs, got 4");
}

// ---- batch_norm_backward ----

TEST(BatchNormBackwardTest, GradientsOfInputAndAffineParameters) {
  // dy, x, gamma, saved_mean, saved_inv_std -> dx, dgamma, dbeta.
  const std::vector<TensorType> inputs{Activation({8, 56, 56, 64}), Activation({8, 56, 56, 64}),
                                       F32({64}), F32({64}), F32({64})};
  EXPECT_THAT(Infer(OpKind::kBatchNormBackward, {}, inputs),
              ElementsAre(Activation({8, 56, 56, 64}), F32({64}), F32({64})));
  EXPECT_FALSE(GetOpDef(OpKind::kBatchNormBackward).differentiable);
  // 1,605,632 elements at 10 FLOPs; dy and x are read, dx written.
  OpCost cost = Cost(OpKind::kBatchNormBackward, {}, inputs);
  EXPECT_EQ(cost.flops, 16'056'320);
  EXPECT_EQ(cost.bytes_read, 2 * 6'422'528 + 3 * 256);
  EXPECT_EQ(cost.bytes_written, 6'422'528 + 2 * 256);
}

TEST(BatchNormBackwardTest, Errors) {
  // dy must have x's type.
  EXPECT_THAT(InferError(OpKind::kBatchNormBackward, {},
                         {Activation({8, 28, 28, 64}), Activation({8, 56, 56, 64}), F32({64}),
                          F32({64}), F32({64})}),
              HasSubstr("inputs 0 and 1 must have the same type"));
  // In inference mode input 4 is the running variance.
  EXPECT_THAT(InferError(OpKind::kBatchNormBackward, {{"training", false}},
                         {Activation({8, 56, 56, 64}), Activation({8, 56, 56, 64}), F32({64}),
                          F32({64}), F32({63})}),
              HasSubstr("input 4 (running_var) must be [64]"));
  EXPECT_THAT(InferError(OpKind::kBatchNormBackward, {{"epsilon", 0.0}},
                         {Activation({8, 56, 56, 64}), Activation({8, 56, 56, 64}), F32({64}),
                          F32({64}), F32({64})}),
              HasSubstr("attribute 'epsilon' must be a positive number"));
  EXPECT_EQ(InferError(OpKind::kBatchNormBackward, {},
                       {Activation({8, 56, 56, 64}), Activation({8, 56, 56, 64})}),
            "expects 5 inputs, got 2");
}

// ---- layer_norm ----

// A BERT-base block: batch 4, 128 tokens, 768 features.
std::vector<TensorType> LayerNormInputs() { return {F32({4, 128, 768}), F32({768}), F32({768})}; }

TEST(LayerNormTest, StatisticsPerRow) {
  // One mean and one rstd per token: [4,128].
  EXPECT_THAT(Infer(OpKind::kLayerNorm, {}, LayerNormInputs()),
              ElementsAre(F32({4, 128, 768}), F32({4, 128}), F32({4, 128})));
  EXPECT_TRUE(GetOpDef(OpKind::kLayerNorm).differentiable);
  // A single vector has scalar statistics.
  EXPECT_THAT(Infer(OpKind::kLayerNorm, {}, {F32({768}), F32({768}), F32({768})}),
              ElementsAre(F32({768}), F32({}), F32({})));
}

TEST(LayerNormTest, HalfInputKeepsF32Statistics) {
  EXPECT_THAT(Infer(OpKind::kLayerNorm, {}, {F16({4, 128, 768}), F16({768}), F16({768})}),
              ElementsAre(F16({4, 128, 768}), F32({4, 128}), F32({4, 128})));
}

TEST(LayerNormTest, GraphNamesTheStatistics) {
  Graph graph;
  ValueId x = graph.AddInput("x", F32({4, 128, 768}));
  ValueId gamma = graph.AddInput("gamma", F32({768}), ValueKind::kParameter);
  ValueId beta = graph.AddInput("beta", F32({768}), ValueKind::kParameter);
  absl::StatusOr<NodeId> ln = graph.AddNode(OpKind::kLayerNorm, {x, gamma, beta}, {}, "ln1");
  ASSERT_TRUE(ln.ok()) << StatusMessage(ln.status());
  EXPECT_EQ(graph.value(graph.node(*ln).outputs[2]).name, "ln1.rstd");
}

TEST(LayerNormTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kLayerNorm, {}, {F32({}), F32({1}), F32({1})}),
              HasSubstr("input 0 (x) must have rank >= 1"));
  EXPECT_THAT(InferError(OpKind::kLayerNorm, {}, {F32({4, 128, 768}), F32({512}), F32({768})}),
              HasSubstr("input 1 (gamma) must be [768] to match x f32[4,128,768], got f32[512]"));
  EXPECT_THAT(InferError(OpKind::kLayerNorm, {{"epsilon", 0.0}}, LayerNormInputs()),
              HasSubstr("attribute 'epsilon' must be a positive number"));
  EXPECT_THAT(
      InferError(OpKind::kLayerNorm, {{"epsilon", std::string("small")}}, LayerNormInputs()),
      HasSubstr("attribute 'epsilon' must be a float"));
  EXPECT_EQ(InferError(OpKind::kLayerNorm, {}, {F32({4, 128, 768}), F32({768})}),
            "expects 3 inputs, got 2");
}

// ---- layer_norm_backward ----

TEST(LayerNormBackwardTest, GradientsOfInputAndAffineParameters) {
  // dy, x, gamma, mean, rstd -> dx, dgamma, dbeta.
  EXPECT_THAT(
      Infer(OpKind::kLayerNormBackward, {},
            {F32({4, 128, 768}), F32({4, 128, 768}), F32({768}), F32({4, 128}), F32({4, 128})}),
      ElementsAre(F32({4, 128, 768}), F32({768}), F32({768})));
  EXPECT_FALSE(GetOpDef(OpKind::kLayerNormBackward).differentiable);
}

TEST(LayerNormBackwardTest, Errors) {
  EXPECT_THAT(
      InferError(OpKind::kLayerNormBackward, {},
                 {F32({4, 128, 768}), F32({4, 128, 768}), F32({768}), F32({4}), F32({4, 128})}),
      HasSubstr("input 3 (mean) must be [4,128] to match x f32[4,128,768], got f32[4]"));
  EXPECT_THAT(InferError(OpKind::kLayerNormBackward, {},
                         {F32({4, 128, 767}), F32({4, 128, 768}), F32({768}), F32({4, 128}),
                          F32({4, 128})}),
              HasSubstr("inputs 0 and 1 must have the same type"));
  EXPECT_EQ(InferError(OpKind::kLayerNormBackward, {}, LayerNormInputs()),
            "expects 5 inputs, got 3");
}

// ---- softmax, log_softmax ----

TEST(SoftmaxTest, KeepsTheType) {
  // Attention scores [batch, heads, Q, K].
  EXPECT_THAT(Infer(OpKind::kSoftmax, {}, {F32({2, 12, 128, 128})}),
              ElementsAre(F32({2, 12, 128, 128})));
  EXPECT_THAT(Infer(OpKind::kSoftmax, {{"causal", true}}, {F32({2, 12, 128, 128})}),
              ElementsAre(F32({2, 12, 128, 128})));
  EXPECT_THAT(Infer(OpKind::kSoftmax, {{"axis", int64_t{1}}}, {F16({32, 10})}),
              ElementsAre(F16({32, 10})));
  EXPECT_TRUE(GetOpDef(OpKind::kSoftmax).differentiable);
}

TEST(SoftmaxTest, CostIsMemoryBound) {
  OpCost cost = Cost(OpKind::kSoftmax, {}, {F32({32, 1000})});
  // 32,000 elements at 5 FLOPs (max, subtract, exp, sum, divide); 128,000 bytes each way.
  EXPECT_EQ(cost.flops, 160'000);
  EXPECT_EQ(cost.bytes_read, 128'000);
  EXPECT_EQ(cost.bytes_written, 128'000);
}

TEST(SoftmaxTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kSoftmax, {{"axis", int64_t{2}}}, {F32({32, 10})}),
              HasSubstr("axis 2 is out of range for rank 2"));
  EXPECT_THAT(
      InferError(OpKind::kSoftmax, {{"causal", true}, {"axis", int64_t{0}}}, {F32({128, 128})}),
      HasSubstr("causal softmax needs x of rank >= 2 ([...,Q,K]) and axis -1"));
  EXPECT_THAT(InferError(OpKind::kSoftmax, {{"causal", true}}, {F32({128})}),
              HasSubstr("causal softmax needs x of rank >= 2"));
  EXPECT_THAT(InferError(OpKind::kSoftmax, {{"causal", std::string("yes")}}, {F32({4, 4})}),
              HasSubstr("attribute 'causal' must be a bool"));
  EXPECT_THAT(InferError(OpKind::kSoftmax, {}, {I64({4, 4})}),
              HasSubstr("input 0 (x) must be floating point"));
  EXPECT_EQ(InferError(OpKind::kSoftmax, {}, {F32({4, 4}), F32({4, 4})}),
            "expects 1 inputs, got 2");
}

TEST(SoftmaxBackwardTest, GradientHasTheOutputType) {
  EXPECT_THAT(Infer(OpKind::kSoftmaxBackward, {}, {F32({2, 12, 128, 128}), F32({2, 12, 128, 128})}),
              ElementsAre(F32({2, 12, 128, 128})));
  EXPECT_FALSE(GetOpDef(OpKind::kSoftmaxBackward).differentiable);
  EXPECT_THAT(InferError(OpKind::kSoftmaxBackward, {}, {F32({4, 4}), F32({4, 5})}),
              HasSubstr("inputs 0 and 1 must have the same type"));
  EXPECT_THAT(
      InferError(OpKind::kSoftmaxBackward, {{"axis", int64_t{-3}}}, {F32({4, 4}), F32({4, 4})}),
      HasSubstr("axis -3 is out of range for rank 2"));
  EXPECT_EQ(InferError(OpKind::kSoftmaxBackward, {}, {F32({4, 4})}), "expects 2 inputs, got 1");
}

TEST(LogSoftmaxTest, KeepsTheType) {
  EXPECT_THAT(Infer(OpKind::kLogSoftmax, {}, {F32({32, 1000})}), ElementsAre(F32({32, 1000})));
  EXPECT_TRUE(GetOpDef(OpKind::kLogSoftmax).differentiable);
}

TEST(LogSoftmaxTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kLogSoftmax, {{"causal", true}}, {F32({4, 4})}),
              HasSubstr("attribute 'causal' belongs to softmax only"));
  EXPECT_THAT(InferError(OpKind::kLogSoftmax, {{"axis", int64_t{5}}}, {F32({4, 4})}),
              HasSubstr("axis 5 is out of range for rank 2"));
  EXPECT_THAT(InferError(OpKind::kLogSoftmax, {{"axis", 1.0}}, {F32({4, 4})}),
              HasSubstr("attribute 'axis' must be a int"));
  EXPECT_EQ(InferError(OpKind::kLogSoftmax, {}, {}), "expects 1 inputs, got 0");
}

TEST(LogSoftmaxBackwardTest, GradientHasTheOutputType) {
  EXPECT_THAT(Infer(OpKind::kLogSoftmaxBackward, {{"axis", int64_t{1}}},
                    {F32({32, 1000}), F32({32, 1000})}),
              ElementsAre(F32({32, 1000})));
  EXPECT_FALSE(GetOpDef(OpKind::kLogSoftmaxBackward).differentiable);
  EXPECT_THAT(InferError(OpKind::kLogSoftmaxBackward, {}, {F32({32, 1000}), F16({32, 1000})}),
              HasSubstr("inputs 0 and 1 must have the same type"));
  EXPECT_EQ(InferError(OpKind::kLogSoftmaxBackward, {}, {F32({32, 1000})}),
            "expects 2 inputs, got 1");
}

}  // namespace
}  // namespace spillway::ir
