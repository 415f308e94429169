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

constexpr int64_t kToEnd = std::numeric_limits<int64_t>::max();

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

AttrMap SliceAttrs(IntList axes, IntList starts, IntList ends) {
  return {{"axes", std::move(axes)}, {"starts", std::move(starts)}, {"ends", std::move(ends)}};
}

TEST(TensorOpsTest, RegistryEntries) {
  for (OpKind op :
       {OpKind::kConcat, OpKind::kSlice, OpKind::kReshape, OpKind::kTranspose, OpKind::kFlatten}) {
    EXPECT_EQ(GetOpDef(op).op_class, OpClass::kDataMovement) << OpName(op);
    EXPECT_TRUE(GetOpDef(op).differentiable) << OpName(op);
  }
  EXPECT_FALSE(GetOpDef(OpKind::kSliceBackward).differentiable);
  EXPECT_EQ(GetOpDef(OpKind::kConcat).max_inputs, -1);
}

TEST(TensorOpsTest, ConcatSumsTheAxis) {
  // 3 + 5 channels along axis 1.
  EXPECT_THAT(InferTypes(OpKind::kConcat, {F32({2, 3, 4}), F32({2, 5, 4})}, {{"axis", int64_t{1}}}),
              ElementsAre("f32[2,8,4]"));
  // DenseNet-style channel concat of NHWC activations: 32 + 64 + 16 = 112.
  EXPECT_THAT(
      InferTypes(OpKind::kConcat,
                 {Activation({1, 7, 7, 32}), Activation({1, 7, 7, 64}), Activation({1, 7, 7, 16})},
                 {{"axis", int64_t{-1}}}),
      ElementsAre("f32[1,7,7,112] nhwc"));
}

TEST(TensorOpsTest, ConcatRejectsMismatchOutsideTheAxis) {
  EXPECT_THAT(InferError(OpKind::kConcat, {F32({2, 3, 4}), F32({2, 5, 6})}, {{"axis", int64_t{1}}}),
              HasSubstr("input 1 f32[2,5,6] does not match input 0 f32[2,3,4]"));
  EXPECT_THAT(InferError(OpKind::kConcat, {F32({2, 3}), I64({2, 3})}, {{"axis", int64_t{0}}}),
              HasSubstr("input 1 i64[2,3] does not match input 0 f32[2,3]"));
  EXPECT_THAT(InferError(OpKind::kConcat, {F32({2, 3}), F32({2, 3, 1})}, {{"axis", int64_t{0}}}),
              HasSubstr("does not match"));
}

TEST(TensorOpsTest, ConcatRejectsBadAxis) {
  EXPECT_THAT(InferError(OpKind::kConcat, {F32({2, 3}), F32({2, 3})}, {{"axis", int64_t{2}}}),
              HasSubstr("axis 2 is out of range for rank 2"));
  EXPECT_THAT(InferError(OpKind::kConcat, {F32({2}), F32({2})}),
              HasSubstr("missing attribute 'axis'"));
  EXPECT_THAT(InferError(OpKind::kConcat, {F32({}), F32({})}, {{"axis", int64_t{0}}}),
              HasSubstr("cannot concatenate scalars"));
  EXPECT_THAT(InferError(OpKind::kConcat, {}, {{"axis", int64_t{0}}}),
              HasSubstr("expects at least 1 inputs, got 0"));
}

TEST(TensorOpsTest, SliceFollowsNumpy) {
  // Axis 0 of 10, 2:8:2 -> 2,4,6: 3 entries. Axis 1 of 20, -5: -> 15..19: 5 entries.
  AttrMap attrs = SliceAttrs({0, 1}, {2, -5}, {8, kToEnd});
  attrs.Set("steps", IntList{2, 1});
  EXPECT_THAT(InferTypes(OpKind::kSlice, {F32({10, 20})}, attrs), ElementsAre("f32[3,5]"));
  // Bounds clamp: -100:100 of 10 is all 10.
  EXPECT_THAT(InferTypes(OpKind::kSlice, {F32({10})}, SliceAttrs({0}, {-100}, {100})),
              ElementsAre("f32[10]"));
  // 0:10:3 -> 0,3,6,9: ceil(10/3) = 4.
  AttrMap strided = SliceAttrs({-1}, {0}, {10});
  strided.Set("steps", IntList{3});
  EXPECT_THAT(InferTypes(OpKind::kSlice, {F32({2, 10})}, strided), ElementsAre("f32[2,4]"));
  // An empty range gives an empty axis, as in numpy.
  EXPECT_THAT(InferTypes(OpKind::kSlice, {F32({10})}, SliceAttrs({0}, {5}, {2})),
              ElementsAre("f32[0]"));
  // Slicing N of an NHWC activation keeps its layout.
  EXPECT_THAT(InferTypes(OpKind::kSlice, {Activation({4, 8, 8, 3})}, SliceAttrs({0}, {0}, {2})),
              ElementsAre("f32[2,8,8,3] nhwc"));
}

TEST(TensorOpsTest, SliceRejectsBadAttributes) {
  AttrMap zero_step = SliceAttrs({0}, {0}, {4});
  zero_step.Set("steps", IntList{0});
  EXPECT_THAT(InferError(OpKind::kSlice, {F32({8})}, zero_step),
              HasSubstr("attribute 'steps' entries must be >= 1, got [0]"));
  EXPECT_THAT(InferError(OpKind::kSlice, {F32({8, 8})}, SliceAttrs({0, 1}, {0}, {4, 4})),
              HasSubstr("must have one length"));
  EXPECT_THAT(InferError(OpKind::kSlice, {F32({8, 8})}, SliceAttrs({0, -2}, {0, 0}, {4, 4})),
              HasSubstr("attribute 'axes' [0,-2] names axis 0 twice"));
  EXPECT_THAT(InferError(OpKind::kSlice, {F32({8, 8})}, SliceAttrs({2}, {0}, {4})),
              HasSubstr("axis 2 is out of range for rank 2"));
  EXPECT_THAT(
      InferError(OpKind::kSlice, {F32({8})}, {{"axes", IntList{0}}, {"starts", IntList{0}}}),
      HasSubstr("missing attribute 'ends'"));
}

TEST(TensorOpsTest, SliceBackwardRestoresTheInputShape) {
  // The forward sliced [10,20] to [3,5] (see SliceFollowsNumpy).
  AttrMap attrs = SliceAttrs({0, 1}, {2, -5}, {8, kToEnd});
  attrs.Set("steps", IntList{2, 1});
  attrs.Set("input_shape", IntList{10, 20});
  EXPECT_THAT(InferTypes(OpKind::kSliceBackward, {F32({3, 5})}, attrs), ElementsAre("f32[10,20]"));
  EXPECT_THAT(InferError(OpKind::kSliceBackward, {F32({3, 6})}, attrs),
              HasSubstr("dy f32[3,6] does not match the slice of input_shape [10,20], which is "
                        "[3,5]"));
  EXPECT_THAT(InferError(OpKind::kSliceBackward, {F32({3})}, attrs),
              HasSubstr("dy f32[3] must have the rank of input_shape [10,20]"));
  EXPECT_THAT(InferError(OpKind::kSliceBackward, {F32({3, 5})}, SliceAttrs({0}, {0}, {3})),
              HasSubstr("missing attribute 'input_shape'"));
}

TEST(TensorOpsTest, ReshapeInfersTheMinusOne) {
  // 2·3·4 = 24 elements; [6,-1] makes the -1 24/6 = 4.
  EXPECT_THAT(InferTypes(OpKind::kReshape, {F32({2, 3, 4})}, {{"shape", IntList{6, -1}}}),
              ElementsAre("f32[6,4]"));
  // Back to an image: 1·2·3·4 = 24, tagged NHWC.
  EXPECT_THAT(InferTypes(OpKind::kReshape, {F32({24})},
                         {{"shape", IntList{1, 2, 3, 4}}, {"layout", std::string("nhwc")}}),
              ElementsAre("f32[1,2,3,4] nhwc"));
  // Without a layout the result is row-major, even from an NHWC input.
  EXPECT_THAT(InferTypes(OpKind::kReshape, {Activation({2, 1, 1, 8})}, {{"shape", IntList{2, 8}}}),
              ElementsAre("f32[2,8]"));
}

TEST(TensorOpsTest, ReshapeRejectsMismatchedCounts) {
  EXPECT_THAT(InferError(OpKind::kReshape, {F32({2, 3, 4})}, {{"shape", IntList{5, 5}}}),
              HasSubstr("cannot reshape f32[2,3,4] (24 elements) to [5,5] (25 elements)"));
  EXPECT_THAT(InferError(OpKind::kReshape, {F32({2, 3, 4})}, {{"shape", IntList{5, -1}}}),
              HasSubstr("24 is not a multiple of 5"));
}

TEST(TensorOpsTest, ReshapeRejectsBadAttributes) {
  EXPECT_THAT(InferError(OpKind::kReshape, {F32({24})}, {{"shape", IntList{-1, -1}}}),
              HasSubstr("attribute 'shape' may have one -1 entry, got [-1,-1]"));
  EXPECT_THAT(InferError(OpKind::kReshape, {F32({24})}, {{"shape", IntList{0, 24}}}),
              HasSubstr("attribute 'shape' entries must be positive or -1, got [0,24]"));
  EXPECT_THAT(InferError(OpKind::kReshape, {F32({24})},
                         {{"shape", IntList{2, 12}}, {"layout", std::string("nhwc")}}),
              HasSubstr("attribute 'layout' \"nhwc\" needs a rank-4 result, got rank 2"));
  EXPECT_THAT(InferError(OpKind::kReshape, {F32({24})},
                         {{"shape", IntList{24}}, {"layout", std::string("nchw")}}),
              HasSubstr("attribute 'layout' must be \"row_major\" or \"nhwc\", got \"nchw\""));
  EXPECT_THAT(InferError(OpKind::kReshape, {F32({24})}), HasSubstr("missing attribute 'shape'"));
}

TEST(TensorOpsTest, TransposePermutesDims) {
  // y.shape[i] = x.shape[perm[i]]: [2,3,4] with perm [2,0,1] is [4,2,3].
  EXPECT_THAT(InferTypes(OpKind::kTranspose, {F32({2, 3, 4})}, {{"perm", IntList{2, 0, 1}}}),
              ElementsAre("f32[4,2,3]"));
  // A real permutation of an NHWC activation is no longer NHWC; the identity is.
  EXPECT_THAT(
      InferTypes(OpKind::kTranspose, {Activation({1, 2, 3, 4})}, {{"perm", IntList{0, 3, 1, 2}}}),
      ElementsAre("f32[1,4,2,3]"));
  EXPECT_THAT(
      InferTypes(OpKind::kTranspose, {Activation({1, 2, 3, 4})}, {{"perm", IntList{0, 1, 2, 3}}}),
      ElementsAre("f32[1,2,3,4] nhwc"));
  // `layout` tags the result: NCHW data permuted to NHWC, and back.
  EXPECT_THAT(InferTypes(OpKind::kTranspose, {F32({1, 4, 2, 3})},
                         {{"perm", IntList{0, 2, 3, 1}}, {"layout", std::string("nhwc")}}),
              ElementsAre("f32[1,2,3,4] nhwc"));
  EXPECT_THAT(InferTypes(OpKind::kTranspose, {Activation({1, 2, 3, 4})},
                         {{"perm", IntList{0, 1, 2, 3}}, {"layout", std::string("row_major")}}),
              ElementsAre("f32[1,2,3,4]"));
}

TEST(TensorOpsTest, TransposeRejectsBadPerm) {
  EXPECT_THAT(InferError(OpKind::kTranspose, {F32({2, 3, 4})},
                         {{"perm", IntList{0, 2, 1}}, {"layout", std::string("nhwc")}}),
              HasSubstr("attribute 'layout' \"nhwc\" needs a rank-4 result, got rank 3"));
  EXPECT_THAT(InferError(OpKind::kTranspose, {F32({2, 3, 4})}, {{"perm", IntList{0, 0, 1}}}),
              HasSubstr("attribute 'perm' [0,0,1] is not a permutation of 0..2"));
  EXPECT_THAT(InferError(OpKind::kTranspose, {F32({2, 3, 4})}, {{"perm", IntList{1, 0}}}),
              HasSubstr("attribute 'perm' [1,0] has 2 entries but x f32[2,3,4] has rank 3"));
  EXPECT_THAT(InferError(OpKind::kTranspose, {F32({2, 3})}), HasSubstr("missing attribute 'perm'"));
}

TEST(TensorOpsTest, FlattenSplitsAtTheAxis) {
  // [2,3,4,5] at axis 1 (default): [2, 3·4·5 = 60].
  EXPECT_THAT(InferTypes(OpKind::kFlatten, {Activation({2, 3, 4, 5})}), ElementsAre("f32[2,60]"));
  // Axis 0 puts everything inside (outer product of no dims is 1); axis = rank everything outside.
  EXPECT_THAT(InferTypes(OpKind::kFlatten, {F32({2, 3, 4, 5})}, {{"axis", int64_t{0}}}),
              ElementsAre("f32[1,120]"));
  EXPECT_THAT(InferTypes(OpKind::kFlatten, {F32({2, 3, 4, 5})}, {{"axis", int64_t{4}}}),
              ElementsAre("f32[120,1]"));
  // Axis -1 is 3: [2·3·4 = 24, 5].
  EXPECT_THAT(InferTypes(OpKind::kFlatten, {F32({2, 3, 4, 5})}, {{"axis", int64_t{-1}}}),
              ElementsAre("f32[24,5]"));
}

TEST(TensorOpsTest, FlattenRejectsAxisOutOfRange) {
  EXPECT_THAT(InferError(OpKind::kFlatten, {F32({2, 3})}, {{"axis", int64_t{3}}}),
              HasSubstr("attribute 'axis' 3 is out of range [-2, 2] for x f32[2,3]"));
  EXPECT_THAT(InferError(OpKind::kFlatten, {F32({2, 3})}, {{"axis", 1.5}}),
              HasSubstr("attribute 'axis' must be a int"));
}

TEST(TensorOpsTest, DataMovementCostIsBytesOnly) {
  // Transposing f32[2,3,4] reads and writes 24·4 = 96 bytes and does no arithmetic.
  Graph graph;
  const ValueId x = graph.AddInput("x", F32({2, 3, 4}));
  absl::StatusOr<NodeId> node =
      graph.AddNode(OpKind::kTranspose, {x}, {{"perm", IntList{2, 1, 0}}}, "t");
  ASSERT_TRUE(node.ok()) << StatusMessage(node.status());
  const OpCost cost = NodeCost(graph, graph.node(*node));
  EXPECT_EQ(cost.flops, 0);
  EXPECT_EQ(cost.macs, 0);
  EXPECT_EQ(cost.bytes_read, 96);
  EXPECT_EQ(cost.bytes_written, 96);
}

TEST(TensorOpsTest, GraphErrorNamesTheNode) {
  Graph graph;
  const ValueId x = graph.AddInput("x", F32({2, 3, 4}));
  absl::StatusOr<NodeId> node =
      graph.AddNode(OpKind::kReshape, {x}, {{"shape", IntList{7, -1}}}, "to_rows");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(std::string(StatusMessage(node.status())),
              HasSubstr("node 'to_rows' (reshape): cannot reshape f32[2,3,4]"));
}

}  // namespace
}  // namespace spillway::ir
