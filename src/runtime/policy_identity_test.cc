// Swapping and recomputation change time and memory, never numbers: on the CPU
// backend, every policy at every budget gives bitwise the loss, every
// parameter gradient and every updated parameter of the `none` run, step
// after step, and the arena the runtime measures is the one the planner laid
// out, within the budget.
//
// The reference `none` run keeps the backward pass in autodiff's order; every
// policy's plans are checked in that order and in the memory-aware one
// (program/schedule.h), and `none` in the memory-aware order too.
//
// Three small models, each at two budgets between its persistent bytes
// (parameters, gradients' final buffers, optimizer state) and its `none`
// arena, so that the plans really spill and recompute:
// - ResNet-18 (base width 8) at 48x48, batch 4: convolutions, batch norm
//   (recomputed from saved statistics), max pool, residual adds.
// - DeepLabV3+ (ResNet-50 backbone, base width 8) at 64x64, batch 2, with
//   dropout: atrous convolutions, concat, bilinear resize, a replayed mask.
// - GPT-2 (2 layers, 2 heads, width 32, 32 tokens), batch 2, with dropout:
//   embeddings, layer norm, causal softmax, matrix products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "backends/cpu/cpu_backend.h"
#include "fmt/format.h"
#include "models/models.h"
#include "planner/planner.h"
#include "runtime/runtime.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::runtime {
namespace {

constexpr int kSteps = 3;

struct ModelCase {
  std::string label;
  std::string model;
  models::ModelOptions options;
};

std::vector<ModelCase> Models() {
  models::ModelOptions resnet;
  resnet.batch = 4;
  resnet.height = resnet.width = 48;
  resnet.base_width = 8;
  resnet.classes = 10;

  models::ModelOptions deeplab;
  deeplab.batch = 2;
  deeplab.height = deeplab.width = 64;
  deeplab.base_width = 8;
  deeplab.classes = 4;
  deeplab.dropout = 0.5;

  models::ModelOptions gpt2;
  gpt2.batch = 2;
  gpt2.n_layer = 2;
  gpt2.n_head = 2;
  gpt2.d_model = 32;
  gpt2.seq_len = 32;
  gpt2.vocab = 64;
  gpt2.dropout = 0.1;

  return {{"ResNet18", "resnet18", resnet},
          {"DeepLabV3Plus", "deeplabv3plus", deeplab},
          {"Gpt2", "gpt2", gpt2}};
}

// What a run leaves behind: per step the loss and every parameter gradient,
// and at the end every parameter and optimizer state, all as raw bytes.
struct RunRecord {
  std::vector<std::vector<std::byte>> losses;
  std::vector<std::map<ir::ValueId, std::vector<std::byte>>> gradients;
  std::map<ir::ValueId, std::vector<std::byte>> final_state;
  int64_t arena_high_water = 0;
};

std::vector<std::byte> Bytes(const ir::TensorType& type) {
  return std::vector<std::byte>(static_cast<size_t>(type.bytes()));
}

// The exclusive upper bound of an integer input: the class count of the loss
// that reads it as labels, or the rows of the embedding that reads it as
// indices.
int64_t IntegerLimit(const ir::Graph& graph, ir::ValueId value) {
  for (const ir::Node& node : graph.nodes()) {
    if (node.op == ir::OpKind::kCrossEntropyLoss && node.inputs[1] == value) {
      return graph.value(node.inputs[0]).type.shape.back();
    }
    if (node.op == ir::OpKind::kEmbedding && node.inputs[1] == value) {
      return graph.value(node.inputs[0]).type.shape.front();
    }
  }
  return 1;
}

// The same values for every run: parameters uniform in +-1/sqrt(fan-in),
// running variances 1, other state 0, inputs drawn once per step.
std::vector<std::byte> InitialBytes(const ir::Graph& graph, ir::ValueId id, uint64_t salt) {
  const ir::Value& value = graph.value(id);
  std::vector<std::byte> bytes = Bytes(value.type);
  std::mt19937_64 rng(static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ULL + salt);
  const int64_t count = *ir::NumElements(value.type.shape);
  if (value.type.dtype != ir::DType::kF32) {
    SPILLWAY_CHECK(value.type.dtype == ir::DType::kI64, "an integer input that is not i64");
    std::vector<int64_t> ints(static_cast<size_t>(count));
    if (value.kind == ir::ValueKind::kInput) {
      std::uniform_int_distribution<int64_t> dist(0, IntegerLimit(graph, id) - 1);
      for (int64_t& x : ints) x = dist(rng);
    }
    std::memcpy(bytes.data(), ints.data(), bytes.size());
    return bytes;
  }
  std::vector<float> floats(static_cast<size_t>(count), 0.0f);
  if (value.kind == ir::ValueKind::kParameter || value.kind == ir::ValueKind::kInput) {
    const int64_t fan_in = value.type.rank() > 1 ? count / value.type.shape.front() : 1;
    const float scale =
        value.kind == ir::ValueKind::kInput ? 1.0f : 1.0f / std::sqrt(static_cast<float>(fan_in));
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (float& x : floats) x = dist(rng);
  } else if (value.kind == ir::ValueKind::kBuffer && value.name.ends_with("running_var")) {
    std::fill(floats.begin(), floats.end(), 1.0f);
  }
  std::memcpy(bytes.data(), floats.data(), bytes.size());
  return bytes;
}

absl::StatusOr<RunRecord> Train(const autodiff::TrainingGraph& training,
                                const program::Program& program, int64_t budget) {
  const ir::Graph& graph = training.graph;
  backends::cpu::CpuBackend backend({.threads = 2});
  ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::Create(program, backend, budget));
  for (ir::ValueId input : graph.inputs()) {
    if (graph.value(input).kind == ir::ValueKind::kInput) continue;
    RETURN_IF_ERROR(runtime->Write(input, InitialBytes(graph, input, 0)));
  }
  std::vector<ir::ValueId> gradients;
  for (const auto& [param, gradient] : training.param_grads) gradients.push_back(gradient);

  RunRecord record;
  for (int step = 0; step < kSteps; ++step) {
    for (ir::ValueId input : graph.InputsOfKind(ir::ValueKind::kInput)) {
      RETURN_IF_ERROR(runtime->Write(input, InitialBytes(graph, input, 1 + step)));
    }
    StepOptions options;
    options.step = static_cast<uint64_t>(step);
    options.capture = gradients;
    ASSIGN_OR_RETURN(StepResult result, runtime->RunStep(options));
    std::vector<std::byte> loss = Bytes(graph.value(training.loss).type);
    RETURN_IF_ERROR(runtime->Read(training.loss, loss));
    record.losses.push_back(std::move(loss));
    record.gradients.push_back(std::move(result.captured));
    record.arena_high_water = std::max(record.arena_high_water, result.arena_high_water);
  }
  for (ir::ValueId input : graph.inputs()) {
    const ir::ValueKind kind = graph.value(input).kind;
    if (kind != ir::ValueKind::kParameter && kind != ir::ValueKind::kOptimizerState) continue;
    std::vector<std::byte> bytes = Bytes(graph.value(input).type);
    RETURN_IF_ERROR(runtime->Read(input, bytes));
    record.final_state[input] = std::move(bytes);
  }
  return record;
}

class PolicyIdentityTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(PolicyIdentityTest, EveryPolicyAtEveryBudgetGivesTheBitsOfNone) {
  const ModelCase& model = GetParam();
  absl::StatusOr<ir::Graph> forward = models::BuildModel(model.model, model.options);
  ASSERT_TRUE(forward.ok()) << forward.status();
  absl::StatusOr<autodiff::TrainingGraph> training =
      autodiff::BuildTrainingGraph(*forward, autodiff::OptimizerOptions{});
  ASSERT_TRUE(training.ok()) << training.status();

  absl::StatusOr<analysis::HardwareProfile> cpu = analysis::LoadHardwareProfile("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const analysis::RooflineCostModel cost_model(*cpu, {});
  // The order is forced: at these sizes the planner's own choice may be
  // either.
  auto plan = [&](std::string_view policy_name, int64_t budget,
                  program::BackwardOrder order = program::BackwardOrder::kMemoryAware) {
    planner::PlannerOptions options;
    options.budget_bytes = budget;
    options.backward_order = order;
    options.max_evaluations = 200;  // the same plans on every machine
    planner::PlanningContext context(training->graph, cost_model, *cpu, options);
    absl::StatusOr<std::unique_ptr<planner::Policy>> policy = planner::MakePolicy(policy_name);
    SPILLWAY_CHECK(policy.ok(), "a policy name from PolicyNames()");
    return planner::RunPolicy(**policy, context);
  };

  // The reference keeps everything and runs the backward pass as autodiff
  // emitted it; every other plan below runs the memory-aware order.
  absl::StatusOr<planner::PlanResult> none =
      plan("none", int64_t{1} << 40, program::BackwardOrder::kTopological);
  ASSERT_TRUE(none.ok()) << none.status();
  const int64_t none_arena = none->best.arena_bytes();
  absl::StatusOr<RunRecord> expected = Train(*training, none->best.program, none_arena);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(expected->arena_high_water, none_arena);
  auto expect_the_bits_of_none = [&](const RunRecord& actual) {
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(actual.losses[step], expected->losses[step]) << "loss, step " << step;
      for (const auto& [gradient, bytes] : expected->gradients[step]) {
        EXPECT_EQ(actual.gradients[step].at(gradient), bytes)
            << training->graph.value(gradient).name << ", step " << step;
      }
    }
    for (const auto& [value, bytes] : expected->final_state) {
      EXPECT_EQ(actual.final_state.at(value), bytes) << training->graph.value(value).name;
    }
  };

  // Reordering the backward pass alone changes no bit.
  absl::StatusOr<planner::PlanResult> reordered = plan("none", int64_t{1} << 40);
  ASSERT_TRUE(reordered.ok()) << reordered.status();
  ASSERT_NE(reordered->best.program.schedule, none->best.program.schedule)
      << "the memory-aware order is the topological one here: the test checks nothing";
  absl::StatusOr<RunRecord> reordered_run =
      Train(*training, reordered->best.program, reordered->best.arena_bytes());
  ASSERT_TRUE(reordered_run.ok()) << reordered_run.status();
  expect_the_bits_of_none(*reordered_run);

  // In each backward order: the smallest arena any policy reaches bounds how
  // low a budget can go; the two budgets lie 1/3 and 2/3 of the way from
  // there to the arena of `none` in that order.
  int64_t spills = 0;
  int64_t recomputes = 0;
  for (const program::BackwardOrder order :
       {program::BackwardOrder::kTopological, program::BackwardOrder::kMemoryAware}) {
    absl::StatusOr<planner::PlanResult> tightest = plan("hybrid", 1, order);
    ASSERT_TRUE(tightest.ok()) << tightest.status();
    const int64_t floor = tightest->smallest_arena_bytes;
    const int64_t ceiling =
        order == program::BackwardOrder::kTopological ? none_arena : reordered->best.arena_bytes();
    ASSERT_LT(floor, ceiling) << "nothing can be spilled or recomputed";
    for (int64_t budget : {floor + (ceiling - floor) / 3, floor + 2 * (ceiling - floor) / 3}) {
      int feasible = 0;
      for (const std::string& policy : planner::PolicyNames()) {
        if (policy == "none") continue;
        SCOPED_TRACE(fmt::format("{} at a budget of {} bytes (none: {}), {} backward order", policy,
                                 budget, ceiling, program::BackwardOrderName(order)));
        absl::StatusOr<planner::PlanResult> result = plan(policy, budget, order);
        ASSERT_TRUE(result.ok()) << result.status();
        if (!result->feasible) continue;  // recompute alone cannot reach every budget
        ++feasible;
        absl::StatusOr<RunRecord> actual = Train(*training, result->best.program, budget);
        ASSERT_TRUE(actual.ok()) << actual.status();
        EXPECT_EQ(actual->arena_high_water, result->best.arena_bytes());
        EXPECT_LE(result->best.arena_bytes(), budget);
        spills += result->best.plan.Count(program::Decision::kSpill);
        recomputes += result->best.plan.Count(program::Decision::kRecompute);
        expect_the_bits_of_none(*actual);
      }
      // swap, hybrid-seed and hybrid can always trade host memory for device memory.
      EXPECT_GE(feasible, 3);
    }
  }
  // Both mechanisms were exercised, not just a tighter layout.
  EXPECT_GT(spills, 0);
  EXPECT_GT(recomputes, 0);

  // Fetching a tensor twice (Plan::refetch_after), which swap does only at
  // its floor on large activations, in the lookahead order made for it:
  // every tensor with two readers or more that can be (the forward's, and
  // gradients) is spilled, dropped after its first reader, and fetched again
  // for the next, in both passes.
  const std::vector<ir::NodeId> schedule =
      program::TrainingSchedule(training->graph, program::BackwardOrder::kLookahead);
  std::vector<int> first_read(static_cast<size_t>(training->graph.num_values()), -1);
  std::vector<int> readers(static_cast<size_t>(training->graph.num_values()), 0);
  for (int step = 0; step < static_cast<int>(schedule.size()); ++step) {
    for (ir::ValueId input : training->graph.node(schedule[static_cast<size_t>(step)]).inputs) {
      const size_t v = static_cast<size_t>(input);
      if (first_read[v] == step) continue;
      if (first_read[v] < 0) first_read[v] = step;
      ++readers[v];
    }
  }
  program::Plan refetching("refetching", training->graph);
  int spilled_gradients = 0;
  for (const ir::Value& value : training->graph.values()) {
    const size_t v = static_cast<size_t>(value.id);
    if (program::CanSpillBetweenReads(training->graph, value.id) && readers[v] >= 2) {
      refetching.Spill(value.id, /*fetch_step=*/-1, /*refetch_after=*/first_read[v]);
      spilled_gradients += program::CanSpill(training->graph, value.id) ? 0 : 1;
    }
  }
  ASSERT_GT(refetching.CountRefetched(), 0);
  ASSERT_GT(spilled_gradients, 0);
  absl::StatusOr<program::Program> refetched =
      program::BuildProgram(training->graph, schedule, refetching);
  ASSERT_TRUE(refetched.ok()) << refetched.status();
  std::map<ir::ValueId, int> fetches;
  for (const program::Instruction& instruction : refetched->instructions) {
    if (instruction.kind == program::InstructionKind::kCopyToDevice) {
      ++fetches[refetched->buffer(instruction.writes[0]).value];
    }
  }
  EXPECT_TRUE(std::any_of(fetches.begin(), fetches.end(), [](const auto& fetched) {
    return fetched.second >= 2;
  })) << "no tensor was fetched twice";
  absl::StatusOr<RunRecord> refetched_run = Train(*training, *refetched, refetched->arena_bytes);
  ASSERT_TRUE(refetched_run.ok()) << refetched_run.status();
  expect_the_bits_of_none(*refetched_run);
}

INSTANTIATE_TEST_SUITE_P(Models, PolicyIdentityTest, ::testing::ValuesIn(Models()),
                         [](const ::testing::TestParamInfo<ModelCase>& param_info) {
                           return param_info.param.label;
                         });

}  // namespace
}  // namespace spillway::runtime
