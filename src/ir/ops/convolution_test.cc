// conv2d, conv2d_backward_data and conv2d_backward_weight: inference, errors and costs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "support/status_macros.h"

namespace spillway::ir {
namespace {

using ::testing::HasSubstr;

// The message of the error InferOutputTypes must return.
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

// ResNet-50's first layer: 7x7, 64 filters, stride 2, pad 3 on a 224x224 RGB image.
const AttrMap kResNetConv1{{"strides", IntList{2, 2}}, {"pads", IntList{3, 3, 3, 3}}};

TEST(Conv2dTest, ResNetConv1HalvesTheImage) {
  // OH = floor((224 + 3 + 3 - 7) / 2) + 1 = 111 + 1 = 112; channels become O = 64.
  std::vector<TensorType> outputs =
      Infer(OpKind::kConv2d, kResNetConv1, {Activation({1, 224, 224, 3}), F32({64, 7, 7, 3})});
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0], Activation({1, 112, 112, 64}));
}

TEST(Conv2dTest, ResNetConv1Cost) {
  Graph graph;
  ValueId x = graph.AddInput("x", Activation({1, 224, 224, 3}));
  ValueId w = graph.AddInput("w", F32({64, 7, 7, 3}), ValueKind::kParameter);
  absl::StatusOr<NodeId> conv = graph.AddNode(OpKind::kConv2d, {x, w}, kResNetConv1, "conv1");
  ASSERT_TRUE(conv.ok()) << StatusMessage(conv.status());
  OpCost cost = NodeCost(graph, graph.node(*conv));
  // N*OH*OW*O*KH*KW*C = 1*112*112*64*7*7*3 = 118,013,952 MACs (torchvision's
  // 4.09 GMACs for ResNet-50 starts with these 0.118).
  EXPECT_EQ(cost.macs, 118'013'952);
  EXPECT_EQ(cost.flops, 2 * 118'013'952);
  // x is 224*224*3*4 = 602,112 bytes and w 64*7*7*3*4 = 37,632; y is 112*112*64*4.
  EXPECT_EQ(cost.bytes_read, 602'112 + 37'632);
  EXPECT_EQ(cost.bytes_written, 3'211'264);
}

TEST(Conv2dTest, BiasAddsOneFlopPerOutput) {
  const AttrMap same{{"pads", IntList{1, 1, 1, 1}}};
  OpCost cost =
      Cost(OpKind::kConv2d, same, {Activation({2, 8, 8, 16}), F32({32, 3, 3, 16}), F32({32})});
  // A 3x3 "same" convolution keeps 8x8: 2*8*8*32*3*3*16 = 589,824 MACs, and the
  // bias adds 2*8*8*32 = 4,096.
  EXPECT_EQ(cost.macs, 589'824);
  EXPECT_EQ(cost.flops, 2 * 589'824 + 4'096);
  EXPECT_EQ(
      Infer(OpKind::kConv2d, same, {Activation({2, 8, 8, 16}), F32({32, 3, 3, 16}), F32({32})})[0],
      Activation({2, 8, 8, 32}));
}

TEST(Conv2dTest, DepthwiseConvolutionCountsOneInputChannelPerFilter) {
  // MobileNet-style depthwise 3x3 stride 2: groups = C = 32, weight [32,3,3,1].
  // OH = floor((56 + 2 - 3) / 2) + 1 = 27 + 1 = 28.
  const AttrMap depthwise{
      {"strides", IntList{2, 2}}, {"pads", IntList{1, 1, 1, 1}}, {"groups", int64_t{32}}};
  const std::vector<TensorType> inputs{Activation({1, 56, 56, 32}), F32({32, 3, 3, 1})};
  EXPECT_EQ(Infer(OpKind::kConv2d, depthwise, inputs)[0], Activation({1, 28, 28, 32}));
  // 1*28*28*32*3*3*1 = 225,792: each output reads only its own channel.
  EXPECT_EQ(Cost(OpKind::kConv2d, depthwise, inputs).macs, 225'792);
}

TEST(Conv2dTest, DilationWidensTheWindow) {
  // A 3x3 kernel with dilation 2 spans 5 pixels: OH = 32 - 5 + 1 = 28.
  EXPECT_EQ(Infer(OpKind::kConv2d, {{"dilations", IntList{2, 2}}},
                  {Activation({1, 32, 32, 8}), F32({8, 3, 3, 8})})[0],
            Activation({1, 28, 28, 8}));
}

TEST(Conv2dTest, HalfPrecisionStaysHalf) {
  TensorType x{DType::kF16, {1, 16, 16, 8}, Layout::kNHWC};
  TensorType w{DType::kF16, {4, 1, 1, 8}, Layout::kRowMajor};
  EXPECT_EQ(Infer(OpKind::kConv2d, {}, {x, w})[0],
            (TensorType{DType::kF16, {1, 16, 16, 4}, Layout::kNHWC}));
}

TEST(Conv2dTest, RegistryEntry) {
  const OpDef& def = GetOpDef(OpKind::kConv2d);
  EXPECT_EQ(def.op_class, OpClass::kConvolution);
  EXPECT_EQ(def.min_inputs, 2);
  EXPECT_EQ(def.max_inputs, 3);
  EXPECT_TRUE(def.differentiable);
  EXPECT_FALSE(GetOpDef(OpKind::kConv2dBackwardData).differentiable);
  EXPECT_FALSE(GetOpDef(OpKind::kConv2dBackwardWeight).differentiable);
}

TEST(Conv2dTest, RejectsWrongRank) {
  EXPECT_THAT(InferError(OpKind::kConv2d, {}, {F32({224, 224, 3}), F32({64, 7, 7, 3})}),
              HasSubstr("input 0 (x) must have rank 4, got f32[224,224,3]"));
  EXPECT_THAT(InferError(OpKind::kConv2d, {}, {Activation({1, 8, 8, 3}), F32({64, 3})}),
              HasSubstr("input 1 (w) must have rank 4"));
}

TEST(Conv2dTest, RejectsChannelMismatch) {
  // 64 input channels, but weight [64,3,3,16] with groups 2 reads 16*2 = 32.
  EXPECT_EQ(InferError(OpKind::kConv2d, {{"groups", int64_t{2}}},
                       {Activation({1, 56, 56, 64}), F32({64, 3, 3, 16})}),
            "input channels 64 do not match weight's in_channels*groups 32 "
            "(x f32[1,56,56,64] nhwc, w f32[64,3,3,16])");
}

TEST(Conv2dTest, RejectsOutputChannelsNotDivisibleByGroups) {
  // C = 4 = 1*4 matches, but 6 filters cannot be split into 4 groups.
  EXPECT_THAT(InferError(OpKind::kConv2d, {{"groups", int64_t{4}}},
                         {Activation({1, 8, 8, 4}), F32({6, 3, 3, 1})}),
              HasSubstr("output channels 6 are not divisible by groups 4"));
}

TEST(Conv2dTest, RejectsImageSmallerThanKernel) {
  EXPECT_THAT(InferError(OpKind::kConv2d, {}, {Activation({1, 4, 4, 3}), F32({8, 7, 7, 3})}),
              HasSubstr("height extent 4 (4 padded) is smaller than the window of 7"));
}

TEST(Conv2dTest, RejectsBadBiasAndDTypes) {
  EXPECT_THAT(
      InferError(OpKind::kConv2d, {}, {Activation({1, 8, 8, 3}), F32({16, 3, 3, 3}), F32({8})}),
      HasSubstr("input 2 (b) must be [16]"));
  EXPECT_THAT(InferError(OpKind::kConv2d, {},
                         {Activation({1, 8, 8, 3}),
                          TensorType{DType::kF16, {16, 3, 3, 3}, Layout::kRowMajor}}),
              HasSubstr("input 1 (w) must be f32 like input 0, got f16[16,3,3,3]"));
  EXPECT_THAT(
      InferError(OpKind::kConv2d, {},
                 {TensorType{DType::kI32, {1, 8, 8, 3}, Layout::kNHWC}, F32({16, 3, 3, 3})}),
      HasSubstr("input 0 (x) must be floating point"));
}

TEST(Conv2dTest, RejectsBadAttributes) {
  const std::vector<TensorType> inputs{Activation({1, 8, 8, 3}), F32({16, 3, 3, 3})};
  EXPECT_THAT(InferError(OpKind::kConv2d, {{"strides", IntList{0, 1}}}, inputs),
              HasSubstr("attribute 'strides' entries must be >= 1, got [0,1]"));
  EXPECT_THAT(InferError(OpKind::kConv2d, {{"strides", IntList{1, 1, 1}}}, inputs),
              HasSubstr("attribute 'strides' must have 2 entries"));
  EXPECT_THAT(InferError(OpKind::kConv2d, {{"strides", int64_t{2}}}, inputs),
              HasSubstr("attribute 'strides' must be a int list"));
  EXPECT_THAT(InferError(OpKind::kConv2d, {{"pads", IntList{1, -1, 1, 1}}}, inputs),
              HasSubstr("attribute 'pads' entries must be >= 0"));
  EXPECT_THAT(InferError(OpKind::kConv2d, {{"dilations", IntList{0, 0}}}, inputs),
              HasSubstr("attribute 'dilations' entries must be >= 1"));
  EXPECT_THAT(InferError(OpKind::kConv2d, {{"groups", int64_t{0}}}, inputs),
              HasSubstr("attribute 'groups' must be >= 1, got 0"));
}

TEST(Conv2dTest, RejectsWrongInputCount) {
  EXPECT_EQ(InferError(OpKind::kConv2d, {}, {Activation({1, 8, 8, 3})}),
            "expects 2 to 3 inputs, got 1");
  EXPECT_EQ(InferError(OpKind::kConv2d, {},
                       {Activation({1, 8, 8, 3}), F32({16, 3, 3, 3}), F32({16}), F32({16})}),
            "expects 2 to 3 inputs, got 4");
}

TEST(Conv2dTest, GraphErrorNamesTheNode) {
  Graph graph;
  ValueId x = graph.AddInput("x", Activation({1, 56, 56, 64}));
  ValueId w = graph.AddInput("w", F32({64, 3, 3, 32}), ValueKind::kParameter);
  absl::StatusOr<NodeId> conv = graph.AddNode(OpKind::kConv2d, {x, w}, {}, "layer1.conv2");
  ASSERT_FALSE(conv.ok());
  EXPECT_THAT(std::string(StatusMessage(conv.status())),
              HasSubstr("node 'layer1.conv2' (conv2d): input channels 64 do not match weight's "
                        "in_channels*groups 32"));
}

// ---- conv2d_backward_data ----

AttrMap WithAttr(AttrMap attrs, std::string name, AttrValue value) {
  attrs.Set(std::move(name), std::move(value));
  return attrs;
}

TEST(Conv2dBackwardDataTest, RecoversTheInputShape) {
  const AttrMap attrs = WithAttr(kResNetConv1, "input_shape", IntList{1, 224, 224, 3});
  const std::vector<TensorType> inputs{Activation({1, 112, 112, 64}), F32({64, 7, 7, 3})};
  std::vector<TensorType> outputs = Infer(OpKind::kConv2dBackwardData, attrs, inputs);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0], Activation({1, 224, 224, 3}));
  // The transposed convolution does the forward's products: 118,013,952 MACs.
  OpCost cost = Cost(OpKind::kConv2dBackwardData, attrs, inputs);
  EXPECT_EQ(cost.macs, 118'013'952);
  EXPECT_EQ(cost.flops, 2 * 118'013'952);
}

TEST(Conv2dBackwardDataTest, AddsAnAccumulatorOfTheGradientsType) {
  const AttrMap attrs = WithAttr(kResNetConv1, "input_shape", IntList{1, 224, 224, 3});
  const std::vector<TensorType> inputs{Activation({1, 112, 112, 64}), F32({64, 7, 7, 3}),
                                       Activation({1, 224, 224, 3})};
  EXPECT_EQ(Infer(OpKind::kConv2dBackwardData, attrs, inputs),
            std::vector<TensorType>{Activation({1, 224, 224, 3})});
  // One more read of dx's size, and one add per element.
  const OpCost plain =
      Cost(OpKind::kConv2dBackwardData, attrs, std::vector<TensorType>{inputs[0], inputs[1]});
  const OpCost accumulating = Cost(OpKind::kConv2dBackwardData, attrs, inputs);
  EXPECT_EQ(accumulating.bytes_read, plain.bytes_read + 224 * 224 * 3 * 4);
  EXPECT_EQ(accumulating.flops, plain.flops + 224 * 224 * 3);
  EXPECT_EQ(accumulating.macs, plain.macs);
  // dx may take acc's buffer, never dy's or w's (read throughout).
  const OpDef& def = GetOpDef(OpKind::kConv2dBackwardData);
  EXPECT_TRUE(def.MayOverwrite(2));
  EXPECT_FALSE(def.MayOverwrite(0));
  EXPECT_FALSE(def.MayOverwrite(1));
  EXPECT_THAT(
      InferError(OpKind::kConv2dBackwardData, attrs,
                 {Activation({1, 112, 112, 64}), F32({64, 7, 7, 3}), Activation({1, 224, 224, 4})}),
      HasSubstr("input 2 (acc) must be dx's type f32[1,224,224,3]"));
}

TEST(Conv2dBackwardDataTest, RejectsMissingInputShape) {
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardData, kResNetConv1,
                         {Activation({1, 112, 112, 64}), F32({64, 7, 7, 3})}),
              HasSubstr("missing attribute 'input_shape'"));
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardData,
                         WithAttr(kResNetConv1, "input_shape", IntList{224, 224, 3}),
                         {Activation({1, 112, 112, 64}), F32({64, 7, 7, 3})}),
              HasSubstr("attribute 'input_shape' must have 4 entries"));
}

TEST(Conv2dBackwardDataTest, RejectsGradientOfAnotherShape) {
  // A 225x225 input gives floor((225 + 6 - 7) / 2) + 1 = 113, not dy's 112.
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardData,
                         WithAttr(kResNetConv1, "input_shape", IntList{1, 225, 225, 3}),
                         {Activation({1, 112, 112, 64}), F32({64, 7, 7, 3})}),
              HasSubstr("dy must have the forward output shape [1,113,113,64]"));
}

TEST(Conv2dBackwardDataTest, RejectsChannelMismatchRankAndCount) {
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardData,
                         WithAttr(kResNetConv1, "input_shape", IntList{1, 224, 224, 4}),
                         {Activation({1, 112, 112, 64}), F32({64, 7, 7, 3})}),
              HasSubstr("input channels 4 do not match weight's in_channels*groups 3"));
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardData,
                         WithAttr(kResNetConv1, "input_shape", IntList{1, 224, 224, 3}),
                         {F32({112, 112, 64}), F32({64, 7, 7, 3})}),
              HasSubstr("input 0 (dy) must have rank 4"));
  EXPECT_EQ(InferError(OpKind::kConv2dBackwardData,
                       WithAttr(kResNetConv1, "input_shape", IntList{1, 224, 224, 3}),
                       {Activation({1, 112, 112, 64}), F32({64, 7, 7, 3}),
                        Activation({1, 224, 224, 3}), F32({64})}),
            "expects 2 to 3 inputs, got 4");
}

// ---- conv2d_backward_weight ----

TEST(Conv2dBackwardWeightTest, ProducesTheWeightShape) {
  const AttrMap attrs = WithAttr(kResNetConv1, "kernel", IntList{7, 7});
  const std::vector<TensorType> inputs{Activation({1, 112, 112, 64}), Activation({1, 224, 224, 3})};
  std::vector<TensorType> outputs = Infer(OpKind::kConv2dBackwardWeight, attrs, inputs);
  ASSERT_EQ(outputs.size(), 1u);
  // OHWI and row-major, like the parameter it is the gradient of.
  EXPECT_EQ(outputs[0], F32({64, 7, 7, 3}));
  EXPECT_EQ(Cost(OpKind::kConv2dBackwardWeight, attrs, inputs).macs, 118'013'952);
}

TEST(Conv2dBackwardWeightTest, GroupedWeightHasInChannelsPerGroup) {
  // 64 channels in 4 groups: each filter reads 16.
  const AttrMap attrs{{"kernel", IntList{3, 3}}, {"groups", int64_t{4}}};
  EXPECT_EQ(Infer(OpKind::kConv2dBackwardWeight, attrs,
                  {Activation({2, 6, 6, 32}), Activation({2, 8, 8, 64})})[0],
            F32({32, 3, 3, 16}));
}

TEST(Conv2dBackwardWeightTest, RejectsBadKernel) {
  const std::vector<TensorType> inputs{Activation({1, 112, 112, 64}), Activation({1, 224, 224, 3})};
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardWeight, kResNetConv1, inputs),
              HasSubstr("missing attribute 'kernel'"));
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardWeight,
                         WithAttr(kResNetConv1, "kernel", IntList{0, 7}), inputs),
              HasSubstr("attribute 'kernel' entries must be >= 1"));
  // A 5x5 kernel would give floor((224 + 6 - 5) / 2) + 1 = 113 rows, not dy's 112.
  EXPECT_THAT(InferError(OpKind::kConv2dBackwardWeight,
                         WithAttr(kResNetConv1, "kernel", IntList{5, 5}), inputs),
              HasSubstr("dy must have the forward output shape [1,113,113,64]"));
}

TEST(Conv2dBackwardWeightTest, RejectsGroupsNotDividingChannels) {
  EXPECT_THAT(
      InferError(OpKind::kConv2dBackwardWeight, {{"kernel", IntList{1, 1}}, {"groups", int64_t{2}}},
                 {Activation({1, 8, 8, 4}), Activation({1, 8, 8, 3})}),
      HasSubstr("input channels 3 are not divisible by groups 2"));
  EXPECT_EQ(InferError(OpKind::kConv2dBackwardWeight, {{"kernel", IntList{1, 1}}},
                       {Activation({1, 8, 8, 4})}),
            "expects 2 inputs, got 1");
}

}  // namespace
}  // namespace spillway::ir
