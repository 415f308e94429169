// Hand-computed cases for the spatial reference kernels (convolution,
// pooling, normalization, resize, softmax and losses, embedding), run in
// float. Every expected value is worked out in the comment beside it; the
// finite-difference checks of the op-test harness cover the rest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/reference/reference_kernels.h"
#include "ir/graph.h"
#include "support/check.h"

namespace spillway::backends::reference {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

using ir::AttrMap;
using ir::IntList;
using ir::OpKind;

// A graph input: its type and values (floats for f32, integers for i64/i32).
struct Input {
  ir::TensorType type;
  std::vector<float> floats;
  std::vector<int64_t> i64;
  std::vector<int32_t> i32;

  void* data() {
    if (type.dtype == ir::DType::kI64) return i64.data();
    if (type.dtype == ir::DType::kI32) return i32.data();
    return floats.data();
  }
};

Input Floats(ir::Shape shape, std::vector<float> values) {
  Input input;
  input.type = ir::F32(std::move(shape));
  input.floats = std::move(values);
  return input;
}
Input Nhwc(ir::Shape shape, std::vector<float> values) {
  Input input;
  input.type = ir::Activation(std::move(shape));
  input.floats = std::move(values);
  return input;
}
Input I64(ir::Shape shape, std::vector<int64_t> values) {
  Input input;
  input.type = ir::I64(std::move(shape));
  input.i64 = std::move(values);
  return input;
}
Input I32(ir::Shape shape, std::vector<int32_t> values) {
  Input input;
  input.type = {ir::DType::kI32, std::move(shape)};
  input.i32 = std::move(values);
  return input;
}

// One node of `op` over graph inputs, with a float buffer for each of its
// outputs, run through the reference kernels with T = float.
class OneNode {
 public:
  OneNode(OpKind op, std::vector<Input> inputs, AttrMap attrs) : inputs_(std::move(inputs)) {
    std::vector<ir::ValueId> ids;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      ids.push_back(graph_.AddInput("in" + std::to_string(i), inputs_[i].type));
    }
    absl::StatusOr<ir::NodeId> node = graph_.AddNode(op, ids, std::move(attrs), "n");
    SPILLWAY_CHECK(node.ok(), "the test builds a valid node");
    node_ = *node;
    for (ir::ValueId id : graph_.node(node_).outputs) {
      const ir::TensorType& type = graph_.value(id).type;
      output_types_.push_back(&type);
      outputs_.emplace_back(static_cast<size_t>(*ir::NumElements(type.shape)), -999.0f);
    }
  }

  const ir::Node& node() const { return graph_.node(node_); }
  const ir::TensorType& output_type(size_t i) const { return *output_types_[i]; }
  Input& input(size_t i) { return inputs_[i]; }
  std::vector<float>& output(size_t i) { return outputs_[i]; }

  std::vector<TensorRef> InputRefs() {
    std::vector<TensorRef> refs;
    for (Input& input : inputs_) refs.push_back({&input.type, input.data()});
    return refs;
  }
  std::vector<TensorRef> OutputRefs() {
    std::vector<TensorRef> refs;
    for (size_t i = 0; i < outputs_.size(); ++i)
      refs.push_back({output_types_[i], outputs_[i].data()});
    return refs;
  }

  // Runs the node with every output wanted.
  absl::Status Run() {
    const std::vector<TensorRef> in = InputRefs();
    const std::vector<TensorRef> out = OutputRefs();
    return RunReferenceKernel<float>({node(), in, out, {}});
  }

 private:
  ir::Graph graph_;
  ir::NodeId node_ = 0;
  std::vector<Input> inputs_;
  std::vector<const ir::TensorType*> output_types_;
  std::vector<std::vector<float>> outputs_;
};

// Runs a single-output node and returns its output.
std::vector<float> RunOne(OpKind op, std::vector<Input> inputs, AttrMap attrs = {}) {
  OneNode node(op, std::move(inputs), std::move(attrs));
  const absl::Status status = node.Run();
  EXPECT_TRUE(status.ok()) << status;
  return node.output(0);
}

auto Near(const std::vector<float>& expected) { return Pointwise(FloatNear(1e-5f), expected); }

// x = [1 2 3; 4 5 6; 7 8 9], one channel.
Input Ramp3x3() { return Nhwc({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}); }

// ---- conv2d ----

TEST(Conv2dTest, TwoByTwoKernelWithBias) {
  // w = [1 2; 3 4], b = 1: y[0,0] = 1*1 + 2*2 + 3*4 + 4*5 + 1 = 38,
  // y[0,1] = 2 + 6 + 15 + 24 + 1 = 48, y[1,0] = 4 + 10 + 21 + 32 + 1 = 68,
  // y[1,1] = 5 + 12 + 24 + 36 + 1 = 78.
  EXPECT_THAT(
      RunOne(OpKind::kConv2d, {Ramp3x3(), Floats({1, 2, 2, 1}, {1, 2, 3, 4}), Floats({1}, {1})}),
      ElementsAre(38, 48, 68, 78));
}

TEST(Conv2dTest, ThreeByThreeKernelWithPadding) {
  // All-ones 3x3 kernel, pads 1: each output sums its 3x3 neighbourhood that
  // lies inside x: corner 1+2+4+5 = 12, edge 1+2+3+4+5+6 = 21, centre 45.
  EXPECT_THAT(RunOne(OpKind::kConv2d, {Ramp3x3(), Floats({1, 3, 3, 1}, std::vector<float>(9, 1))},
                     {{"pads", IntList{1, 1, 1, 1}}}),
              ElementsAre(12, 21, 16, 27, 45, 33, 24, 39, 28));
}

TEST(Conv2dTest, StrideTwoKeepsEveryOtherOutput) {
  // The padded case above at stride 2: the four corners 12, 16, 24, 28.
  EXPECT_THAT(RunOne(OpKind::kConv2d, {Ramp3x3(), Floats({1, 3, 3, 1}, std::vector<float>(9, 1))},
                     {{"pads", IntList{1, 1, 1, 1}}, {"strides", IntList{2, 2}}}),
              ElementsAre(12, 16, 24, 28));
}

TEST(Conv2dTest, DilationSpreadsTheKernel) {
  // x = [1 2 3 4 5] (one row), w = [1 1] with dilation 2 along w:
  // y[j] = x[j] + x[j + 2] = 4, 6, 8.
  EXPECT_THAT(
      RunOne(OpKind::kConv2d, {Nhwc({1, 1, 5, 1}, {1, 2, 3, 4, 5}), Floats({1, 1, 2, 1}, {1, 1})},
             {{"dilations", IntList{1, 2}}}),
      ElementsAre(4, 6, 8));
}

TEST(Conv2dTest, GroupsSeeOnlyTheirChannels) {
  // Two groups of one channel: y = [10 * 1, 100 * 2].
  EXPECT_THAT(RunOne(OpKind::kConv2d, {Nhwc({1, 1, 1, 2}, {1, 2}), Floats({2, 1, 1, 1}, {10, 100})},
                     {{"groups", int64_t{2}}}),
              ElementsAre(10, 200));
}

TEST(Conv2dTest, BackwardDataSumsTheKernelTapsOverEachInput) {
  // dy = ones [1,2,2,1], w = [1 2; 3 4] over a 3x3 input: each input pixel
  // collects the taps that read it. Centre: 1+2+3+4 = 10; corners: one tap
  // each (1, 2, 3, 4); edges: two taps (1+2 = 3, 1+3 = 4, 2+4 = 6, 3+4 = 7).
  EXPECT_THAT(RunOne(OpKind::kConv2dBackwardData,
                     {Nhwc({1, 2, 2, 1}, {1, 1, 1, 1}), Floats({1, 2, 2, 1}, {1, 2, 3, 4})},
                     {{"input_shape", IntList{1, 3, 3, 1}}}),
              ElementsAre(1, 3, 2, 4, 10, 6, 3, 7, 4));
}

TEST(Conv2dTest, BackwardWeightCorrelatesDyWithX) {
  // dy = ones [1,2,2,1]: dw[kh,kw] sums the 2x2 block of x at offset (kh,kw):
  // 1+2+4+5 = 12, 2+3+5+6 = 16, 4+5+7+8 = 24, 5+6+8+9 = 28.
  EXPECT_THAT(RunOne(OpKind::kConv2dBackwardWeight, {Nhwc({1, 2, 2, 1}, {1, 1, 1, 1}), Ramp3x3()},
                     {{"kernel", IntList{2, 2}}}),
              ElementsAre(12, 16, 24, 28));
}

// ---- pooling ----

TEST(MaxPoolTest, PaddingNeverWins) {
  // x = -[1..9] as 3x3, kernel 2, stride 2, pads 1: the windows hold {-1},
  // {-2,-3}, {-4,-7} and {-5,-6,-8,-9}. A zero pad would win every max.
  EXPECT_THAT(RunOne(OpKind::kMaxPool, {Nhwc({1, 3, 3, 1}, {-1, -2, -3, -4, -5, -6, -7, -8, -9})},
                     {{"kernel", IntList{2, 2}}, {"pads", IntList{1, 1, 1, 1}}}),
              ElementsAre(-1, -2, -4, -5));
}

TEST(MaxPoolTest, BackwardGivesTiesToTheFirstMaximum) {
  // All four inputs equal: the first in window order takes the whole dy.
  EXPECT_THAT(
      RunOne(OpKind::kMaxPoolBackward, {Nhwc({1, 1, 1, 1}, {5}), Nhwc({1, 2, 2, 1}, {3, 3, 3, 3})},
             {{"kernel", IntList{2, 2}}}),
      ElementsAre(5, 0, 0, 0));
}

TEST(MaxPoolTest, BackwardAddsOverlappingWindows) {
  // x = [1 5 2], kernel 1x2, stride 1: both windows pick the 5, which gets 1 + 10.
  EXPECT_THAT(
      RunOne(OpKind::kMaxPoolBackward, {Nhwc({1, 1, 2, 1}, {1, 10}), Nhwc({1, 1, 3, 1}, {1, 5, 2})},
             {{"kernel", IntList{1, 2}}, {"strides", IntList{1, 1}}}),
      ElementsAre(0, 11, 0));
}

// x = [1 2; 3 4], kernel 2, stride 1, pads top and left 1: the windows hold
// {1}, {1,2}, {1,3} and {1,2,3,4}.
AttrMap PaddedAvgPool(bool count_include_pad) {
  return {{"kernel", IntList{2, 2}},
          {"strides", IntList{1, 1}},
          {"pads", IntList{1, 1, 0, 0}},
          {"count_include_pad", count_include_pad}};
}

TEST(AvgPoolTest, PaddingCountsOnlyWhenAsked) {
  // Real inputs only: 1/1, 3/2, 4/2, 10/4.
  EXPECT_THAT(RunOne(OpKind::kAvgPool, {Nhwc({1, 2, 2, 1}, {1, 2, 3, 4})}, PaddedAvgPool(false)),
              ElementsAre(1, 1.5, 2, 2.5));
  // Whole kernel: 1/4, 3/4, 4/4, 10/4.
  EXPECT_THAT(RunOne(OpKind::kAvgPool, {Nhwc({1, 2, 2, 1}, {1, 2, 3, 4})}, PaddedAvgPool(true)),
              ElementsAre(0.25, 0.75, 1, 2.5));
}

TEST(AvgPoolTest, BackwardSharesDyByTheSameCount) {
  // dy = ones. x[0,0] is in all four windows: 1/1 + 1/2 + 1/2 + 1/4 = 2.25;
  // x[0,1] and x[1,0] in two: 1/2 + 1/4 = 0.75; x[1,1] in the last: 1/4.
  AttrMap attrs = PaddedAvgPool(false);
  attrs.Set("input_shape", IntList{1, 2, 2, 1});
  EXPECT_THAT(RunOne(OpKind::kAvgPoolBackward, {Nhwc({1, 2, 2, 1}, {1, 1, 1, 1})}, attrs),
              ElementsAre(2.25, 0.75, 0.75, 0.25));
}

TEST(GlobalAvgPoolTest, AveragesEachChannel) {
  // Channel 0 holds 1, 2, 3, 4 (mean 2.5); channel 1 holds 10, 20, 30, 40 (mean 25).
  EXPECT_THAT(RunOne(OpKind::kGlobalAvgPool, {Nhwc({1, 2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40})}),
              ElementsAre(2.5, 25));
  // Backward: dy = [4, 8] spread over 4 pixels: 1 and 2 everywhere.
  EXPECT_THAT(RunOne(OpKind::kGlobalAvgPoolBackward, {Nhwc({1, 1, 1, 2}, {4, 8})},
                     {{"input_shape", IntList{1, 2, 2, 2}}}),
              ElementsAre(1, 2, 1, 2, 1, 2, 1, 2));
}

// ---- batch_norm ----

// x [4, 2]: channel 0 = {2, 2, 4, 4} (mean 3, biased variance 1), channel 1 =
// {-5, -1, 1, 5} (mean 0, biased variance (25 + 1 + 1 + 25) / 4 = 13). With
// epsilon 3 the inverse deviations are 1/sqrt(4) = 0.5 and 1/sqrt(16) = 0.25.
std::vector<Input> BatchNormInputs() {
  return {Floats({4, 2}, {2, -5, 2, -1, 4, 1, 4, 5}), Floats({2}, {2, 1}), Floats({2}, {0.5, -1}),
          Floats({2}, {1, 2}), Floats({2}, {1, 1})};
}

AttrMap BatchNormAttrs(bool training) {
  return {{"training", training}, {"epsilon", 3.0}, {"momentum", 0.5}};
}

TEST(BatchNormTest, TrainingNormalizesWithBatchStatistics) {
  OneNode bn(OpKind::kBatchNorm, BatchNormInputs(), BatchNormAttrs(true));
  // The running statistics are updated in place, as a runtime hands them over.
  std::vector<TensorRef> in = bn.InputRefs();
  std::vector<TensorRef> out = bn.OutputRefs();
  out.at(3).data = in.at(3).data;
  out.at(4).data = in.at(4).data;
  ASSERT_TRUE(RunReferenceKernel<float>({bn.node(), in, out, {}}).ok());
  // y = (x - mean) * inv_std * gamma + beta: channel 0 (x - 3) * 0.5 * 2 + 0.5,
  // channel 1 x * 0.25 - 1.
  EXPECT_THAT(bn.output(0), Near({-0.5, -2.25, -0.5, -1.25, 1.5, -0.75, 1.5, 0.25}));
  EXPECT_THAT(bn.output(1), ElementsAre(3, 0));       // saved_mean
  EXPECT_THAT(bn.output(2), ElementsAre(0.5, 0.25));  // saved_inv_std
  // running_mean = 0.5 * [1, 2] + 0.5 * [3, 0] = [2, 1]. running_var takes the
  // unbiased variances 4/3 and 52/3: 0.5 * 1 + 0.5 * 4/3 = 7/6 and
  // 0.5 * 1 + 0.5 * 52/3 = 55/6.
  EXPECT_THAT(bn.input(3).floats, ElementsAre(2, 1));
  EXPECT_THAT(bn.input(4).floats, Near({7.0f / 6, 55.0f / 6}));
}

TEST(BatchNormTest, InferenceNormalizesWithRunningStatistics) {
  // running_mean [1, 2], running_var [1, 1], epsilon 3: inv_std 0.5 for both.
  // Channel 0: (x - 1) * 0.5 * 2 + 0.5 = x - 0.5; channel 1: (x - 2) * 0.5 - 1.
  OneNode bn(OpKind::kBatchNorm, BatchNormInputs(), BatchNormAttrs(false));
  ASSERT_TRUE(bn.Run().ok());
  EXPECT_THAT(bn.output(0), Near({1.5, -4.5, 1.5, -2.5, 3.5, -1.5, 3.5, 0.5}));
}

TEST(BatchNormTest, RecomputationFromSavedStatisticsIsBitwiseEqual) {
  // Values that round in float, so that a different expression would show.
  std::vector<float> x(3 * 5 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.1f;
  OneNode bn(OpKind::kBatchNorm,
             {Floats({3, 5, 4}, x), Floats({4}, {0.3f, -1.7f, 2.9f, 1.1f}),
              Floats({4}, {0.1f, 0.2f, -0.3f, 0.7f}), Floats({4}, {0, 0, 0, 0}),
              Floats({4}, {1, 1, 1, 1})},
             {{"epsilon", 1e-3}});
  ASSERT_TRUE(bn.Run().ok());

  // The recomputation: saved_mean and saved_inv_std as inputs 5 and 6, no
  // running statistics, and only y wanted.
  std::vector<TensorRef> in = bn.InputRefs();
  in.at(3).data = nullptr;
  in.at(4).data = nullptr;
  in.push_back({&bn.output_type(1), bn.output(1).data()});
  in.push_back({&bn.output_type(2), bn.output(2).data()});
  std::vector<float> y(x.size(), -999.0f);
  std::vector<TensorRef> out = bn.OutputRefs();
  for (TensorRef& ref : out) ref.data = nullptr;
  out.at(0).data = y.data();
  ASSERT_TRUE(RunReferenceKernel<float>({bn.node(), in, out, {}}).ok());
  EXPECT_THAT(y, ElementsAreArray(bn.output(0)));  // exact float equality
}

TEST(BatchNormTest, TrainingBackwardRemovesTheMeanAndTheProjection) {
  // One channel: x = {2, 2, 4, 4}, mean 3, inv_std 0.5, so x_hat = {-0.5, -0.5,
  // 0.5, 0.5}; gamma 2 and dy = {1, 0, 0, 0}. dbeta = sum(dy) = 1,
  // dgamma = sum(dy * x_hat) = -0.5, and
  // dx = gamma * inv_std * (dy - dbeta/4 - x_hat * dgamma/4) = dy - 0.25 + x_hat/8
  //    = {0.6875, -0.3125, -0.1875, -0.1875}.
  OneNode backward(OpKind::kBatchNormBackward,
                   {Floats({4, 1}, {1, 0, 0, 0}), Floats({4, 1}, {2, 2, 4, 4}), Floats({1}, {2}),
                    Floats({1}, {3}), Floats({1}, {0.5})},
                   {{"training", true}, {"epsilon", 3.0}});
  ASSERT_TRUE(backward.Run().ok());
  EXPECT_THAT(backward.output(0), Near({0.6875, -0.3125, -0.1875, -0.1875}));
  EXPECT_THAT(backward.output(1), ElementsAre(-0.5));
  EXPECT_THAT(backward.output(2), ElementsAre(1));
}

TEST(BatchNormTest, InferenceBackwardScalesDy) {
  // Input 4 is running_var = 1: inv_std = 1/sqrt(1 + 3) = 0.5, and with gamma 2
  // dx = dy. x_hat = (x - 3) * 0.5 = {-0.5, -0.5, 0.5, 0.5}, dy = {1, 2, 3, 4}:
  // dgamma = -0.5 - 1 + 1.5 + 2 = 2, dbeta = 10.
  OneNode backward(OpKind::kBatchNormBackward,
                   {Floats({4, 1}, {1, 2, 3, 4}), Floats({4, 1}, {2, 2, 4, 4}), Floats({1}, {2}),
                    Floats({1}, {3}), Floats({1}, {1})},
                   {{"training", false}, {"epsilon", 3.0}});
  ASSERT_TRUE(backward.Run().ok());
  EXPECT_THAT(backward.output(0), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(backward.output(1), ElementsAre(2));
  EXPECT_THAT(backward.output(2), ElementsAre(10));
}

TEST(BatchNormTest, TrainingNeedsTwoValuesPerChannel) {
  OneNode bn(OpKind::kBatchNorm,
             {Floats({1, 2}, {1, 2}), Floats({2}, {1, 1}), Floats({2}, {0, 0}), Floats({2}, {0, 0}),
              Floats({2}, {1, 1})},
             {});
  const absl::Status status = bn.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("n (batch_norm)"));
}

// ---- layer_norm ----

TEST(LayerNormTest, NormalizesEachRow) {
  // Rows [1, 3] (mean 2) and [11, 9] (mean 10), both of variance 1; epsilon 3
  // gives rstd 0.5, so x_hat = [-0.5, 0.5] and [0.5, -0.5]. gamma [1, 2],
  // beta [0, 1]: row 0 = [-0.5, 0.5*2 + 1], row 1 = [0.5, -0.5*2 + 1].
  OneNode ln(OpKind::kLayerNorm,
             {Floats({2, 2}, {1, 3, 11, 9}), Floats({2}, {1, 2}), Floats({2}, {0, 1})},
             {{"epsilon", 3.0}});
  ASSERT_TRUE(ln.Run().ok());
  EXPECT_THAT(ln.output(0), ElementsAre(-0.5, 2, 0.5, 0));
  EXPECT_THAT(ln.output(1), ElementsAre(2, 10));
  EXPECT_THAT(ln.output(2), ElementsAre(0.5, 0.5));
}

TEST(LayerNormTest, BackwardOfOneRow) {
  // x = [1, 3], mean 2, rstd 0.5: x_hat = [-0.5, 0.5]. gamma [1, 2], dy = [1, 0]:
  // g = dy * gamma = [1, 0], mean(g) = 0.5, mean(g * x_hat) = -0.25,
  // dx = 0.5 * (g - 0.5 + x_hat * 0.25) = 0.5 * [0.375, -0.375].
  // dgamma = dy * x_hat = [-0.5, 0], dbeta = dy = [1, 0].
  OneNode backward(OpKind::kLayerNormBackward,
                   {Floats({1, 2}, {1, 0}), Floats({1, 2}, {1, 3}), Floats({2}, {1, 2}),
                    Floats({1}, {2}), Floats({1}, {0.5})},
                   {});
  ASSERT_TRUE(backward.Run().ok());
  EXPECT_THAT(backward.output(0), Near({0.1875, -0.1875}));
  EXPECT_THAT(backward.output(1), ElementsAre(-0.5, 0));
  EXPECT_THAT(backward.output(2), ElementsAre(1, 0));
}

// ---- resize_bilinear ----

TEST(ResizeBilinearTest, AlignCornersKeepsCornersAndHalvesBetween) {
  // [1 2; 3 4] to 3x3 with align_corners: source steps of 0.5.
  EXPECT_THAT(RunOne(OpKind::kResizeBilinear, {Nhwc({1, 2, 2, 1}, {1, 2, 3, 4})},
                     {{"size", IntList{3, 3}}, {"align_corners", true}}),
              ElementsAre(1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4));
}

TEST(ResizeBilinearTest, HalfPixelCentresClampAtTheBorder) {
  // [1 2; 3 4] to 4x4 without align_corners: src = (dst + 0.5) / 2 - 0.5 =
  // -0.25 (clamped to 0), 0.25, 0.75, 1.25 (the last pixel twice). Along a row
  // [a, b] -> [a, 0.75a + 0.25b, 0.25a + 0.75b, b]; the same down the columns.
  EXPECT_THAT(RunOne(OpKind::kResizeBilinear, {Nhwc({1, 2, 2, 1}, {1, 2, 3, 4})},
                     {{"size", IntList{4, 4}}}),
              ElementsAre(1, 1.25, 1.75, 2,      //
                          1.5, 1.75, 2.25, 2.5,  //
                          2.5, 2.75, 3.25, 3.5,  //
                          3, 3.25, 3.75, 4));
}

TEST(ResizeBilinearTest, BackwardScattersWithTheForwardWeights) {
  // 2x2 -> 3x3 with align_corners, dy = ones. Along an axis the outputs read
  // input 0 with weights 1, 0.5, 0 and input 1 with 0, 0.5, 1 (sums 1.5), so
  // every input pixel gets 1.5 * 1.5 = 2.25.
  EXPECT_THAT(
      RunOne(OpKind::kResizeBilinearBackward, {Nhwc({1, 3, 3, 1}, std::vector<float>(9, 1))},
             {{"input_shape", IntList{1, 2, 2, 1}}, {"align_corners", true}}),
      ElementsAre(2.25, 2.25, 2.25, 2.25));
}

// ---- resize_nearest ----

TEST(ResizeNearestTest, UpsamplingRepeatsPixels) {
  // [1 2; 3 4] to 4x4: source index floor(dst / 2) on both axes.
  EXPECT_THAT(
      RunOne(OpKind::kResizeNearest, {Nhwc({1, 2, 2, 1}, {1, 2, 3, 4})}, {{"size", IntList{4, 4}}}),
      ElementsAre(1, 1, 2, 2,  //
                  1, 1, 2, 2,  //
                  3, 3, 4, 4,  //
                  3, 3, 4, 4));
}

TEST(ResizeNearestTest, UnevenFactorsFloorTheSourceIndex) {
  // Rows 3 -> 2: floor(dst·3/2) = 0, 1. Columns 2 -> 3: floor(dst·2/3) = 0, 0, 1.
  // Two channels, pixel (h, w) holding [10h + w, -(10h + w)].
  EXPECT_THAT(RunOne(OpKind::kResizeNearest,
                     {Nhwc({1, 3, 2, 2}, {0, 0, 1, -1, 10, -10, 11, -11, 20, -20, 21, -21})},
                     {{"size", IntList{2, 3}}}),
              ElementsAre(0, 0, 0, 0, 1, -1,  //
                          10, -10, 10, -10, 11, -11));
}

TEST(ResizeNearestTest, BackwardSumsIntoTheSourcePixel) {
  // 2x3 -> 3x2 (the case above backwards): rows read 0, 0, 1 and columns 0, 1
  // (floor(dst·2/3), floor(dst·3/2)). dy[oh][ow] = 1 + 2·oh + ow, so
  // dx[0][0] = 1 + 3, dx[0][1] = 2 + 4, dx[1][0] = 5, dx[1][1] = 6, and the
  // third column, which no output reads, is zero.
  EXPECT_THAT(RunOne(OpKind::kResizeNearestBackward, {Nhwc({1, 3, 2, 1}, {1, 2, 3, 4, 5, 6})},
                     {{"input_shape", IntList{1, 2, 3, 1}}}),
              ElementsAre(4, 6, 0, 5, 6, 0));
}

// ---- softmax, log_softmax ----

TEST(SoftmaxTest, ExponentialsOverTheirSum) {
  // exp(log 1, log 2, log 5) = 1, 2, 5, summing to 8.
  EXPECT_THAT(RunOne(OpKind::kSoftmax, {Floats({1, 3}, {0, std::log(2.0f), std::log(5.0f)})}),
              Near({0.125, 0.25, 0.625}));
}

TEST(SoftmaxTest, CausalMaskHidesLaterKeys) {
  // [Q, K] = [2, 3]: query q sees keys j <= q + 1, so row 0 splits over two keys.
  EXPECT_THAT(
      RunOne(OpKind::kSoftmax, {Floats({2, 3}, std::vector<float>(6, 0))}, {{"causal", true}}),
      Near({0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3}));
  // [Q, K] = [3, 2]: query 0 sees j <= -1, nothing, and gets zeros.
  EXPECT_THAT(
      RunOne(OpKind::kSoftmax, {Floats({3, 2}, std::vector<float>(6, 0))}, {{"causal", true}}),
      Near({0, 0, 1, 0, 0.5, 0.5}));
}

TEST(SoftmaxTest, AlongAnInnerAxis) {
  // axis 0 of [2, 2]: columns [0, log 3] -> [0.25, 0.75].
  EXPECT_THAT(RunOne(OpKind::kSoftmax, {Floats({2, 2}, {0, std::log(3.0f), std::log(3.0f), 0})},
                     {{"axis", int64_t{0}}}),
              Near({0.25, 0.75, 0.75, 0.25}));
}

TEST(SoftmaxTest, BackwardSubtractsTheWeightedMean) {
  // y = [0.25, 0.75], dy = [1, 0]: sum(dy * y) = 0.25, dx = y * (dy - 0.25) =
  // [0.25 * 0.75, 0.75 * -0.25].
  EXPECT_THAT(
      RunOne(OpKind::kSoftmaxBackward, {Floats({1, 2}, {1, 0}), Floats({1, 2}, {0.25, 0.75})}),
      Near({0.1875, -0.1875}));
}

TEST(LogSoftmaxTest, ForwardAndBackward) {
  // [0, log 3]: log(1/4), log(3/4).
  EXPECT_THAT(RunOne(OpKind::kLogSoftmax, {Floats({1, 2}, {0, std::log(3.0f)})}),
              Near({std::log(0.25f), std::log(0.75f)}));
  // dx = dy - exp(y) * sum(dy): dy = [1, 1], exp(y) = [0.25, 0.75] -> [0.5, -0.5].
  EXPECT_THAT(RunOne(OpKind::kLogSoftmaxBackward,
                     {Floats({1, 2}, {1, 1}), Floats({1, 2}, {std::log(0.25f), std::log(0.75f)})}),
              Near({0.5, -0.5}));
}

// ---- cross_entropy_loss ----

// Rows [0, log 3] (label 1), [0, 0] (ignored) and [log 3, 0] (label 1).
// Softmax of the kept rows: [1/4, 3/4] and [3/4, 1/4]; their losses are
// -log(3/4) and -log(1/4).
Input CrossEntropyLogits() { return Floats({3, 2}, {0, std::log(3.0f), 0, 0, std::log(3.0f), 0}); }

TEST(CrossEntropyLossTest, MeanSkipsIgnoredLabels) {
  EXPECT_THAT(RunOne(OpKind::kCrossEntropyLoss, {CrossEntropyLogits(), I64({3}, {1, -100, 1})}),
              Near({(std::log(4.0f / 3) + std::log(4.0f)) / 2}));
  EXPECT_THAT(RunOne(OpKind::kCrossEntropyLoss, {CrossEntropyLogits(), I32({3}, {1, 7, 1})},
                     {{"ignore_index", int64_t{7}}, {"reduction", std::string("none")}}),
              Near({std::log(4.0f / 3), 0, std::log(4.0f)}));
}

TEST(CrossEntropyLossTest, BackwardIsSoftmaxMinusOneHotOverTheCount) {
  // dloss = 1 over 2 kept rows: row 0 (softmax - onehot(1)) / 2 =
  // [0.25, -0.25] / 2, row 1 zero, row 2 [0.75, -0.75] / 2.
  EXPECT_THAT(RunOne(OpKind::kCrossEntropyLossBackward,
                     {Floats({}, {1}), CrossEntropyLogits(), I64({3}, {1, -100, 1})}),
              Near({0.125, -0.125, 0, 0, 0.375, -0.375}));
}

TEST(CrossEntropyLossTest, LabelOutOfRangeIsAnError) {
  OneNode loss(OpKind::kCrossEntropyLoss, {CrossEntropyLogits(), I64({3}, {1, 2, 0})}, {});
  const absl::Status status = loss.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("n (cross_entropy_loss): label 2 at position 1"));
}

// ---- embedding ----

TEST(EmbeddingTest, GathersRowsAndScattersTheirGradients) {
  const Input table = Floats({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(RunOne(OpKind::kEmbedding, {table, I64({3}, {2, 0, 2})}),
              ElementsAre(5, 6, 1, 2, 5, 6));
  // Row 2 is used twice: its gradient is 1 + 3; row 1 is not used.
  EXPECT_THAT(
      RunOne(OpKind::kEmbeddingBackward, {Floats({3, 2}, {1, 1, 2, 2, 3, 3}), I32({3}, {2, 0, 2})},
             {{"num_embeddings", int64_t{3}}}),
      ElementsAre(2, 2, 0, 0, 4, 4));
}

TEST(EmbeddingTest, IndexOutsideTheTableIsAnError) {
  OneNode embedding(OpKind::kEmbedding, {Floats({3, 2}, {1, 2, 3, 4, 5, 6}), I64({1}, {3})}, {});
  const absl::Status status = embedding.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("n (embedding): index 3"));
}

}  // namespace
}  // namespace spillway::backends::reference
