// max_pool, avg_pool, global_avg_pool, resize_bilinear, resize_nearest and their
// backward ops.
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

// ResNet-50's stem pooling: 3x3, stride 2, pad 1, after conv1's [1,112,112,64].
const AttrMap kResNetMaxPool{
    {"kernel", IntList{3, 3}}, {"strides", IntList{2, 2}}, {"pads", IntList{1, 1, 1, 1}}};

// ---- max_pool ----

TEST(MaxPoolTest, ResNetStemPoolHalvesTheImage) {
  // OH = floor((112 + 1 + 1 - 3) / 2) + 1 = 55 + 1 = 56; channels unchanged.
  EXPECT_THAT(Infer(OpKind::kMaxPool, kResNetMaxPool, {Activation({1, 112, 112, 64})}),
              ElementsAre(Activation({1, 56, 56, 64})));
  const OpDef& def = GetOpDef(OpKind::kMaxPool);
  EXPECT_EQ(def.op_class, OpClass::kPooling);
  EXPECT_TRUE(def.differentiable);
}

TEST(MaxPoolTest, StridesDefaultToTheKernel) {
  // 2x2 windows, stride 2: 8 / 2 = 4.
  EXPECT_THAT(Infer(OpKind::kMaxPool, {{"kernel", IntList{2, 2}}}, {Activation({1, 8, 8, 4})}),
              ElementsAre(Activation({1, 4, 4, 4})));
}

TEST(MaxPoolTest, CostCountsOneComparisonPerWindowElement) {
  OpCost cost = Cost(OpKind::kMaxPool, kResNetMaxPool, {Activation({1, 112, 112, 64})});
  // 56*56*64 outputs, each a max over 3*3 = 9 inputs: 1,806,336.
  EXPECT_EQ(cost.macs, 0);
  EXPECT_EQ(cost.flops, 1'806'336);
  // 112*112*64*4 bytes read, 56*56*64*4 written.
  EXPECT_EQ(cost.bytes_read, 3'211'264);
  EXPECT_EQ(cost.bytes_written, 802'816);
}

TEST(MaxPoolTest, RejectsBadAttributes) {
  const std::vector<TensorType> x{Activation({1, 8, 8, 4})};
  EXPECT_THAT(InferError(OpKind::kMaxPool, {}, x), HasSubstr("missing attribute 'kernel'"));
  EXPECT_THAT(InferError(OpKind::kMaxPool, {{"kernel", IntList{0, 2}}}, x),
              HasSubstr("attribute 'kernel' entries must be >= 1"));
  EXPECT_THAT(
      InferError(OpKind::kMaxPool, {{"kernel", IntList{2, 2}}, {"strides", IntList{0, 2}}}, x),
      HasSubstr("attribute 'strides' entries must be >= 1"));
  // A pad of 2 with a 2-wide window would make the first window all padding.
  EXPECT_THAT(
      InferError(OpKind::kMaxPool, {{"kernel", IntList{2, 2}}, {"pads", IntList{2, 0, 0, 0}}}, x),
      HasSubstr("attribute 'pads' [2,0,0,0] must be smaller than the kernel [2,2]"));
  EXPECT_THAT(
      InferError(OpKind::kMaxPool, {{"kernel", IntList{2, 2}}, {"pads", IntList{0, 0, -1, 0}}}, x),
      HasSubstr("attribute 'pads' entries must be >= 0"));
}

TEST(MaxPoolTest, RejectsImageSmallerThanWindow) {
  EXPECT_THAT(InferError(OpKind::kMaxPool, {{"kernel", IntList{3, 3}}}, {Activation({1, 2, 2, 4})}),
              HasSubstr("height extent 2 (2 padded) is smaller than the window of 3: the input "
                        "is too small for this layer"));
}

TEST(MaxPoolTest, RejectsWrongRankAndCount) {
  EXPECT_THAT(InferError(OpKind::kMaxPool, kResNetMaxPool, {F32({112, 112, 64})}),
              HasSubstr("input 0 (x) must have rank 4, got f32[112,112,64]"));
  EXPECT_EQ(InferError(OpKind::kMaxPool, kResNetMaxPool,
                       {Activation({1, 112, 112, 64}), Activation({1, 112, 112, 64})}),
            "expects 1 inputs, got 2");
}

TEST(MaxPoolTest, GraphErrorNamesTheNode) {
  Graph graph;
  // 2 + 1 + 1 = 4 padded rows hold one 3-row window: a 2x2 image still pools to 1x1.
  ValueId small = graph.AddInput("small", Activation({1, 2, 2, 64}));
  absl::StatusOr<NodeId> pool = graph.AddNode(OpKind::kMaxPool, {small}, kResNetMaxPool, "pool1");
  ASSERT_TRUE(pool.ok()) << StatusMessage(pool.status());
  EXPECT_EQ(graph.value(graph.node(*pool).outputs[0]).type, Activation({1, 1, 1, 64}));
  // Without padding a 1x1 image cannot hold it, and the error says which layer.
  ValueId tiny = graph.AddInput("tiny", Activation({1, 1, 1, 64}));
  absl::StatusOr<NodeId> tiny_pool =
      graph.AddNode(OpKind::kMaxPool, {tiny}, {{"kernel", IntList{3, 3}}}, "pool5");
  ASSERT_FALSE(tiny_pool.ok());
  EXPECT_EQ(std::string(StatusMessage(tiny_pool.status())),
            "node 'pool5' (max_pool): x f32[1,1,1,64] nhwc: height extent 1 (1 padded) is smaller "
            "than the window of 3: the input is too small for this layer");
}

// ---- max_pool_backward ----

TEST(MaxPoolBackwardTest, GradientHasTheInputType) {
  // dy, x -> dx of x's type.
  EXPECT_THAT(Infer(OpKind::kMaxPoolBackward, kResNetMaxPool,
                    {Activation({1, 56, 56, 64}), Activation({1, 112, 112, 64})}),
              ElementsAre(Activation({1, 112, 112, 64})));
  EXPECT_FALSE(GetOpDef(OpKind::kMaxPoolBackward).differentiable);
}

TEST(MaxPoolBackwardTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kMaxPoolBackward, kResNetMaxPool,
                         {Activation({1, 55, 55, 64}), Activation({1, 112, 112, 64})}),
              HasSubstr("input 0 (dy) must have shape [1,56,56,64], got f32[1,55,55,64] nhwc"));
  EXPECT_THAT(InferError(OpKind::kMaxPoolBackward, {},
                         {Activation({1, 56, 56, 64}), Activation({1, 112, 112, 64})}),
              HasSubstr("missing attribute 'kernel'"));
  EXPECT_EQ(InferError(OpKind::kMaxPoolBackward, kResNetMaxPool,
                       {Activation({1, 56, 56, 64}), Activation({1, 112, 112, 64}),
                        Activation({1, 56, 56, 64})}),
            "expects 2 inputs, got 3");
}

// ---- avg_pool ----

TEST(AvgPoolTest, SevenBySevenPoolToOnePixel) {
  const AttrMap attrs{{"kernel", IntList{7, 7}}};
  EXPECT_THAT(Infer(OpKind::kAvgPool, attrs, {Activation({1, 7, 7, 2048})}),
              ElementsAre(Activation({1, 1, 1, 2048})));
  // 2048 outputs, each 49 adds and one divide: 102,400 FLOPs.
  EXPECT_EQ(Cost(OpKind::kAvgPool, attrs, {Activation({1, 7, 7, 2048})}).flops, 102'400);
  EXPECT_TRUE(GetOpDef(OpKind::kAvgPool).differentiable);
}

TEST(AvgPoolTest, PaddedStridedWindows) {
  // 3x3 stride 1 pad 1 keeps 14x14 ("same" average pooling as in Inception).
  EXPECT_THAT(Infer(OpKind::kAvgPool,
                    {{"kernel", IntList{3, 3}},
                     {"strides", IntList{1, 1}},
                     {"pads", IntList{1, 1, 1, 1}},
                     {"count_include_pad", true}},
                    {Activation({2, 14, 14, 8})}),
              ElementsAre(Activation({2, 14, 14, 8})));
}

TEST(AvgPoolTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kAvgPool, {{"kernel", IntList{2, 2}}, {"count_include_pad", 1.0}},
                         {Activation({1, 8, 8, 4})}),
              HasSubstr("attribute 'count_include_pad' must be a bool"));
  EXPECT_THAT(InferError(OpKind::kAvgPool, {{"kernel", IntList{2}}}, {Activation({1, 8, 8, 4})}),
              HasSubstr("attribute 'kernel' must have 2 entries, got [2]"));
  EXPECT_THAT(InferError(OpKind::kAvgPool, {{"kernel", IntList{1, 9}}}, {Activation({1, 8, 8, 4})}),
              HasSubstr("width extent 8 (8 padded) is smaller than the window of 9"));
  EXPECT_THAT(InferError(OpKind::kAvgPool, {{"kernel", IntList{2, 2}}}, {F32({8, 8})}),
              HasSubstr("input 0 (x) must have rank 4"));
  EXPECT_EQ(InferError(OpKind::kAvgPool, {{"kernel", IntList{2, 2}}}, {}),
            "expects 1 inputs, got 0");
}

// ---- avg_pool_backward ----

TEST(AvgPoolBackwardTest, GradientHasTheInputShape) {
  const AttrMap attrs{{"kernel", IntList{7, 7}}, {"input_shape", IntList{1, 7, 7, 2048}}};
  EXPECT_THAT(Infer(OpKind::kAvgPoolBackward, attrs, {Activation({1, 1, 1, 2048})}),
              ElementsAre(Activation({1, 7, 7, 2048})));
  EXPECT_FALSE(GetOpDef(OpKind::kAvgPoolBackward).differentiable);
  // Each of the 2048 dy elements is divided once and added to 49 inputs.
  EXPECT_EQ(Cost(OpKind::kAvgPoolBackward, attrs, {Activation({1, 1, 1, 2048})}).flops, 102'400);
}

TEST(AvgPoolBackwardTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kAvgPoolBackward, {{"kernel", IntList{7, 7}}},
                         {Activation({1, 1, 1, 2048})}),
              HasSubstr("missing attribute 'input_shape'"));
  // A 14x14 input pools to 2x2, not dy's 1x1.
  EXPECT_THAT(InferError(OpKind::kAvgPoolBackward,
                         {{"kernel", IntList{7, 7}}, {"input_shape", IntList{1, 14, 14, 2048}}},
                         {Activation({1, 1, 1, 2048})}),
              HasSubstr("input 0 (dy) must have shape [1,2,2,2048]"));
  EXPECT_EQ(InferError(OpKind::kAvgPoolBackward,
                       {{"kernel", IntList{7, 7}}, {"input_shape", IntList{1, 7, 7, 2048}}},
                       {Activation({1, 1, 1, 2048}), Activation({1, 7, 7, 2048})}),
            "expects 1 inputs, got 2");
}

// ---- global_avg_pool ----

TEST(GlobalAvgPoolTest, AveragesAllPixels) {
  EXPECT_THAT(Infer(OpKind::kGlobalAvgPool, {}, {Activation({8, 7, 7, 2048})}),
              ElementsAre(Activation({8, 1, 1, 2048})));
  OpCost cost = Cost(OpKind::kGlobalAvgPool, {}, {Activation({8, 7, 7, 2048})});
  // 8*7*7*2048 = 802,816 adds plus 8*2048 = 16,384 divides.
  EXPECT_EQ(cost.flops, 819'200);
  EXPECT_EQ(cost.bytes_read, 802'816 * 4);
  EXPECT_EQ(cost.bytes_written, 16'384 * 4);
  EXPECT_TRUE(GetOpDef(OpKind::kGlobalAvgPool).differentiable);
}

TEST(GlobalAvgPoolTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kGlobalAvgPool, {}, {F32({8, 2048})}),
              HasSubstr("input 0 (x) must have rank 4, got f32[8,2048]"));
  EXPECT_THAT(InferError(OpKind::kGlobalAvgPool, {},
                         {TensorType{DType::kI32, {8, 7, 7, 4}, Layout::kNHWC}}),
              HasSubstr("input 0 (x) must be floating point"));
  EXPECT_THAT(InferError(OpKind::kGlobalAvgPool, {}, {Activation({8, 0, 7, 4})}),
              HasSubstr("no pixels to average"));
  EXPECT_EQ(
      InferError(OpKind::kGlobalAvgPool, {}, {Activation({8, 7, 7, 4}), Activation({8, 7, 7, 4})}),
      "expects 1 inputs, got 2");
}

// ---- global_avg_pool_backward ----

TEST(GlobalAvgPoolBackwardTest, GradientHasTheInputShape) {
  const AttrMap attrs{{"input_shape", IntList{8, 7, 7, 2048}}};
  EXPECT_THAT(Infer(OpKind::kGlobalAvgPoolBackward, attrs, {Activation({8, 1, 1, 2048})}),
              ElementsAre(Activation({8, 7, 7, 2048})));
  // One multiply by 1/49 per element of dx.
  EXPECT_EQ(Cost(OpKind::kGlobalAvgPoolBackward, attrs, {Activation({8, 1, 1, 2048})}).flops,
            802'816);
  EXPECT_FALSE(GetOpDef(OpKind::kGlobalAvgPoolBackward).differentiable);
}

TEST(GlobalAvgPoolBackwardTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kGlobalAvgPoolBackward, {{"input_shape", IntList{8, 7, 7, 2048}}},
                         {Activation({8, 2, 2, 2048})}),
              HasSubstr("input 0 (dy) must have shape [8,1,1,2048]"));
  EXPECT_THAT(InferError(OpKind::kGlobalAvgPoolBackward, {}, {Activation({8, 1, 1, 2048})}),
              HasSubstr("missing attribute 'input_shape'"));
  EXPECT_THAT(InferError(OpKind::kGlobalAvgPoolBackward, {{"input_shape", IntList{8, 7, 2048}}},
                         {Activation({8, 1, 1, 2048})}),
              HasSubstr("attribute 'input_shape' must have 4 entries"));
  EXPECT_EQ(
      InferError(OpKind::kGlobalAvgPoolBackward, {{"input_shape", IntList{8, 7, 7, 2048}}}, {}),
      "expects 1 inputs, got 0");
}

// ---- resize_bilinear ----

TEST(ResizeBilinearTest, UpsamplesToTheGivenSize) {
  // DeepLabV3+'s decoder upsamples by 4: 32x32 -> 128x128.
  const AttrMap attrs{{"size", IntList{128, 128}}};
  EXPECT_THAT(Infer(OpKind::kResizeBilinear, attrs, {Activation({2, 32, 32, 256})}),
              ElementsAre(Activation({2, 128, 128, 256})));
  const OpDef& def = GetOpDef(OpKind::kResizeBilinear);
  EXPECT_EQ(def.op_class, OpClass::kDataMovement);
  EXPECT_TRUE(def.differentiable);
  // 2*128*128*256 = 8,388,608 outputs, each 4 weighted taps (7 FLOPs).
  EXPECT_EQ(Cost(OpKind::kResizeBilinear, attrs, {Activation({2, 32, 32, 256})}).flops, 58'720'256);
}

TEST(ResizeBilinearTest, Errors) {
  const std::vector<TensorType> x{Activation({2, 32, 32, 256})};
  EXPECT_THAT(InferError(OpKind::kResizeBilinear, {}, x), HasSubstr("missing attribute 'size'"));
  EXPECT_THAT(InferError(OpKind::kResizeBilinear, {{"size", IntList{0, 128}}}, x),
              HasSubstr("attribute 'size' entries must be >= 1"));
  EXPECT_THAT(InferError(OpKind::kResizeBilinear, {{"size", IntList{1, 128, 128, 256}}}, x),
              HasSubstr("attribute 'size' must have 2 entries"));
  EXPECT_THAT(InferError(OpKind::kResizeBilinear,
                         {{"size", IntList{128, 128}}, {"align_corners", std::string("true")}}, x),
              HasSubstr("attribute 'align_corners' must be a bool"));
  EXPECT_THAT(InferError(OpKind::kResizeBilinear, {{"size", IntList{128, 128}}}, {F32({32, 32})}),
              HasSubstr("input 0 (x) must have rank 4"));
  EXPECT_EQ(InferError(OpKind::kResizeBilinear, {{"size", IntList{128, 128}}}, {}),
            "expects 1 inputs, got 0");
}

// ---- resize_bilinear_backward ----

TEST(ResizeBilinearBackwardTest, GradientHasTheInputShape) {
  const AttrMap attrs{{"input_shape", IntList{2, 32, 32, 256}}, {"align_corners", true}};
  EXPECT_THAT(Infer(OpKind::kResizeBilinearBackward, attrs, {Activation({2, 128, 128, 256})}),
              ElementsAre(Activation({2, 32, 32, 256})));
  EXPECT_FALSE(GetOpDef(OpKind::kResizeBilinearBackward).differentiable);
  // Each of the 8,388,608 dy elements is scattered to 4 taps (8 FLOPs).
  EXPECT_EQ(Cost(OpKind::kResizeBilinearBackward, attrs, {Activation({2, 128, 128, 256})}).flops,
            67'108'864);
}

TEST(ResizeBilinearBackwardTest, Errors) {
  EXPECT_THAT(
      InferError(OpKind::kResizeBilinearBackward, {{"input_shape", IntList{2, 32, 32, 128}}},
                 {Activation({2, 128, 128, 256})}),
      HasSubstr("input 0 (dy) must have the batch and channels of input_shape "
                "[2,32,32,128], got f32[2,128,128,256] nhwc"));
  EXPECT_THAT(InferError(OpKind::kResizeBilinearBackward, {}, {Activation({2, 128, 128, 256})}),
              HasSubstr("missing attribute 'input_shape'"));
  EXPECT_THAT(InferError(OpKind::kResizeBilinearBackward,
                         {{"input_shape", IntList{2, 32, 32, 256}}}, {F32({128, 128, 256})}),
              HasSubstr("input 0 (dy) must have rank 4"));
  EXPECT_EQ(InferError(OpKind::kResizeBilinearBackward, {{"input_shape", IntList{2, 32, 32, 256}}},
                       {Activation({2, 128, 128, 256}), Activation({2, 128, 128, 256})}),
            "expects 1 inputs, got 2");
}

// ---- resize_nearest ----

TEST(ResizeNearestTest, ResizesToTheGivenSizeAndOnlyCopies) {
  // A YOLO-style 2x upsample: 13x13 -> 26x26.
  const AttrMap attrs{{"size", IntList{26, 26}}};
  EXPECT_THAT(Infer(OpKind::kResizeNearest, attrs, {Activation({1, 13, 13, 256})}),
              ElementsAre(Activation({1, 26, 26, 256})));
  const OpDef& def = GetOpDef(OpKind::kResizeNearest);
  EXPECT_EQ(def.op_class, OpClass::kDataMovement);
  EXPECT_TRUE(def.differentiable);
  EXPECT_FALSE(def.may_overwrite_inputs);
  // A copy: no FLOPs, 13·13·256·4 bytes read and 26·26·256·4 written.
  Graph graph;
  const ValueId x = graph.AddInput("x", Activation({1, 13, 13, 256}));
  absl::StatusOr<NodeId> node = graph.AddNode(OpKind::kResizeNearest, {x}, attrs, "up");
  ASSERT_TRUE(node.ok()) << node.status();
  const OpCost cost = NodeCost(graph, graph.node(*node));
  EXPECT_EQ(cost.flops, 0);
  EXPECT_EQ(cost.bytes_read, 173'056);
  EXPECT_EQ(cost.bytes_written, 692'224);
}

TEST(ResizeNearestTest, Errors) {
  const std::vector<TensorType> x{Activation({1, 13, 13, 256})};
  EXPECT_THAT(InferError(OpKind::kResizeNearest, {}, x), HasSubstr("missing attribute 'size'"));
  EXPECT_THAT(InferError(OpKind::kResizeNearest, {{"size", IntList{26, 0}}}, x),
              HasSubstr("attribute 'size' entries must be >= 1"));
  EXPECT_THAT(InferError(OpKind::kResizeNearest, {{"size", IntList{26}}}, x),
              HasSubstr("attribute 'size' must have 2 entries"));
  EXPECT_THAT(InferError(OpKind::kResizeNearest, {{"size", IntList{26, 26}}}, {F32({13, 13})}),
              HasSubstr("input 0 (x) must have rank 4"));
  EXPECT_THAT(InferError(OpKind::kResizeNearest, {{"size", IntList{26, 26}}},
                         {Activation({1, 0, 13, 256})}),
              HasSubstr("input 0 (x) has no pixels"));
}

// ---- resize_nearest_backward ----

TEST(ResizeNearestBackwardTest, GradientHasTheInputShape) {
  const AttrMap attrs{{"input_shape", IntList{1, 13, 13, 256}}};
  EXPECT_THAT(Infer(OpKind::kResizeNearestBackward, attrs, {Activation({1, 26, 26, 256})}),
              ElementsAre(Activation({1, 13, 13, 256})));
  EXPECT_FALSE(GetOpDef(OpKind::kResizeNearestBackward).differentiable);
  EXPECT_EQ(GetOpDef(OpKind::kResizeNearestBackward).op_class, OpClass::kDataMovement);
  // One add per dy element: 26·26·256.
  EXPECT_EQ(Cost(OpKind::kResizeNearestBackward, attrs, {Activation({1, 26, 26, 256})}).flops,
            173'056);
}

TEST(ResizeNearestBackwardTest, Errors) {
  EXPECT_THAT(InferError(OpKind::kResizeNearestBackward, {{"input_shape", IntList{2, 13, 13, 256}}},
                         {Activation({1, 26, 26, 256})}),
              HasSubstr("input 0 (dy) must have the batch and channels of input_shape "
                        "[2,13,13,256], got f32[1,26,26,256] nhwc"));
  EXPECT_THAT(InferError(OpKind::kResizeNearestBackward, {}, {Activation({1, 26, 26, 256})}),
              HasSubstr("missing attribute 'input_shape'"));
  EXPECT_THAT(InferError(OpKind::kResizeNearestBackward, {{"input_shape", IntList{13, 13, 256}}},
                         {Activation({1, 26, 26, 256})}),
              HasSubstr("attribute 'input_shape' must have 4 entries"));
}

}  // namespace
}  // namespace spillway::ir
