#include "analysis/costs_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "analysis/hardware.h"
#include "ir/graph.h"
#include "support/status_macros.h"

namespace spillway::analysis {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;

MeasuredCosts Example() {
  MeasuredCosts costs;
  costs.measured_on = {.machine = "test-host (Test CPU)",
                       .backend = "cpu",
                       .threads = 2,
                       .isa = "avx2",
                       .math_mode = "tf32",
                       .date = "2026-12-04"};
  costs.workload = "two relus";
  costs.node_seconds = {{"r1", 0.25}, {"r2", 0.5}};
  // 1 us latency and 1 GB/s: 1 MB takes 1001 us.
  costs.device_to_host = {{0, 1e-6}, {1'000'000, 1001e-6}, {2'000'000, 2001e-6}};
  costs.host_to_device = {{0, 2e-6}, {1'000'000, 502e-6}};
  costs.contention = Contention{.compute_slowdown = 0.375, .copy_slowdown = 1.25};
  return costs;
}

std::string Error(const std::string& text) {
  absl::StatusOr<MeasuredCosts> costs = ParseCostsFile(text);
  return costs.ok() ? "<parsed>" : std::string(StatusMessage(costs.status()));
}

TEST(CostsFile, RoundTripsThroughJson) {
  const MeasuredCosts costs = Example();
  absl::StatusOr<MeasuredCosts> again = ParseCostsFile(CostsFileToJson(costs));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->measured_on, costs.measured_on);
  EXPECT_EQ(again->workload, costs.workload);
  EXPECT_EQ(again->node_seconds, costs.node_seconds);
  ASSERT_EQ(again->device_to_host.size(), 3u);
  EXPECT_EQ(again->device_to_host[1].bytes, 1'000'000);
  EXPECT_EQ(again->host_to_device[1].seconds, 502e-6);
  EXPECT_EQ(again->contention, costs.contention);

  // A file without contention (measured before profile measured it) plans
  // copies and kernels as independent.
  MeasuredCosts older = Example();
  older.contention.reset();
  const std::string text = CostsFileToJson(older);
  EXPECT_EQ(text.find("contention"), std::string::npos);
  absl::StatusOr<MeasuredCosts> parsed = ParseCostsFile(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->contention.has_value());

  // A file without a math mode (measured before it was recorded) was
  // measured in fp32.
  std::string no_mode = CostsFileToJson(Example());
  const std::string field = "\"math_mode\": \"tf32\",";
  const size_t at = no_mode.find(field);
  ASSERT_NE(at, std::string::npos);
  no_mode.erase(at, field.size());
  absl::StatusOr<MeasuredCosts> fp32 = ParseCostsFile(no_mode);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ(fp32->measured_on.math_mode, "fp32");
}

TEST(CostsFile, BadFilesAreOneLineErrorsNamingTheField) {
  const std::string good = CostsFileToJson(Example());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_THAT(Error("{}"), HasSubstr("field 'format' is missing"));
  EXPECT_THAT(Error(replaced("spillway-costs", "other")), HasSubstr("not a costs file"));
  EXPECT_THAT(Error(replaced("\"version\": 1", "\"version\": 9")),
              HasSubstr("field 'version' is 9; this Spillway reads version 1"));
  EXPECT_THAT(Error(replaced("\"r1\": 0.25", "\"r1\": -0.25")),
              HasSubstr("field 'nodes.r1' must be a finite number of seconds >= 0, got -0.25"));
  EXPECT_THAT(Error(replaced("\"threads\": 2", "\"threads\": 0")),
              HasSubstr("measured_on.threads"));
  EXPECT_THAT(Error(replaced("\"bytes\": 1000000,\n        \"seconds\": 0.000502",
                             "\"bytes\": 0,\n        \"seconds\": 0.000502")),
              HasSubstr("field 'copies.host_to_device' needs samples of at least two sizes"));
  EXPECT_THAT(Error(replaced("\"backend\": \"cpu\"", "\"backend\": 3")),
              HasSubstr("field 'measured_on.backend' has the wrong type"));
  EXPECT_THAT(Error(replaced("\"math_mode\": \"tf32\"", "\"math_mode\": \"fp64\"")),
              HasSubstr("field 'measured_on.math_mode' is \"fp64\": fp32, tf32 or fp16"));
  EXPECT_THAT(Error(replaced("\"copy_slowdown\": 1.25", "\"copy_slowdown\": -1")),
              HasSubstr("field 'contention.copy_slowdown' must be a finite number >= 0, got -1"));
  EXPECT_THAT(Error(replaced("\"compute_slowdown\": 0.375,", "")),
              HasSubstr("field 'contention.compute_slowdown' is missing"));
  EXPECT_THAT(Error(replaced("\"compute_slowdown\": 0.375", "\"compute_slowdown\": \"high\"")),
              HasSubstr("field 'contention.compute_slowdown' has the wrong type"));
}

TEST(CostsFile, CopiesFitALineOfLatencyAndBandwidth) {
  const CopyLine line = FitCopyLine(Example().device_to_host);
  EXPECT_THAT(line.latency_s, DoubleNear(1e-6, 1e-12));
  EXPECT_THAT(line.bytes_per_s, DoubleNear(1e9, 1e-3));
  // A fit whose latency would be negative goes through the origin.
  const CopyLine origin = FitCopyLine({{1000, 0.5e-6}, {2000, 2e-6}, {3000, 3.5e-6}});
  EXPECT_EQ(origin.latency_s, 0.0);
  EXPECT_GT(origin.bytes_per_s, 0.0);
}

TEST(CostsFile, NodesTakeTheirMeasuredTimesByNameAndTheRestFallBack) {
  ir::Graph graph;
  const ir::ValueId x = graph.AddInput("x", ir::F32({1024}));
  const ir::NodeId r1 = *graph.AddNode(ir::OpKind::kRelu, {x}, {}, "r1");
  const ir::NodeId r2 = *graph.AddNode(ir::OpKind::kRelu, {graph.node(r1).outputs[0]}, {}, "r2");
  const ir::NodeId r3 = *graph.AddNode(ir::OpKind::kRelu, {graph.node(r2).outputs[0]}, {}, "r3");
  const HardwareProfile profile = *LoadHardwareProfile("v100-16g-nvlink2");
  absl::StatusOr<MeasuredCostModel> measured =
      MakeMeasuredCostModel(Example(), graph, std::make_unique<RooflineCostModel>(profile));
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_EQ(measured->matched, 2);
  EXPECT_EQ(measured->unmatched, 1);
  EXPECT_EQ(measured->model->NodeSeconds(graph, graph.node(r1)), 0.25);
  EXPECT_EQ(measured->model->NodeSeconds(graph, graph.node(r2)), 0.5);
  EXPECT_EQ(measured->model->NodeSeconds(graph, graph.node(r3)),
            RooflineCostModel(profile).NodeSeconds(graph, graph.node(r3)));
  EXPECT_THAT(measured->model->CopySeconds(1'000'000, CopyDirection::kDeviceToHost),
              DoubleNear(1001e-6, 1e-9));
  EXPECT_EQ(measured->model->contention(), *Example().contention);
  MeasuredCosts independent = Example();
  independent.contention.reset();
  EXPECT_FALSE(
      MakeMeasuredCostModel(independent, graph, std::make_unique<RooflineCostModel>(profile))
          ->model->contention()
          .any());

  MeasuredCosts other = Example();
  other.node_seconds = {{"conv1", 1.0}};
  absl::StatusOr<MeasuredCostModel> refused =
      MakeMeasuredCostModel(other, graph, std::make_unique<RooflineCostModel>(profile));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(StatusMessage(refused.status())),
              HasSubstr("times 0 of this graph's 3 nodes: it was measured on another graph"));
}

}  // namespace
}  // namespace spillway::analysis
