#include "program/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "autodiff/saved_tensors.h"
#include "autodiff/training_graph.h"
#include "program/rewriter.h"
#include "program/test_graphs.h"
#include "program/verifier.h"
#include "support/status_macros.h"

namespace spillway::program {
namespace {

using testing::ParseOrDie;
using testing::TrainingModel;

// Every node after the producers of its inputs and its control inputs, each
// node exactly once.
void ExpectValidSchedule(const ir::Graph& graph, const std::vector<ir::NodeId>& schedule) {
  ASSERT_EQ(static_cast<int64_t>(schedule.size()), graph.num_nodes());
  std::vector<int> step(static_cast<size_t>(graph.num_nodes()), -1);
  for (size_t i = 0; i < schedule.size(); ++i) {
    ASSERT_EQ(step[static_cast<size_t>(schedule[i])], -1) << "node scheduled twice";
    step[static_cast<size_t>(schedule[i])] = static_cast<int>(i);
  }
  for (const ir::Node& node : graph.nodes()) {
    for (ir::ValueId input : node.inputs) {
      const ir::NodeId producer = graph.value(input).producer;
      if (producer == ir::kNoNode) continue;
      EXPECT_LT(step[static_cast<size_t>(producer)], step[static_cast<size_t>(node.id)])
          << graph.node(producer).name << " must run before " << node.name;
    }
    for (ir::NodeId control : node.control_inputs) {
      EXPECT_LT(step[static_cast<size_t>(control)], step[static_cast<size_t>(node.id)])
          << graph.node(control).name << " must run before " << node.name;
    }
  }
}

// The arena of a plan that spills every saved tensor: the floor a spilling
// policy works against.
int64_t EverythingSpilledArena(const ir::Graph& graph, BackwardOrder order) {
  Plan plan("spill-all", graph);
  for (const autodiff::SavedTensor& saved : autodiff::SavedTensors(graph)) {
    plan.Spill(saved.value);
  }
  absl::StatusOr<Program> program = BuildProgram(graph, TrainingSchedule(graph, order), plan);
  EXPECT_TRUE(program.ok()) << StatusMessage(program.status());
  if (!program.ok()) return 0;
  absl::Status verified = VerifyProgram(*program);
  EXPECT_TRUE(verified.ok()) << StatusMessage(verified);
  return program->arena_bytes;
}

// A plan that recomputes every saved tensor that can be, and keeps the rest
// (batch-norm statistics among them), verifies in `schedule`.
void ExpectEverythingRecomputedVerifies(const ir::Graph& graph,
                                        const std::vector<ir::NodeId>& schedule) {
  Plan plan("recompute-all", graph);
  for (const autodiff::SavedTensor& saved : autodiff::SavedTensors(graph)) {
    if (CanRecompute(graph, saved.value)) plan.Recompute(saved.value);
  }
  absl::StatusOr<Program> program = BuildProgram(graph, schedule, plan);
  ASSERT_TRUE(program.ok()) << StatusMessage(program.status());
  absl::Status verified = VerifyProgram(*program);
  EXPECT_TRUE(verified.ok()) << StatusMessage(verified);
}

class EveryFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryFamily, OnlyTheBackwardPassMovesAndItStaysValid) {
  const autodiff::TrainingGraph training = TrainingModel(GetParam(), 32);
  const ir::Graph& graph = training.graph;
  const std::vector<ir::NodeId> topological = TrainingSchedule(graph, BackwardOrder::kTopological);
  const std::vector<ir::NodeId> reordered = TrainingSchedule(graph, BackwardOrder::kMemoryAware);
  EXPECT_EQ(topological, graph.TopologicalOrder());
  ExpectValidSchedule(graph, reordered);
  // Forward and update nodes keep their steps.
  for (size_t i = 0; i < topological.size(); ++i) {
    if (graph.node(topological[i]).phase != ir::Phase::kBackward) {
      EXPECT_EQ(reordered[i], topological[i]) << "step " << i;
    }
  }
  // Plans built on it verify, spilling or recomputing everything.
  EXPECT_GT(EverythingSpilledArena(graph, BackwardOrder::kMemoryAware), 0);
  ExpectEverythingRecomputedVerifies(graph, reordered);
}

INSTANTIATE_TEST_SUITE_P(Models, EveryFamily,
                         ::testing::Values("resnet18", "resnet50", "unet", "deeplabv3plus",
                                           "gpt2"));

TEST(MemoryAwareOrder, LowersTheFloorOfAResidualNetwork) {
  // A downsampling bottleneck's backward pass, in autodiff's order, computes
  // the shortcut's input gradient first and holds it while the whole main
  // branch runs; the memory-aware order finishes both branches' input
  // gradients and their sum before it brings back the block's input for the
  // weight gradients.
  const autodiff::TrainingGraph training = TrainingModel("resnet50", 64);
  const int64_t topological = EverythingSpilledArena(training.graph, BackwardOrder::kTopological);
  const int64_t reordered = EverythingSpilledArena(training.graph, BackwardOrder::kMemoryAware);
  EXPECT_LT(reordered, topological);
}

TEST(MemoryAwareOrder, AGraphWhoseBackwardPassIsNotOneBlockKeepsItsOrder) {
  // The topological order interleaves the phases: a, da, b, db.
  const ir::Graph graph = ParseOrDie(
      "graph interleaved {\n"
      "  param %w: f32[256]\n"
      "  %a: f32[256] = relu(%w)\n"
      "  %da: f32[256] = relu_backward(%a, %a) @backward\n"
      "  %b: f32[256] = relu(%w)\n"
      "  %db: f32[256] = relu_backward(%b, %b) @backward\n"
      "  output %da\n"
      "  output %db\n"
      "}\n");
  EXPECT_EQ(TrainingSchedule(graph, BackwardOrder::kMemoryAware), graph.TopologicalOrder());
}

// Two backward nodes are ready after the forward pass: g brings back its
// 4 KiB saved input and writes 4 KiB (the input then dies: it adds 4 KiB),
// small brings back 1 KiB and writes 1 KiB (it adds 1 KiB).
constexpr char kTwoBranchesText[] =
    "graph branches {\n"
    "  param %w: f32[1024]\n"
    "  param %v: f32[256]\n"
    "  %x: f32[1024] = relu(%w)\n"
    "  %y: f32[256] = relu(%v)\n"
    "  %g: f32[1024] = relu_backward(%x, %x) @backward\n"
    "  %big: f32[1024] = relu_backward(%g, %w) @backward\n"
    "  %small: f32[256] = relu_backward(%y, %v) @backward\n"
    "  output %big\n"
    "  output %small\n"
    "}\n";

std::vector<std::string> ScheduleNames(const ir::Graph& graph, BackwardOrder order) {
  std::vector<std::string> names;
  for (ir::NodeId id : TrainingSchedule(graph, order)) names.push_back(graph.node(id).name);
  return names;
}

TEST(MemoryAwareOrder, RunsTheNodeThatAddsTheFewestBytesFirst) {
  // small needs 2 KiB while it runs, g 8 KiB: small runs first although it
  // comes later in the graph; big then writes over g, its dying input, and
  // adds nothing.
  const ir::Graph graph = ParseOrDie(kTwoBranchesText);
  EXPECT_EQ(ScheduleNames(graph, BackwardOrder::kMemoryAware),
            (std::vector<std::string>{"x", "y", "small", "g", "big"}));
}

TEST(LookaheadOrder, RunsTheNodesThatAddTheFewestBytesOverTwoSteps) {
  // One step ahead small looks cheaper; two steps ahead g is: big then writes
  // over g and adds nothing (4 KiB over both), where small and then g add
  // 5 KiB. Running g first holds at most 8 KiB (x and g) where small first
  // holds 9 KiB (small's output beside them).
  const ir::Graph graph = ParseOrDie(kTwoBranchesText);
  EXPECT_EQ(ScheduleNames(graph, BackwardOrder::kLookahead),
            (std::vector<std::string>{"x", "y", "g", "big", "small"}));
}

TEST(LookaheadOrder, ReadsADownsamplingBlocksInputBeforeAndAfterItsInputGradients) {
  // A weight gradient reads the block's input before the input gradients, so
  // that a plan can drop it while they run and fetch it again for the rest.
  // (At a large image, where the activations outweigh the weight gradients.)
  const autodiff::TrainingGraph training = TrainingModel("resnet50", 2048);
  for (const BackwardOrder order : {BackwardOrder::kMemoryAware, BackwardOrder::kLookahead}) {
    std::map<std::string, size_t> step;
    const std::vector<std::string> names = ScheduleNames(training.graph, order);
    for (size_t i = 0; i < names.size(); ++i) step[names[i]] = i;
    const size_t first_weight =
        std::min(step.at("bwd/layer2.0.conv1.weight"), step.at("bwd/layer2.0.downsample.0.weight"));
    const auto [first_input, last_input] =
        std::minmax(step.at("bwd/layer2.0.conv1.data"), step.at("bwd/layer2.0.downsample.0.data"));
    EXPECT_GT(step.at("bwd/layer1.2.relu"), last_input);
    if (order == BackwardOrder::kLookahead) {
      EXPECT_LT(first_weight, first_input);
    } else {
      EXPECT_GT(first_weight, last_input);  // one step: the input gradients first
    }
  }
}

}  // namespace
}  // namespace spillway::program
