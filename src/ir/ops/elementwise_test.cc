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

TensorType I32(Shape shape) { return {DType::kI32, std::move(shape), Layout::kRowMajor}; }

TEST(ElementwiseOpsTest, RegistryEntries) {
  EXPECT_EQ(GetOpDef(OpKind::kRelu).op_class, OpClass::kElementwise);
  EXPECT_EQ(GetOpDef(OpKind::kReduceSum).op_class, OpClass::kReduction);
  // Forward ops with a gradient are differentiable; gradient-only ops and fill are not.
  for (OpKind op :
       {OpKind::kRelu, OpKind::kGelu, OpKind::kSigmoid, OpKind::kTanh, OpKind::kLeakyRelu,
        OpKind::kClip, OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kDropout}) {
    EXPECT_TRUE(GetOpDef(op).differentiable) << OpName(op);
    EXPECT_EQ(GetOpDef(op).op_class, OpClass::kElementwise) << OpName(op);
  }
  for (OpKind op : {OpKind::kReluBackward, OpKind::kGeluBackward, OpKind::kSigmoidBackward,
                    OpKind::kTanhBackward, OpKind::kLeakyReluBackward, OpKind::kClipBackward,
                    OpKind::kDropoutBackward, OpKind::kFill, OpKind::kAddN, OpKind::kReduceSum}) {
    EXPECT_FALSE(GetOpDef(op).differentiable) << OpName(op);
  }
  // Elementwise kernels may write over a dead input; a reduction, a fill (no
  // input) and ops of other families may not.
  for (OpKind op :
       {OpKind::kRelu, OpKind::kReluBackward, OpKind::kSigmoid, OpKind::kSigmoidBackward,
        OpKind::kTanh, OpKind::kTanhBackward, OpKind::kLeakyRelu, OpKind::kLeakyReluBackward,
        OpKind::kClip, OpKind::kClipBackward, OpKind::kAdd, OpKind::kSub, OpKind::kMul,
        OpKind::kDiv, OpKind::kAddN, OpKind::kDropoutBackward}) {
    EXPECT_TRUE(GetOpDef(op).may_overwrite_inputs) << OpName(op);
  }
  for (OpKind op :
       {OpKind::kReduceSum, OpKind::kFill, OpKind::kConv2d, OpKind::kBatchNorm, OpKind::kSoftmax}) {
    EXPECT_FALSE(GetOpDef(op).may_overwrite_inputs) << OpName(op);
  }
}

TEST(ElementwiseOpsTest, ReluKeepsTypeAndLayout) {
  EXPECT_THAT(InferTypes(OpKind::kRelu, {Activation({2, 8, 8, 16})}),
              ElementsAre("f32[2,8,8,16] nhwc"));
}

TEST(ElementwiseOpsTest, ReluRejectsIntegerInput) {
  EXPECT_THAT(InferError(OpKind::kRelu, {I64({4})}),
              HasSubstr("input 0 (x) must be floating point, got i64[4]"));
}

TEST(ElementwiseOpsTest, ReluRejectsWrongInputCount) {
  EXPECT_THAT(InferError(OpKind::kRelu, {F32({4}), F32({4})}),
              HasSubstr("expects 1 inputs, got 2"));
}

TEST(ElementwiseOpsTest, ReluBackwardTakesDyType) {
  EXPECT_THAT(
      InferTypes(OpKind::kReluBackward, {Activation({1, 4, 4, 8}), Activation({1, 4, 4, 8})}),
      ElementsAre("f32[1,4,4,8] nhwc"));
}

TEST(ElementwiseOpsTest, ReluBackwardRejectsMismatchedShapes) {
  EXPECT_THAT(InferError(OpKind::kReluBackward, {F32({4, 8}), F32({4, 9})}),
              HasSubstr("inputs 0 and 1 must have the same type, got f32[4,8] and f32[4,9]"));
}

TEST(ElementwiseOpsTest, GeluAcceptsBothForms) {
  EXPECT_THAT(InferTypes(OpKind::kGelu, {F32({2, 1024, 3072})}), ElementsAre("f32[2,1024,3072]"));
  EXPECT_THAT(InferTypes(OpKind::kGelu, {F32({8})}, {{"approximate", std::string("tanh")}}),
              ElementsAre("f32[8]"));
}

TEST(ElementwiseOpsTest, GeluRejectsUnknownApproximation) {
  EXPECT_THAT(InferError(OpKind::kGelu, {F32({8})}, {{"approximate", std::string("fast")}}),
              HasSubstr("attribute 'approximate' must be \"none\" or \"tanh\", got \"fast\""));
  EXPECT_THAT(InferError(OpKind::kGelu, {F32({8})}, {{"approximate", int64_t{1}}}),
              HasSubstr("attribute 'approximate' must be a string"));
}

TEST(ElementwiseOpsTest, GeluBackward) {
  const AttrMap tanh = {{"approximate", std::string("tanh")}};
  EXPECT_THAT(InferTypes(OpKind::kGeluBackward, {F32({3, 5}), F32({3, 5})}, tanh),
              ElementsAre("f32[3,5]"));
  EXPECT_THAT(InferError(OpKind::kGeluBackward, {F32({3, 5}), F32({5, 3})}, tanh),
              HasSubstr("must have the same type"));
  EXPECT_THAT(InferError(OpKind::kGeluBackward, {F32({3}), F32({3})},
                         {{"approximate", std::string("erf")}}),
              HasSubstr("attribute 'approximate'"));
}

TEST(ElementwiseOpsTest, SigmoidAndTanhKeepTypeAndLayout) {
  for (OpKind op : {OpKind::kSigmoid, OpKind::kTanh}) {
    EXPECT_THAT(InferTypes(op, {Activation({2, 8, 8, 16})}), ElementsAre("f32[2,8,8,16] nhwc"))
        << OpName(op);
    EXPECT_THAT(InferError(op, {I64({4})}),
                HasSubstr("input 0 (x) must be floating point, got i64[4]"))
        << OpName(op);
  }
}

TEST(ElementwiseOpsTest, SigmoidAndTanhBackwardTakeDyAndY) {
  for (OpKind op : {OpKind::kSigmoidBackward, OpKind::kTanhBackward}) {
    EXPECT_THAT(InferTypes(op, {Activation({1, 4, 4, 8}), Activation({1, 4, 4, 8})}),
                ElementsAre("f32[1,4,4,8] nhwc"))
        << OpName(op);
    EXPECT_THAT(InferError(op, {F32({4, 8}), F32({4, 9})}),
                HasSubstr("inputs 0 and 1 must have the same type, got f32[4,8] and f32[4,9]"))
        << OpName(op);
    EXPECT_THAT(InferError(op, {F32({4})}), HasSubstr("expects 2 inputs, got 1")) << OpName(op);
  }
}

TEST(ElementwiseOpsTest, LeakyReluSlopeIsOptionalAndFinite) {
  EXPECT_THAT(InferTypes(OpKind::kLeakyRelu, {Activation({2, 4, 4, 8})}),
              ElementsAre("f32[2,4,4,8] nhwc"));
  EXPECT_THAT(InferTypes(OpKind::kLeakyRelu, {F32({8})}, {{"alpha", 0.2}}), ElementsAre("f32[8]"));
  // An integer slope reads as a float.
  EXPECT_THAT(InferTypes(OpKind::kLeakyRelu, {F32({8})}, {{"alpha", int64_t{1}}}),
              ElementsAre("f32[8]"));
  EXPECT_THAT(InferError(OpKind::kLeakyRelu, {F32({8})}, {{"alpha", std::string("0.1")}}),
              HasSubstr("attribute 'alpha' must be a float"));
  EXPECT_THAT(InferError(OpKind::kLeakyRelu, {F32({8})},
                         {{"alpha", std::numeric_limits<double>::infinity()}}),
              HasSubstr("attribute 'alpha' must be finite"));
  EXPECT_THAT(InferError(OpKind::kLeakyRelu, {I32({8})}), HasSubstr("must be floating point"));
}

TEST(ElementwiseOpsTest, LeakyReluBackwardTakesDyAndX) {
  const AttrMap attrs = {{"alpha", 0.1}};
  EXPECT_THAT(InferTypes(OpKind::kLeakyReluBackward, {F32({3, 5}), F32({3, 5})}, attrs),
              ElementsAre("f32[3,5]"));
  EXPECT_THAT(InferError(OpKind::kLeakyReluBackward, {F32({3, 5}), F32({5, 3})}, attrs),
              HasSubstr("must have the same type"));
  EXPECT_THAT(InferError(OpKind::kLeakyReluBackward, {F32({3}), F32({3})},
                         {{"alpha", std::numeric_limits<double>::quiet_NaN()}}),
              HasSubstr("attribute 'alpha' must be finite"));
}

TEST(ElementwiseOpsTest, ClipBoundsAreOptional) {
  // ReLU6 as PyTorch exports it, one bound alone, and neither.
  EXPECT_THAT(InferTypes(OpKind::kClip, {Activation({2, 4, 4, 8})}, {{"min", 0.0}, {"max", 6.0}}),
              ElementsAre("f32[2,4,4,8] nhwc"));
  EXPECT_THAT(InferTypes(OpKind::kClip, {F32({8})}, {{"max", 1.0}}), ElementsAre("f32[8]"));
  EXPECT_THAT(InferTypes(OpKind::kClip, {F32({8})}), ElementsAre("f32[8]"));
  // Integer bounds read as floats; equal bounds and infinite ones are allowed.
  EXPECT_THAT(InferTypes(OpKind::kClip, {F32({8})}, {{"min", int64_t{0}}, {"max", int64_t{0}}}),
              ElementsAre("f32[8]"));
  EXPECT_THAT(
      InferTypes(OpKind::kClip, {F32({8})}, {{"min", -std::numeric_limits<double>::infinity()}}),
      ElementsAre("f32[8]"));
  EXPECT_THAT(InferError(OpKind::kClip, {I64({8})}, {{"min", 0.0}}),
              HasSubstr("input 0 (x) must be floating point, got i64[8]"));
}

TEST(ElementwiseOpsTest, ClipRejectsNaNAndCrossedBounds) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(InferError(OpKind::kClip, {F32({8})}, {{"min", 1.0}, {"max", 0.5}}),
              HasSubstr("attribute 'min' must be <= 'max', got 1.0 and 0.5"));
  // A max of -inf is below every min but -inf.
  EXPECT_THAT(InferError(OpKind::kClip, {F32({8})},
                         {{"max", -std::numeric_limits<double>::infinity()}, {"min", 0.0}}),
              HasSubstr("attribute 'min' must be <= 'max', got 0.0 and -inf"));
  EXPECT_THAT(InferError(OpKind::kClip, {F32({8})}, {{"min", kNaN}}),
              HasSubstr("attribute 'min' must not be NaN"));
  EXPECT_THAT(InferError(OpKind::kClip, {F32({8})}, {{"min", 0.0}, {"max", kNaN}}),
              HasSubstr("attribute 'max' must not be NaN"));
  EXPECT_THAT(InferError(OpKind::kClip, {F32({8})}, {{"max", std::string("6")}}),
              HasSubstr("attribute 'max' must be a float"));
}

TEST(ElementwiseOpsTest, ClipBackwardTakesDyAndY) {
  const AttrMap attrs = {{"min", 0.0}, {"max", 6.0}};
  EXPECT_THAT(InferTypes(OpKind::kClipBackward,
                         {Activation({1, 4, 4, 8}), Activation({1, 4, 4, 8})}, attrs),
              ElementsAre("f32[1,4,4,8] nhwc"));
  EXPECT_THAT(InferError(OpKind::kClipBackward, {F32({3, 5}), F32({5, 3})}, attrs),
              HasSubstr("must have the same type"));
  EXPECT_THAT(InferError(OpKind::kClipBackward, {F32({3}), F32({3})}, {{"min", 1.0}, {"max", 0.0}}),
              HasSubstr("attribute 'min' must be <= 'max'"));
}

TEST(ElementwiseOpsTest, AddBroadcastsLikeNumpy) {
  // [8,1,4] against [3,1]: align right, [8,1,4] vs [1,3,1] -> [8,3,4].
  EXPECT_THAT(InferTypes(OpKind::kAdd, {F32({8, 1, 4}), F32({3, 1})}), ElementsAre("f32[8,3,4]"));
  // A per-channel bias [C] on an NHWC activation keeps the NHWC layout.
  EXPECT_THAT(InferTypes(OpKind::kAdd, {Activation({2, 4, 4, 8}), F32({8})}),
              ElementsAre("f32[2,4,4,8] nhwc"));
  // Scalars broadcast to anything.
  EXPECT_THAT(InferTypes(OpKind::kAdd, {F32({}), F32({5, 6})}), ElementsAre("f32[5,6]"));
}

TEST(ElementwiseOpsTest, AddRejectsShapesThatDoNotBroadcast) {
  EXPECT_THAT(InferError(OpKind::kAdd, {F32({2, 3}), F32({4})}),
              HasSubstr("shapes [2,3] and [4] do not broadcast"));
}

TEST(ElementwiseOpsTest, AddRejectsMixedDTypes) {
  EXPECT_THAT(InferError(OpKind::kAdd, {F32({4}), I64({4})}),
              HasSubstr("inputs 0 (a) and 1 (b) must have one dtype, got f32[4] and i64[4]"));
}

TEST(ElementwiseOpsTest, AddRejectsBool) {
  const TensorType mask{DType::kBool, {4}, Layout::kRowMajor};
  EXPECT_THAT(InferError(OpKind::kAdd, {mask, mask}), HasSubstr("inputs must be numeric"));
}

TEST(ElementwiseOpsTest, MulBroadcastsAndChecks) {
  // An attention-scale style product: [2,12,64,64] times a scalar.
  EXPECT_THAT(InferTypes(OpKind::kMul, {F32({2, 12, 64, 64}), F32({})}),
              ElementsAre("f32[2,12,64,64]"));
  EXPECT_THAT(InferError(OpKind::kMul, {F32({2, 3}), F32({2})}), HasSubstr("do not broadcast"));
  EXPECT_THAT(InferError(OpKind::kMul, {F32({2})}), HasSubstr("expects 2 inputs, got 1"));
}

TEST(ElementwiseOpsTest, SubBroadcastsLikeAddAndTakesIntegers) {
  // Centering NHWC activations by a per-channel mean keeps the layout.
  EXPECT_THAT(InferTypes(OpKind::kSub, {Activation({2, 4, 4, 8}), F32({8})}),
              ElementsAre("f32[2,4,4,8] nhwc"));
  EXPECT_THAT(InferTypes(OpKind::kSub, {F32({}), F32({5, 6})}), ElementsAre("f32[5,6]"));
  EXPECT_THAT(InferTypes(OpKind::kSub, {I64({3}), I64({3})}), ElementsAre("i64[3]"));
  EXPECT_THAT(InferError(OpKind::kSub, {F32({2, 3}), F32({4})}),
              HasSubstr("shapes [2,3] and [4] do not broadcast"));
  EXPECT_THAT(InferError(OpKind::kSub, {F32({4}), I64({4})}), HasSubstr("must have one dtype"));
}

TEST(ElementwiseOpsTest, DivBroadcastsAndIsFloatingOnly) {
  // Dividing by a scalar, and [8,1,4] by [3,1] -> [8,3,4].
  EXPECT_THAT(InferTypes(OpKind::kDiv, {F32({2, 12, 64, 64}), F32({})}),
              ElementsAre("f32[2,12,64,64]"));
  EXPECT_THAT(InferTypes(OpKind::kDiv, {F32({8, 1, 4}), F32({3, 1})}), ElementsAre("f32[8,3,4]"));
  EXPECT_THAT(InferError(OpKind::kDiv, {I64({4}), I64({4})}),
              HasSubstr("input 0 (a) must be floating point, got i64[4]"));
  EXPECT_THAT(InferError(OpKind::kDiv, {F32({4}), I64({4})}), HasSubstr("must have one dtype"));
  EXPECT_THAT(InferError(OpKind::kDiv, {F32({2, 3}), F32({2})}), HasSubstr("do not broadcast"));
}

TEST(ElementwiseOpsTest, DropoutKeepsType) {
  const AttrMap attrs = {{"p", 0.1}, {"seed", int64_t{7}}};
  EXPECT_THAT(InferTypes(OpKind::kDropout, {F32({4, 1024, 768})}, attrs),
              ElementsAre("f32[4,1024,768]"));
  // An integer p reads as a float: p=0 is a valid (identity) dropout.
  EXPECT_THAT(InferTypes(OpKind::kDropout, {F32({4})}, {{"p", int64_t{0}}, {"seed", int64_t{1}}}),
              ElementsAre("f32[4]"));
}

TEST(ElementwiseOpsTest, DropoutRejectsProbabilityOutsideRange) {
  EXPECT_THAT(InferError(OpKind::kDropout, {F32({4})}, {{"p", 1.0}, {"seed", int64_t{7}}}),
              HasSubstr("attribute 'p' must be in [0, 1), got 1.0"));
  EXPECT_THAT(InferError(OpKind::kDropout, {F32({4})}, {{"p", -0.5}, {"seed", int64_t{7}}}),
              HasSubstr("attribute 'p' must be in [0, 1), got -0.5"));
}

TEST(ElementwiseOpsTest, DropoutNeedsSeedAndP) {
  EXPECT_THAT(InferError(OpKind::kDropout, {F32({4})}, {{"p", 0.1}}),
              HasSubstr("missing attribute 'seed'"));
  EXPECT_THAT(InferError(OpKind::kDropout, {F32({4})}, {{"seed", int64_t{3}}}),
              HasSubstr("missing attribute 'p'"));
}

TEST(ElementwiseOpsTest, DropoutRejectsIntegerInput) {
  EXPECT_THAT(InferError(OpKind::kDropout, {I32({4})}, {{"p", 0.1}, {"seed", int64_t{7}}}),
              HasSubstr("must be floating point"));
}

TEST(ElementwiseOpsTest, DropoutBackward) {
  const AttrMap attrs = {{"p", 0.1}, {"seed", int64_t{7}}};
  EXPECT_THAT(InferTypes(OpKind::kDropoutBackward, {F32({16, 32})}, attrs),
              ElementsAre("f32[16,32]"));
  EXPECT_THAT(InferError(OpKind::kDropoutBackward, {F32({16})}, {{"p", 2.0}, {"seed", int64_t{7}}}),
              HasSubstr("attribute 'p' must be in [0, 1)"));
  EXPECT_THAT(InferError(OpKind::kDropoutBackward, {F32({16}), F32({16})}, attrs),
              HasSubstr("expects 1 inputs, got 2"));
}

TEST(ElementwiseOpsTest, FillMakesTheRequestedType) {
  EXPECT_THAT(InferTypes(OpKind::kFill, {}, {{"shape", IntList{2, 3}}, {"value", 0.0}}),
              ElementsAre("f32[2,3]"));
  // An i64[] scalar, as Adam's step counter starts.
  EXPECT_THAT(
      InferTypes(OpKind::kFill, {},
                 {{"shape", IntList{}}, {"value", int64_t{1}}, {"dtype", std::string("i64")}}),
      ElementsAre("i64[]"));
}

TEST(ElementwiseOpsTest, FillRejectsBadAttributes) {
  EXPECT_THAT(InferError(OpKind::kFill, {}, {{"shape", IntList{2}}}),
              HasSubstr("missing attribute 'value'"));
  EXPECT_THAT(InferError(OpKind::kFill, {}, {{"value", 1.0}}),
              HasSubstr("missing attribute 'shape'"));
  EXPECT_THAT(InferError(OpKind::kFill, {}, {{"shape", IntList{2, -1}}, {"value", 1.0}}),
              HasSubstr("attribute 'shape' entries must be >= 0, got [2,-1]"));
  EXPECT_THAT(InferError(OpKind::kFill, {},
                         {{"shape", IntList{2}}, {"value", 1.0}, {"dtype", std::string("f64")}}),
              HasSubstr("attribute 'dtype' names no dtype: \"f64\""));
  // An integer tensor cannot hold 0.5.
  EXPECT_THAT(InferError(OpKind::kFill, {},
                         {{"shape", IntList{2}}, {"value", 0.5}, {"dtype", std::string("i32")}}),
              HasSubstr("attribute 'value' 0.5 is not a valid i32 value"));
}

TEST(ElementwiseOpsTest, FillTakesNoInputs) {
  EXPECT_THAT(InferError(OpKind::kFill, {F32({2})}, {{"shape", IntList{2}}, {"value", 0.0}}),
              HasSubstr("expects 0 inputs, got 1"));
}

TEST(ElementwiseOpsTest, AddNSumsSameTypedInputs) {
  EXPECT_THAT(InferTypes(OpKind::kAddN, {F32({4, 5}), F32({4, 5}), F32({4, 5})}),
              ElementsAre("f32[4,5]"));
  // One input is a copy (a value with a single use needs no accumulation, but it is legal).
  EXPECT_THAT(InferTypes(OpKind::kAddN, {Activation({1, 2, 2, 3})}),
              ElementsAre("f32[1,2,2,3] nhwc"));
}

TEST(ElementwiseOpsTest, AddNRejectsMismatchAndNoInputs) {
  EXPECT_THAT(InferError(OpKind::kAddN, {F32({4, 5}), F32({4, 5}), F32({5, 4})}),
              HasSubstr("inputs 0 and 2 must have the same type, got f32[4,5] and f32[5,4]"));
  EXPECT_THAT(InferError(OpKind::kAddN, {}), HasSubstr("expects at least 1 inputs, got 0"));
}

TEST(ElementwiseOpsTest, ReduceSumDropsOrKeepsAxes) {
  // Reducing axes 0 and -1 (= 2) of [4,5,6] leaves [5], or [1,5,1] with keepdims.
  EXPECT_THAT(InferTypes(OpKind::kReduceSum, {F32({4, 5, 6})}, {{"axes", IntList{0, -1}}}),
              ElementsAre("f32[5]"));
  EXPECT_THAT(InferTypes(OpKind::kReduceSum, {F32({4, 5, 6})},
                         {{"axes", IntList{0, -1}}, {"keepdims", true}}),
              ElementsAre("f32[1,5,1]"));
  // A conv bias gradient: sum an NHWC gradient over N, H, W to [C].
  EXPECT_THAT(
      InferTypes(OpKind::kReduceSum, {Activation({8, 14, 14, 64})}, {{"axes", IntList{0, 1, 2}}}),
      ElementsAre("f32[64]"));
}

TEST(ElementwiseOpsTest, ReduceSumRejectsBadAxes) {
  EXPECT_THAT(InferError(OpKind::kReduceSum, {F32({4, 5, 6})}, {{"axes", IntList{0, -3}}}),
              HasSubstr("attribute 'axes' [0,-3] names axis 0 twice"));
  EXPECT_THAT(InferError(OpKind::kReduceSum, {F32({4, 5, 6})}, {{"axes", IntList{3}}}),
              HasSubstr("axis 3 is out of range for rank 3"));
  EXPECT_THAT(InferError(OpKind::kReduceSum, {F32({4})}, {{"axes", IntList{}}}),
              HasSubstr("attribute 'axes' must name at least one axis"));
  EXPECT_THAT(InferError(OpKind::kReduceSum, {F32({4})}), HasSubstr("missing attribute 'axes'"));
}

TEST(ElementwiseOpsTest, ReluCostIsBandwidth) {
  // f32[1024,1024]: 2^20 elements of 4 bytes, read once and written once, one
  // flop (a max) each.
  const std::vector<TensorType> io = {F32({1024, 1024})};
  const OpCost cost = GetOpDef(OpKind::kRelu).cost({}, io, io);
  EXPECT_EQ(cost.macs, 0);
  EXPECT_EQ(cost.flops, 1 << 20);
  EXPECT_EQ(cost.bytes_read, 4 << 20);
  EXPECT_EQ(cost.bytes_written, 4 << 20);
}

TEST(ElementwiseOpsTest, ActivationCostsPerElement) {
  // f32[1000]: 4000 bytes read and written for the forward ops, 8000 read for
  // the backward ops (dy and y or x).
  const std::vector<TensorType> one = {F32({1000})};
  const std::vector<TensorType> two(2, F32({1000}));
  const struct {
    OpKind op;
    std::vector<TensorType> inputs;
    int64_t flops;
  } expected[] = {
      {OpKind::kSigmoid, one, 6000},   {OpKind::kSigmoidBackward, two, 3000},
      {OpKind::kTanh, one, 4000},      {OpKind::kTanhBackward, two, 3000},
      {OpKind::kLeakyRelu, one, 2000}, {OpKind::kLeakyReluBackward, two, 2000},
      {OpKind::kClip, one, 2000},      {OpKind::kClipBackward, two, 2000},
      {OpKind::kSub, two, 1000},       {OpKind::kDiv, two, 1000},
  };
  for (const auto& [op, inputs, flops] : expected) {
    const OpCost cost = GetOpDef(op).cost({}, inputs, one);
    EXPECT_EQ(cost.flops, flops) << OpName(op);
    EXPECT_EQ(cost.bytes_read, 4000 * static_cast<int64_t>(inputs.size())) << OpName(op);
    EXPECT_EQ(cost.bytes_written, 4000) << OpName(op);
  }
}

TEST(ElementwiseOpsTest, AddNCostCountsOneAddPerExtraInput) {
  // Three f32[100] inputs: two adds per output element = 200 flops; reads
  // 3·400 bytes, writes 400.
  const std::vector<TensorType> inputs(3, F32({100}));
  const std::vector<TensorType> outputs = {F32({100})};
  const OpCost cost = GetOpDef(OpKind::kAddN).cost({}, inputs, outputs);
  EXPECT_EQ(cost.flops, 200);
  EXPECT_EQ(cost.bytes_read, 1200);
  EXPECT_EQ(cost.bytes_written, 400);
}

TEST(ElementwiseOpsTest, ReduceSumCostCountsInputElements) {
  // [64,10] summed over axis 0: 640 adds; reads 2560 bytes, writes 10·4 = 40.
  const std::vector<TensorType> inputs = {F32({64, 10})};
  const std::vector<TensorType> outputs = {F32({10})};
  const OpCost cost = GetOpDef(OpKind::kReduceSum).cost({{"axes", IntList{0}}}, inputs, outputs);
  EXPECT_EQ(cost.flops, 640);
  EXPECT_EQ(cost.bytes_read, 2560);
  EXPECT_EQ(cost.bytes_written, 40);
}

TEST(ElementwiseOpsTest, GraphErrorNamesTheNode) {
  Graph graph;
  const ValueId a = graph.AddInput("a", F32({2, 3}));
  const ValueId b = graph.AddInput("b", F32({4}));
  absl::StatusOr<NodeId> node = graph.AddNode(OpKind::kAdd, {a, b}, {}, "residual");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(std::string(StatusMessage(node.status())),
              HasSubstr("node 'residual' (add): shapes [2,3] and [4] do not broadcast"));
}

}  // namespace
}  // namespace spillway::ir
