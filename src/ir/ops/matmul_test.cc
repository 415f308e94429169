#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
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

// The cost of `op` over inputs whose outputs inference accepts.
OpCost CostOf(OpKind op, const std::vector<TensorType>& inputs, const AttrMap& attrs = {}) {
  absl::StatusOr<std::vector<TensorType>> outputs = InferOutputTypes(op, attrs, inputs);
  EXPECT_TRUE(outputs.ok()) << StatusMessage(outputs.status());
  if (!outputs.ok()) return {};
  return GetOpDef(op).cost(attrs, inputs, *outputs);
}

TensorType I32(Shape shape) { return {DType::kI32, std::move(shape), Layout::kRowMajor}; }

TEST(MatMulOpsTest, RegistryEntries) {
  EXPECT_EQ(GetOpDef(OpKind::kMatMul).op_class, OpClass::kMatMul);
  EXPECT_EQ(GetOpDef(OpKind::kLinear).op_class, OpClass::kMatMul);
  EXPECT_EQ(GetOpDef(OpKind::kLinearBackwardWeight).op_class, OpClass::kMatMul);
  EXPECT_TRUE(GetOpDef(OpKind::kMatMul).differentiable);
  EXPECT_TRUE(GetOpDef(OpKind::kLinear).differentiable);
  EXPECT_TRUE(GetOpDef(OpKind::kEmbedding).differentiable);
  EXPECT_FALSE(GetOpDef(OpKind::kLinearBackwardWeight).differentiable);
  EXPECT_FALSE(GetOpDef(OpKind::kEmbeddingBackward).differentiable);
}

TEST(MatMulOpsTest, MatMulOfMatrices) {
  // [M=2,K=3]·[K=3,N=5] = [2,5].
  EXPECT_THAT(InferTypes(OpKind::kMatMul, {F32({2, 3}), F32({3, 5})}), ElementsAre("f32[2,5]"));
}

TEST(MatMulOpsTest, MatMulBroadcastsBatchDims) {
  // Batch [8,1] against [6] broadcasts to [8,6]; then [4,16]·[16,32] = [4,32].
  EXPECT_THAT(InferTypes(OpKind::kMatMul, {F32({8, 1, 4, 16}), F32({6, 16, 32})}),
              ElementsAre("f32[8,6,4,32]"));
  // A weight without batch dims against a batched activation.
  EXPECT_THAT(InferTypes(OpKind::kMatMul, {F32({3, 7, 16}), F32({16, 2})}),
              ElementsAre("f32[3,7,2]"));
}

TEST(MatMulOpsTest, MatMulTransposes) {
  // op(a) = a^T of [3,2] is [2,3]; op(b) = b^T of [5,3] is [3,5]; y = [2,5].
  EXPECT_THAT(InferTypes(OpKind::kMatMul, {F32({3, 2}), F32({5, 3})},
                         {{"transpose_a", true}, {"transpose_b", true}, {"alpha", 0.125}}),
              ElementsAre("f32[2,5]"));
}

TEST(MatMulOpsTest, MatMulRejectsInnerMismatch) {
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({2, 3}), F32({4, 5})}),
              HasSubstr("inner dimensions do not match: a f32[2,3] (K=3) and b f32[4,5] (K=4)"));
  // With transpose_b, K of b is its last axis (5).
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({2, 3}), F32({4, 5})}, {{"transpose_b", true}}),
              HasSubstr("a f32[2,3] (K=3) and b f32[4,5] (K=5), transpose_b"));
}

TEST(MatMulOpsTest, MatMulRejectsLowRank) {
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({3}), F32({3, 5})}),
              HasSubstr("input 0 (a) must have rank >= 2, got f32[3]"));
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({2, 3}), F32({3})}),
              HasSubstr("input 1 (b) must have rank >= 2, got f32[3]"));
}

TEST(MatMulOpsTest, MatMulRejectsBatchMismatch) {
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({2, 4, 5}), F32({3, 5, 6})}),
              HasSubstr("batch dimensions of a f32[2,4,5] and b f32[3,5,6]: shapes [2] and [3] do "
                        "not broadcast"));
}

TEST(MatMulOpsTest, MatMulRejectsBadDTypes) {
  EXPECT_THAT(InferError(OpKind::kMatMul, {I64({2, 3}), I64({3, 5})}),
              HasSubstr("input 0 (a) must be floating point, got i64[2,3]"));
  const TensorType half{DType::kF16, {3, 5}, Layout::kRowMajor};
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({2, 3}), half}),
              HasSubstr("inputs 0 and 1 must have one dtype, got f32[2,3] and f16[3,5]"));
}

TEST(MatMulOpsTest, MatMulRejectsBadAttributes) {
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({2, 3}), F32({3, 5})},
                         {{"alpha", std::numeric_limits<double>::infinity()}}),
              HasSubstr("attribute 'alpha' must be finite, got inf"));
  EXPECT_THAT(
      InferError(OpKind::kMatMul, {F32({2, 3}), F32({3, 5})}, {{"transpose_a", int64_t{1}}}),
      HasSubstr("attribute 'transpose_a' must be a bool"));
  EXPECT_THAT(InferError(OpKind::kMatMul, {F32({2, 3})}), HasSubstr("expects 2 inputs, got 1"));
}

TEST(MatMulOpsTest, MatMulCostOfAttentionScores) {
  // GPT-2 small at seq 1024: Q·K^T per head is [1024,64]·[64,1024], 12 heads.
  // MACs = batch·M·N·K = 12·1024·1024·64 = 805,306,368.
  const OpCost cost = CostOf(OpKind::kMatMul, {F32({1, 12, 1024, 64}), F32({1, 12, 1024, 64})},
                             {{"transpose_b", true}});
  EXPECT_EQ(cost.macs, 805'306'368);
  EXPECT_EQ(cost.flops, 2 * 805'306'368);
  // Reads Q and K, 12·1024·64·4 bytes each; writes 12·1024·1024·4 bytes of scores.
  EXPECT_EQ(cost.bytes_read, 2 * 3'145'728);
  EXPECT_EQ(cost.bytes_written, 50'331'648);
}

TEST(MatMulOpsTest, MatMulCostWithTransposedA) {
  // a^T of [K=3, M=2] and b [3, N=5]: 2·5·3 = 30 MACs, K taken from a's second-to-last axis.
  const OpCost cost = CostOf(OpKind::kMatMul, {F32({3, 2}), F32({3, 5})}, {{"transpose_a", true}});
  EXPECT_EQ(cost.macs, 30);
  EXPECT_EQ(cost.flops, 60);
}

TEST(MatMulOpsTest, LinearMapsTheLastAxis) {
  // GPT-2's c_attn: [1,1024,768] times w [2304,768]^T plus b [2304] = [1,1024,2304].
  EXPECT_THAT(InferTypes(OpKind::kLinear, {F32({1, 1024, 768}), F32({2304, 768}), F32({2304})}),
              ElementsAre("f32[1,1024,2304]"));
  // Without a bias; over the channels of an NHWC activation the layout holds.
  EXPECT_THAT(InferTypes(OpKind::kLinear, {Activation({2, 7, 7, 64}), F32({10, 64})}),
              ElementsAre("f32[2,7,7,10] nhwc"));
  // A single vector.
  EXPECT_THAT(InferTypes(OpKind::kLinear, {F32({64}), F32({10, 64})}), ElementsAre("f32[10]"));
}

TEST(MatMulOpsTest, LinearRejectsFeatureMismatch) {
  EXPECT_THAT(InferError(OpKind::kLinear, {F32({8, 768}), F32({2304, 700})}),
              HasSubstr("in_features do not match: x f32[8,768] has 768 in its last axis, w "
                        "f32[2304,700] ([out,in]) has 700"));
}

TEST(MatMulOpsTest, LinearRejectsBadWeightAndBias) {
  EXPECT_THAT(InferError(OpKind::kLinear, {F32({8, 4}), F32({2, 3, 4})}),
              HasSubstr("input 1 (w) must have rank 2, got f32[2,3,4]"));
  EXPECT_THAT(InferError(OpKind::kLinear, {F32({8, 4}), F32({10, 4}), F32({4})}),
              HasSubstr("input 2 (b) must be [10] to match w f32[10,4], got f32[4]"));
  EXPECT_THAT(InferError(OpKind::kLinear, {F32({8, 4}), F32({10, 4}), I64({10})}),
              HasSubstr("inputs 0 and 2 must have one dtype"));
}

TEST(MatMulOpsTest, LinearRejectsBadInputs) {
  EXPECT_THAT(InferError(OpKind::kLinear, {F32({}), F32({10, 1})}),
              HasSubstr("input 0 (x) must have rank >= 1, got f32[]"));
  EXPECT_THAT(InferError(OpKind::kLinear, {I64({8, 4}), F32({10, 4})}),
              HasSubstr("input 0 (x) must be floating point"));
  EXPECT_THAT(InferError(OpKind::kLinear, {F32({8, 4}), F32({10, 4}), F32({10}), F32({10})}),
              HasSubstr("expects 2 to 3 inputs, got 4"));
}

TEST(MatMulOpsTest, LinearCostOfGpt2Attention) {
  // GPT-2's c_attn at batch 1, seq 1024: rows·in·out = 1024·768·2304 = 1,811,939,328 MACs.
  const OpCost cost = CostOf(OpKind::kLinear, {F32({1, 1024, 768}), F32({2304, 768}), F32({2304})});
  EXPECT_EQ(cost.macs, 1'811'939'328);
  EXPECT_EQ(cost.flops, 3'623'878'656);
  // Reads x (1024·768·4 = 3,145,728), w (2304·768·4 = 7,077,888) and b (2304·4 = 9,216);
  // writes y (1024·2304·4 = 9,437,184).
  EXPECT_EQ(cost.bytes_read, 3'145'728 + 7'077'888 + 9'216);
  EXPECT_EQ(cost.bytes_written, 9'437'184);
}

TEST(MatMulOpsTest, LinearCostOfResNetClassifier) {
  // ResNet-50's fc at batch 1: 2048·1000 = 2,048,000 MACs (torchvision's 4.09 GMACs
  // total includes it).
  const OpCost cost = CostOf(OpKind::kLinear, {F32({1, 2048}), F32({1000, 2048}), F32({1000})});
  EXPECT_EQ(cost.macs, 2'048'000);
}

TEST(MatMulOpsTest, LinearBackwardWeightSumsOverRows) {
  // dy [4,16,10] and x [4,16,20]: 64 rows, dw = [out=10, in=20].
  EXPECT_THAT(InferTypes(OpKind::kLinearBackwardWeight, {F32({4, 16, 10}), F32({4, 16, 20})}),
              ElementsAre("f32[10,20]"));
  // 64 rows · 20 in · 10 out = 12,800 MACs.
  const OpCost cost = CostOf(OpKind::kLinearBackwardWeight, {F32({4, 16, 10}), F32({4, 16, 20})});
  EXPECT_EQ(cost.macs, 12'800);
  EXPECT_EQ(cost.flops, 25'600);
}

TEST(MatMulOpsTest, LinearBackwardWeightRejectsMismatch) {
  EXPECT_THAT(InferError(OpKind::kLinearBackwardWeight, {F32({4, 16, 10}), F32({4, 15, 20})}),
              HasSubstr("leading dimensions of dy f32[4,16,10] and x f32[4,15,20] must match"));
  EXPECT_THAT(InferError(OpKind::kLinearBackwardWeight, {F32({4, 10}), F32({4, 16, 20})}),
              HasSubstr("leading dimensions"));
  EXPECT_THAT(InferError(OpKind::kLinearBackwardWeight, {F32({}), F32({4})}),
              HasSubstr("input 0 (dy) must have rank >= 1"));
}

TEST(MatMulOpsTest, EmbeddingGathersRows) {
  // GPT-2's token table [50257,768] over i64 tokens [1,1024] gives [1,1024,768].
  EXPECT_THAT(InferTypes(OpKind::kEmbedding, {F32({50257, 768}), I64({1, 1024})}),
              ElementsAre("f32[1,1024,768]"));
  EXPECT_THAT(InferTypes(OpKind::kEmbedding, {F32({1024, 768}), I32({1024})}),
              ElementsAre("f32[1024,768]"));
}

TEST(MatMulOpsTest, EmbeddingRejectsBadInputs) {
  EXPECT_THAT(InferError(OpKind::kEmbedding, {F32({100, 8}), F32({4})}),
              HasSubstr("input 1 (indices) must be i32 or i64, got f32[4]"));
  EXPECT_THAT(InferError(OpKind::kEmbedding, {F32({100}), I64({4})}),
              HasSubstr("input 0 (table) must have rank 2, got f32[100]"));
  EXPECT_THAT(InferError(OpKind::kEmbedding, {I64({100, 8}), I64({4})}),
              HasSubstr("input 0 (table) must be floating point"));
}

TEST(MatMulOpsTest, EmbeddingCostReadsOnlyTheGatheredRows) {
  // 1024 i64 indices (8,192 bytes) and 1024 rows of 768 floats (3,145,728 bytes)
  // are read; the 154 MB table itself is not.
  const OpCost cost = CostOf(OpKind::kEmbedding, {F32({50257, 768}), I64({1, 1024})});
  EXPECT_EQ(cost.bytes_read, 8'192 + 3'145'728);
  EXPECT_EQ(cost.bytes_written, 3'145'728);
  EXPECT_EQ(cost.macs, 0);
}

TEST(MatMulOpsTest, EmbeddingBackwardMakesTheTableGradient) {
  const AttrMap attrs = {{"num_embeddings", int64_t{50257}}};
  EXPECT_THAT(InferTypes(OpKind::kEmbeddingBackward, {F32({1, 1024, 768}), I64({1, 1024})}, attrs),
              ElementsAre("f32[50257,768]"));
  EXPECT_THAT(InferError(OpKind::kEmbeddingBackward, {F32({1, 1024, 768}), I64({1, 1000})}, attrs),
              HasSubstr("dy f32[1,1024,768] must be the indices' shape i64[1,1000] plus the "
                        "embedding axis"));
  EXPECT_THAT(InferError(OpKind::kEmbeddingBackward, {F32({4, 8}), F32({4})}, attrs),
              HasSubstr("input 1 (indices) must be i32 or i64"));
}

TEST(MatMulOpsTest, EmbeddingBackwardNeedsNumEmbeddings) {
  EXPECT_THAT(InferError(OpKind::kEmbeddingBackward, {F32({4, 8}), I64({4})}),
              HasSubstr("missing attribute 'num_embeddings'"));
  EXPECT_THAT(InferError(OpKind::kEmbeddingBackward, {F32({4, 8}), I64({4})},
                         {{"num_embeddings", int64_t{0}}}),
              HasSubstr("attribute 'num_embeddings' must be >= 1, got 0"));
}

TEST(MatMulOpsTest, GraphErrorNamesTheNode) {
  Graph graph;
  const ValueId x = graph.AddInput("x", F32({8, 768}));
  const ValueId w = graph.AddInput("w", F32({3072, 512}), ValueKind::kParameter);
  absl::StatusOr<NodeId> node = graph.AddNode(OpKind::kLinear, {x, w}, {}, "h.0.mlp.c_fc");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(std::string(StatusMessage(node.status())),
              HasSubstr("node 'h.0.mlp.c_fc' (linear): in_features do not match"));
}

}  // namespace
}  // namespace spillway::ir
