// The roofline cost model on graphs small enough to time by hand.
#include "analysis/cost_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::analysis {
namespace {

using ::testing::DoubleEq;
using ::testing::DoubleNear;
using ::testing::ElementsAre;

// Round rates so the arithmetic in the comments is easy to follow:
// convolutions at 1 TFLOP/s fp32 (0.5 sustained), 100 GB/s of memory (80
// sustained), no launch overhead unless a test adds it.
HardwareProfile TestGpu() {
  return {
      .name = "test-gpu",
      .description = "",
      .device_memory_bytes = int64_t{1} << 30,
      .reserved_bytes = 0,
      .fp32_flops = 1e12,
      .tf32_flops = 8e12,
      .fp16_flops = 16e12,
      .compute_efficiency = 0.5,
      .memory_bandwidth = 100e9,
      .memory_efficiency = 0.8,
      .launch_overhead_s = 0,
      .d2h_bandwidth = 20e9,
      .h2d_bandwidth = 25e9,
      .d2h_latency_s = 12e-6,
      .h2d_latency_s = 10e-6,
      .copy_engines = 2,
  };
}

// x: f32[1,8,8,16] NHWC -> conv (32 filters 3x3, pad 1) -> relu.
struct ConvRelu {
  ir::Graph graph;
  ir::NodeId conv = ir::kNoNode;
  ir::NodeId relu = ir::kNoNode;
};

ConvRelu BuildConvRelu() {
  ConvRelu net;
  const ir::ValueId x = net.graph.AddInput("x", ir::Activation({1, 8, 8, 16}));
  const ir::ValueId w = net.graph.AddInput("w", ir::F32({32, 3, 3, 16}), ir::ValueKind::kParameter);
  absl::StatusOr<ir::NodeId> conv =
      net.graph.AddNode(ir::OpKind::kConv2d, {x, w}, {{"pads", ir::IntList{1, 1, 1, 1}}}, "conv");
  SPILLWAY_CHECK(conv.ok(), "conv");
  net.conv = *conv;
  const ir::ValueId y = net.graph.node(net.conv).outputs[0];
  absl::StatusOr<ir::NodeId> relu = net.graph.AddNode(ir::OpKind::kRelu, {y}, {}, "relu");
  SPILLWAY_CHECK(relu.ok(), "relu");
  net.relu = *relu;
  return net;
}

// The numbers every test below starts from.
//   conv: 8*8*32 outputs * 3*3*16 MACs = 294,912 MACs = 589,824 FLOPs;
//         reads x (1,024 floats, 4 KiB) and w (4,608 floats, 18 KiB), writes
//         y (2,048 floats, 8 KiB): 30,720 bytes.
//   relu: 2,048 FLOPs (one per element); reads and writes y, 8 KiB each: 16,384 bytes.
TEST(RooflineCostModelTest, HandCountedCosts) {
  const ConvRelu net = BuildConvRelu();
  const ir::OpCost conv = ir::NodeCost(net.graph, net.graph.node(net.conv));
  EXPECT_EQ(conv.flops, 589'824);
  EXPECT_EQ(conv.bytes_read + conv.bytes_written, 30'720);
  const ir::OpCost relu = ir::NodeCost(net.graph, net.graph.node(net.relu));
  EXPECT_EQ(relu.flops, 2'048);
  EXPECT_EQ(relu.bytes_read + relu.bytes_written, 16'384);
}

TEST(RooflineCostModelTest, ConvolutionIsComputeBoundAndReluMemoryBound) {
  const ConvRelu net = BuildConvRelu();
  const RooflineCostModel model(TestGpu());
  // conv: 589,824 FLOPs / 0.5e12 = 1.179648 us, against 30,720 B / 80e9 = 0.384 us.
  EXPECT_DOUBLE_EQ(model.NodeSeconds(net.graph, net.graph.node(net.conv)), 1.179648e-6);
  // relu: 16,384 B / 80e9 = 0.2048 us, against 2,048 FLOPs / 0.5e12 = 0.004096 us.
  EXPECT_DOUBLE_EQ(model.NodeSeconds(net.graph, net.graph.node(net.relu)), 0.2048e-6);
}

TEST(RooflineCostModelTest, SlowMemoryMakesTheConvolutionMemoryBound) {
  const ConvRelu net = BuildConvRelu();
  HardwareProfile slow = TestGpu();
  slow.memory_bandwidth = 10e9;  // 8e9 sustained
  const RooflineCostModel model(slow);
  // 30,720 B / 8e9 = 3.84 us now exceeds the 1.179648 us of arithmetic.
  EXPECT_DOUBLE_EQ(model.NodeSeconds(net.graph, net.graph.node(net.conv)), 3.84e-6);
}

TEST(RooflineCostModelTest, LaunchOverheadIsAddedToEveryNode) {
  const ConvRelu net = BuildConvRelu();
  HardwareProfile profile = TestGpu();
  profile.launch_overhead_s = 5e-6;
  const RooflineCostModel model(profile);
  EXPECT_DOUBLE_EQ(model.NodeSeconds(net.graph, net.graph.node(net.conv)), 5e-6 + 1.179648e-6);
  EXPECT_DOUBLE_EQ(model.NodeSeconds(net.graph, net.graph.node(net.relu)), 5e-6 + 0.2048e-6);
}

TEST(RooflineCostModelTest, MathModeSetsTheConvolutionRateAndFp16HalvesTheTraffic) {
  const ConvRelu net = BuildConvRelu();
  const RooflineCostModel tf32(TestGpu(), {.math_mode = MathMode::kTf32});
  const RooflineCostModel fp16(TestGpu(), {.math_mode = MathMode::kFp16});
  // 589,824 FLOPs / (8e12 * 0.5) = 0.147456 us, below the 0.384 us of memory
  // traffic: in tf32 the convolution turns memory-bound. fp16 is mixed
  // precision: 2 bytes a value, 0.192 us, still above 589,824 / (16e12 * 0.5)
  // = 0.073728 us.
  EXPECT_DOUBLE_EQ(tf32.NodeSeconds(net.graph, net.graph.node(net.conv)), 0.384e-6);
  EXPECT_DOUBLE_EQ(fp16.NodeSeconds(net.graph, net.graph.node(net.conv)), 0.192e-6);
  // With memory 100x faster the tensor-core rates show.
  HardwareProfile fast_memory = TestGpu();
  fast_memory.memory_bandwidth = 10e12;
  const RooflineCostModel tf32_fast(fast_memory, {.math_mode = MathMode::kTf32});
  const RooflineCostModel fp16_fast(fast_memory, {.math_mode = MathMode::kFp16});
  EXPECT_DOUBLE_EQ(tf32_fast.NodeSeconds(net.graph, net.graph.node(net.conv)), 0.147456e-6);
  EXPECT_DOUBLE_EQ(fp16_fast.NodeSeconds(net.graph, net.graph.node(net.conv)), 0.073728e-6);
  // The relu is memory-bound in every mode: 0.2048 us, half that in fp16.
  EXPECT_DOUBLE_EQ(tf32.NodeSeconds(net.graph, net.graph.node(net.relu)), 0.2048e-6);
  EXPECT_DOUBLE_EQ(fp16.NodeSeconds(net.graph, net.graph.node(net.relu)), 0.1024e-6);
}

TEST(RooflineCostModelTest, EachTensorCoreModeHasItsOwnEfficiency) {
  const ConvRelu net = BuildConvRelu();
  HardwareProfile profile = TestGpu();
  profile.memory_bandwidth = 10e12;  // compute-bound, so the rates show
  profile.tf32_efficiency = 0.25;
  profile.fp16_efficiency = 0.75;
  const RooflineCostModel fp32(profile, {.math_mode = MathMode::kFp32});
  const RooflineCostModel tf32(profile, {.math_mode = MathMode::kTf32});
  const RooflineCostModel fp16(profile, {.math_mode = MathMode::kFp16});
  const ir::Node& conv = net.graph.node(net.conv);
  // 589,824 FLOPs / (1e12 * 0.5), / (8e12 * 0.25), / (16e12 * 0.75).
  EXPECT_DOUBLE_EQ(fp32.NodeSeconds(net.graph, conv), 589'824 / (1e12 * 0.5));
  EXPECT_DOUBLE_EQ(tf32.NodeSeconds(net.graph, conv), 589'824 / (8e12 * 0.25));
  EXPECT_DOUBLE_EQ(fp16.NodeSeconds(net.graph, conv), 589'824 / (16e12 * 0.75));
}

TEST(RooflineCostModelTest, ElementwiseArithmeticCountsAtTheFp32Rate) {
  const ConvRelu net = BuildConvRelu();
  // A part with slow CUDA cores and fast tensor cores: fp32 1 GFLOP/s (0.5
  // sustained), fp16 16 TFLOP/s. The relu's 2,048 FLOPs take 4.096 us at the
  // fp32 rate, more than its 0.2048 us of memory traffic, even in fp16 mode.
  HardwareProfile profile = TestGpu();
  profile.fp32_flops = 1e9;
  const RooflineCostModel fp16(profile, {.math_mode = MathMode::kFp16});
  EXPECT_DOUBLE_EQ(fp16.NodeSeconds(net.graph, net.graph.node(net.relu)), 4.096e-6);
}

TEST(RooflineCostModelTest, ModeThePartLacksFallsBackToFp32) {
  const ConvRelu net = BuildConvRelu();
  absl::StatusOr<HardwareProfile> v100 = LoadHardwareProfile("v100-16g-nvlink2");
  ASSERT_TRUE(v100.ok()) << StatusMessage(v100.status());
  ASSERT_EQ(v100->tf32_flops, 0);
  const RooflineCostModel fp32(*v100, {.math_mode = MathMode::kFp32});
  const RooflineCostModel tf32(*v100, {.math_mode = MathMode::kTf32});
  const RooflineCostModel fp16(*v100, {.math_mode = MathMode::kFp16});
  const ir::Node& conv = net.graph.node(net.conv);
  // fp32: 5 us launch + max(589,824 / (15.7e12 * 0.809) = 46.4 ns,
  //                         30,720 / (900e9 * 0.8) = 42.7 ns).
  EXPECT_THAT(fp32.NodeSeconds(net.graph, conv),
              DoubleNear(5e-6 + 589'824 / (15.7e12 * 0.809), 1e-15));
  EXPECT_DOUBLE_EQ(tf32.NodeSeconds(net.graph, conv), fp32.NodeSeconds(net.graph, conv));
  // fp16's tensor cores make it memory-bound, at 2 bytes a value: 5 us + 21.3 ns.
  EXPECT_THAT(fp16.NodeSeconds(net.graph, conv),
              DoubleNear(5e-6 + 0.5 * 30'720 / (900e9 * 0.8), 1e-15));
}

TEST(RooflineCostModelTest, CopyIsLatencyPlusBytesOverBandwidth) {
  const RooflineCostModel model(TestGpu());
  // 1 MiB = 1,048,576 B. To the device: 10 us + 1,048,576 / 25e9 = 10 + 41.94304 us.
  EXPECT_DOUBLE_EQ(model.CopySeconds(1 << 20, CopyDirection::kHostToDevice), 51.94304e-6);
  // To the host: 12 us + 1,048,576 / 20e9 = 12 + 52.4288 us.
  EXPECT_DOUBLE_EQ(model.CopySeconds(1 << 20, CopyDirection::kDeviceToHost), 64.4288e-6);
  EXPECT_DOUBLE_EQ(model.CopySeconds(0, CopyDirection::kDeviceToHost), 12e-6);
}

TEST(RooflineCostModelTest, NodeTimesIsIndexedByNodeId) {
  const ConvRelu net = BuildConvRelu();
  const RooflineCostModel model(TestGpu());
  EXPECT_THAT(NodeTimes(model, net.graph), ElementsAre(DoubleEq(1.179648e-6), DoubleEq(0.2048e-6)));
}

TEST(RooflineCostModelDeathTest, RejectsAnInvalidProfile) {
  HardwareProfile broken = TestGpu();
  broken.memory_bandwidth = 0;
  EXPECT_DEATH(RooflineCostModel{broken}, "memory_bandwidth");
}

TEST(TabulatedCostModelTest, NodesTakeTheirGivenTimesAndCopiesTheLinks) {
  const ConvRelu net = BuildConvRelu();
  const TabulatedCostModel model({0.25, 0.5}, std::make_unique<RooflineCostModel>(TestGpu()));
  EXPECT_THAT(NodeTimes(model, net.graph), ElementsAre(0.25, 0.5));
  // 20 GB/s down, 12 us latency: 1 MB takes 50 us + 12 us.
  EXPECT_THAT(model.CopySeconds(1'000'000, CopyDirection::kDeviceToHost), DoubleNear(62e-6, 1e-12));
}

TEST(TabulatedCostModelTest, RefusesNegativeTimesAndMissingNodes) {
  EXPECT_DEATH(TabulatedCostModel({-1.0}, std::make_unique<RooflineCostModel>(TestGpu())),
               "finite");
  const ConvRelu net = BuildConvRelu();
  const TabulatedCostModel short_table({0.25}, std::make_unique<RooflineCostModel>(TestGpu()));
  EXPECT_DEATH(short_table.NodeSeconds(net.graph, net.graph.node(net.relu)), "every node");
}

}  // namespace
}  // namespace spillway::analysis
