#include "runtime/runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "backends/reference/reference_backend.h"
#include "fmt/format.h"
#include "models/models.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "program/plan.h"
#include "program/rewriter.h"
#include "program/test_graphs.h"
#include "program/workspaces.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::runtime {
namespace {

using program::Instruction;
using program::InstructionKind;
using program::Program;
using program::Stream;
using program::testing::IndicesOf;
using program::testing::ParseOrDie;
using ::testing::HasSubstr;

size_t StreamIndex(Stream stream) { return static_cast<size_t>(stream); }

// The reference backend, instrumented:
// - fresh device and host memory is filled with NaNs, so reading bytes
//   nothing wrote shows in the results;
// - each stream logs when each of its kernels and copies starts and ends, on
//   one clock, to check the Program's events against what ran;
// - optionally, kernels and copies sleep a few pseudo-random microseconds, to
//   shake the streams' interleaving, or one stream is slow;
// - a kernel of a named node can be made to fail.
class TestBackend final : public backends::Backend {
 public:
  struct Span {
    int64_t start = 0;
    int64_t end = 0;
  };

  void set_jitter_us(int max_us) { jitter_us_ = max_us; }
  void set_delay_us(Stream stream, int us) { delay_us_[StreamIndex(stream)] = us; }
  void FailKernelOf(std::string node) { failing_node_ = std::move(node); }
  int host_allocations() const { return host_allocations_; }
  void set_available(backends::AvailableMemory available) { available_ = available; }
  void set_alignment(int64_t alignment) { alignment_ = alignment; }
  void set_unsupported(ir::OpKind op) { unsupported_ = op; }
  // Every kernel first writes garbage over the whole workspace, and the
  // scratch buffer, it is handed.
  void ScribbleOverWorkspaces() { scribble_ = true; }
  // The workspaces kernels were handed (address, bytes), and the last device
  // allocation (the arena).
  const std::set<std::pair<const void*, int64_t>>& workspaces() const { return workspaces_; }
  // The scratch buffers kernels were handed (address, bytes), by node.
  const std::map<std::string, std::pair<const void*, int64_t>>& scratches() const {
    return scratches_;
  }
  const void* last_device_allocation() const { return last_device_allocation_; }
  // Per stream, the kernels or copies of the last step, in the order they ran.
  const std::vector<Span>& log(Stream stream) const { return log_[StreamIndex(stream)]; }
  void ClearLog() {
    for (std::vector<Span>& spans : log_) spans.clear();
  }

  std::string_view name() const override { return "test"; }
  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override {
    absl::StatusOr<void*> memory = Poisoned(reference_.AllocateDevice(bytes), bytes);
    if (memory.ok()) last_device_allocation_ = *memory;
    return memory;
  }
  void FreeDevice(void* memory) override { reference_.FreeDevice(memory); }
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override {
    ++host_allocations_;
    return Poisoned(reference_.AllocateHost(bytes), bytes);
  }
  void FreeHost(void* memory) override { reference_.FreeHost(memory); }
  backends::AvailableMemory Available() const override { return available_; }
  int64_t alignment() const override { return alignment_; }
  absl::Status CheckSupported(const ir::Graph& /*graph*/, const ir::Node& node) const override {
    if (unsupported_ != node.op) return absl::OkStatus();
    return absl::UnimplementedError("the test backend has no kernel for it");
  }

  absl::Status RunKernel(Stream stream, const backends::KernelCall& call) override {
    if (call.node.name == failing_node_) {
      return absl::InternalError("the test backend fails this kernel");
    }
    workspaces_.insert({call.workspace, call.workspace_bytes});
    if (scribble_ && call.workspace != nullptr) {
      std::memset(call.workspace, 0x7f, static_cast<size_t>(call.workspace_bytes));
    }
    if (call.scratch != nullptr) {
      scratches_[call.node.name] = {call.scratch, call.scratch_bytes};
      if (scribble_) std::memset(call.scratch, 0x7f, static_cast<size_t>(call.scratch_bytes));
    }
    return Logged(stream, [&] { return reference_.RunKernel(stream, call); });
  }
  absl::Status Copy(Stream stream, void* destination, const void* source, int64_t bytes) override {
    return Logged(stream, [&] { return reference_.Copy(stream, destination, source, bytes); });
  }
  absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) override {
    return reference_.Upload(device_destination, host_source, bytes);
  }
  absl::Status Download(void* host_destination, const void* device_source, int64_t bytes) override {
    return reference_.Download(host_destination, device_source, bytes);
  }

 private:
  bool scribble_ = false;
  std::set<std::pair<const void*, int64_t>> workspaces_;
  std::map<std::string, std::pair<const void*, int64_t>> scratches_;
  const void* last_device_allocation_ = nullptr;

  static absl::StatusOr<void*> Poisoned(absl::StatusOr<void*> memory, int64_t bytes) {
    if (memory.ok()) std::memset(*memory, 0xff, static_cast<size_t>(bytes));
    return memory;
  }

  // Each stream calls from its own thread, so its log and random generator
  // are its own.
  template <typename Work>
  absl::Status Logged(Stream stream, Work work) {
    const size_t s = StreamIndex(stream);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us_[s]));
    if (jitter_us_ > 0) {
      std::uniform_int_distribution<int> sleep(0, jitter_us_);
      std::this_thread::sleep_for(std::chrono::microseconds(sleep(random_[s])));
    }
    Span span;
    span.start = clock_++;
    absl::Status status = work();
    span.end = clock_++;
    log_[s].push_back(span);
    return status;
  }

  backends::reference::ReferenceBackend reference_;
  int jitter_us_ = 0;
  std::array<int, program::kNumStreams> delay_us_{};
  std::string failing_node_;
  int host_allocations_ = 0;             // only the d2h stream allocates host memory
  backends::AvailableMemory available_;  // unknown unless a test sets it
  int64_t alignment_ = backends::kTensorAlignment;
  std::optional<ir::OpKind> unsupported_;
  std::atomic<int64_t> clock_{0};
  std::array<std::vector<Span>, program::kNumStreams> log_;
  std::array<std::minstd_rand, program::kNumStreams> random_{
      std::minstd_rand(1), std::minstd_rand(2), std::minstd_rand(3)};
};

// A small training step with every kind of persistent value: a parameter
// with momentum, a batch norm's running statistics updated in place by the
// forward pass, and an input. Every activation is f32[4,64] (1 KiB); the
// backward pass reads a, y, r and s, which the pins can spill or recompute.
// It is not the gradient of anything: the runtime does not care.
std::string TrainText(const std::map<std::string, std::string>& pins = {}) {
  auto pin = [&](const std::string& value) {
    auto it = pins.find(value);
    return it == pins.end() ? std::string() : fmt::format(" {{memory=\"{}\"}}", it->second);
  };
  return fmt::format(
      "graph train {{\n"
      "  input %x: f32[4,64]\n"
      "  param %w: f32[4,64]\n"
      "  param %gamma: f32[64]\n"
      "  param %beta: f32[64]\n"
      "  buffer %rm: f32[64]\n"
      "  buffer %rv: f32[64]\n"
      "  state %mom: f32[4,64]\n"
      "  %a: f32[4,64] = mul(%x, %w){}\n"
      "  node bn: %y: f32[4,64], %mean: f32[64], %inv_std: f32[64], %rm.new: f32[64], "
      "%rv.new: f32[64] = batch_norm(%a, %gamma, %beta, %rm, %rv){}\n"
      "  %r: f32[4,64] = relu(%y){}\n"
      "  %s: f32[4,64] = relu(%r){}\n"
      "  %loss: f32[4,64] = add(%s, %a)\n"
      "  %ds: f32[4,64] = relu_backward(%loss, %s) @backward\n"
      "  %dr: f32[4,64] = relu_backward(%ds, %r) @backward\n"
      "  %dy: f32[4,64] = relu_backward(%dr, %y) @backward\n"
      "  %dw: f32[4,64] = mul(%dy, %a) @backward\n"
      "  %dgamma: f32[64] = mul(%mean, %inv_std) @backward\n"
      "  %w.new: f32[4,64], %mom.new: f32[4,64] = sgd_update(%w, %dw, %mom) "
      "{{lr=0.1, momentum=0.9}} @update\n"
      "  %gamma.new: f32[64] = sgd_update(%gamma, %dgamma) {{lr=0.1}} @update\n"
      "  output %loss, %rm.new, %rv.new, %w.new, %mom.new, %gamma.new\n"
      "}}\n",
      pin("a"), pin("y"), pin("r"), pin("s"));
}

Program BuildOrDie(const ir::Graph& graph) {
  program::Plan plan("pinned", graph);
  absl::Status pinned = program::ApplyPins(graph, plan);
  EXPECT_TRUE(pinned.ok()) << StatusMessage(pinned);
  absl::StatusOr<Program> built =
      program::BuildProgram(graph, program::TrainingSchedule(graph), plan);
  EXPECT_TRUE(built.ok()) << StatusMessage(built.status());
  SPILLWAY_CHECK(built.ok(), "test programs build");
  return *std::move(built);
}

std::unique_ptr<Runtime> CreateOrDie(const Program& program, backends::Backend& backend) {
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(program, backend, program.arena_bytes);
  EXPECT_TRUE(runtime.ok()) << StatusMessage(runtime.status()) << "\n"
                            << program::ProgramToText(program);
  SPILLWAY_CHECK(runtime.ok(), "test programs run");
  return *std::move(runtime);
}

using Bytes = std::vector<std::byte>;

template <typename T>
Bytes BytesOf(const std::vector<T>& elements) {
  Bytes bytes(elements.size() * sizeof(T));
  std::memcpy(bytes.data(), elements.data(), bytes.size());
  return bytes;
}

// Deterministic starting values for every graph input, different per value:
// floats in [-1, 1] (positive for running statistics, which include a
// variance), integers (token ids, labels) in [0, 8).
void Initialize(const ir::Graph& graph, Runtime& runtime) {
  for (ir::ValueId input : graph.inputs()) {
    const ir::Value& value = graph.value(input);
    const size_t count = static_cast<size_t>(*ir::NumElements(value.type.shape));
    auto pattern = [&](size_t i) { return (static_cast<int64_t>(i) * 7 + input * 13) % 17; };
    Bytes bytes;
    if (value.type.dtype == ir::DType::kF32) {
      std::vector<float> floats(count);
      for (size_t i = 0; i < count; ++i) {
        floats[i] = value.kind == ir::ValueKind::kBuffer
                        ? static_cast<float>(pattern(i) + 1) / 16.0f
                        : static_cast<float>(pattern(i) - 8) / 8.0f;
      }
      bytes = BytesOf(floats);
    } else if (value.type.dtype == ir::DType::kI64) {
      std::vector<int64_t> integers(count);
      for (size_t i = 0; i < count; ++i) integers[i] = pattern(i) % 8;
      bytes = BytesOf(integers);
    } else {
      FAIL() << "no starting values for " << ir::TypeToString(value.type);
    }
    absl::Status written = runtime.Write(input, bytes);
    ASSERT_TRUE(written.ok()) << StatusMessage(written);
  }
}

// The bytes of every graph input and, after a step, output, by name.
std::map<std::string, Bytes> State(const ir::Graph& graph, const Runtime& runtime,
                                   bool with_outputs = true) {
  std::map<std::string, Bytes> state;
  std::vector<ir::ValueId> values = graph.inputs();
  if (with_outputs) values.insert(values.end(), graph.outputs().begin(), graph.outputs().end());
  for (ir::ValueId id : values) {
    const ir::Value& value = graph.value(id);
    Bytes bytes(static_cast<size_t>(value.type.bytes()));
    absl::Status read = runtime.Read(id, bytes);
    EXPECT_TRUE(read.ok()) << StatusMessage(read);
    state[value.name] = std::move(bytes);
  }
  return state;
}

std::vector<ir::ValueId> ValuesNamed(const ir::Graph& graph,
                                     std::initializer_list<std::string_view> names) {
  std::vector<ir::ValueId> values;
  for (std::string_view name : names) values.push_back(*graph.FindValue(name));
  return values;
}

// What some steps leave: every graph input and output, and the captured
// gradients of each step, by name.
struct Outcome {
  std::map<std::string, Bytes> state;
  std::vector<std::map<std::string, Bytes>> captured;
  std::vector<StepResult> results;
};

Outcome RunSteps(const ir::Graph& graph, const Program& program, int steps,
                 backends::Backend* instrumented = nullptr,
                 std::initializer_list<std::string_view> capture = {"dw", "dy", "s"}) {
  TestBackend local;
  backends::Backend& backend = instrumented != nullptr ? *instrumented : local;
  std::unique_ptr<Runtime> runtime = CreateOrDie(program, backend);
  Initialize(graph, *runtime);
  Outcome outcome;
  for (int step = 0; step < steps; ++step) {
    StepOptions options;
    options.step = static_cast<uint64_t>(step);
    options.capture = ValuesNamed(graph, capture);
    absl::StatusOr<StepResult> result = runtime->RunStep(options);
    EXPECT_TRUE(result.ok()) << StatusMessage(result.status()) << "\n"
                             << program::ProgramToText(program);
    if (!result.ok()) return outcome;
    std::map<std::string, Bytes>& captured = outcome.captured.emplace_back();
    for (auto& [value, bytes] : result->captured) captured[graph.value(value).name] = bytes;
    outcome.results.push_back(*std::move(result));
  }
  outcome.state = State(graph, *runtime);
  return outcome;
}

bool HasNaN(const Bytes& bytes) {
  std::vector<float> floats(bytes.size() / sizeof(float));
  std::memcpy(floats.data(), bytes.data(), bytes.size());
  return std::any_of(floats.begin(), floats.end(), [](float f) { return std::isnan(f); });
}

TEST(Runtime, KeepingEverythingRunsTheWholeArena) {
  const ir::Graph graph = ParseOrDie(TrainText());
  const Program program = BuildOrDie(graph);
  const Outcome outcome = RunSteps(graph, program, 3);
  ASSERT_EQ(outcome.results.size(), 3u);
  for (const StepResult& result : outcome.results) {
    EXPECT_EQ(result.arena_high_water, program.arena_bytes);
    EXPECT_LE(result.peak_resident_bytes, program.arena_bytes);
    EXPECT_GT(result.peak_resident_bytes, 0);
    EXPECT_EQ(result.bytes_to_host, 0);
    EXPECT_EQ(result.bytes_to_device, 0);
    EXPECT_EQ(result.peak_host_bytes, 0);
    EXPECT_EQ(result.recompute_seconds, 0);
    EXPECT_GT(result.compute_seconds, 0);
    EXPECT_GE(result.seconds, result.compute_seconds);
  }
  for (const auto& [name, bytes] : outcome.state) EXPECT_FALSE(HasNaN(bytes)) << name;
  for (const auto& [name, bytes] : outcome.captured.back()) EXPECT_FALSE(HasNaN(bytes)) << name;
  ASSERT_EQ(outcome.captured.back().size(), 3u);
  // The parameter moved.
  TestBackend backend;
  std::unique_ptr<Runtime> fresh = CreateOrDie(program, backend);
  Initialize(graph, *fresh);
  EXPECT_NE(State(graph, *fresh, /*with_outputs=*/false).at("w"), outcome.state.at("w"));
}

// The kernels' workspace is the region at the top of the arena, handed to
// every kernel; no tensor lives there, so kernels that write all over it
// leave the step's results as they were.
TEST(Runtime, EveryKernelGetsTheWorkspaceRegionAndNoTensorLivesThere) {
  const ir::Graph graph = ParseOrDie(TrainText());
  const Program plain = BuildOrDie(graph);
  const Outcome expected = RunSteps(graph, plain, 2);
  program::Plan plan("pinned", graph);
  ASSERT_TRUE(program::ApplyPins(graph, plan).ok());
  absl::StatusOr<Program> with_workspace =
      program::Rewrite(graph, program::TrainingSchedule(graph), plan);
  ASSERT_TRUE(with_workspace.ok()) << StatusMessage(with_workspace.status());
  with_workspace->workspace_bytes = 1000;
  program::LayOutArena(*with_workspace);
  ASSERT_GE(with_workspace->workspace_offset, plain.arena_bytes);
  EXPECT_EQ(with_workspace->arena_bytes, with_workspace->workspace_offset + 1000);
  TestBackend backend;
  backend.ScribbleOverWorkspaces();
  const Outcome outcome = RunSteps(graph, *with_workspace, 2, &backend);
  EXPECT_EQ(outcome.state, expected.state);
  EXPECT_EQ(outcome.captured, expected.captured);
  const auto* arena = static_cast<const std::byte*>(backend.last_device_allocation());
  EXPECT_THAT(backend.workspaces(), ::testing::ElementsAre(std::pair<const void*, int64_t>(
                                        arena + with_workspace->workspace_offset, 1000)));
  // Without a region, kernels get none.
  TestBackend none;
  RunSteps(graph, plain, 1, &none);
  EXPECT_THAT(none.workspaces(),
              ::testing::ElementsAre(std::pair<const void*, int64_t>(nullptr, 0)));
}

models::ModelOptions SmallUNet() {
  models::ModelOptions options;
  options.batch = 1;
  options.height = options.width = 32;
  options.base_width = 4;
  options.classes = 8;  // Initialize's labels are below 8
  return options;
}

// A kernel's scratch buffer (U-Net's up-convolutions, padded on one side
// only, run on a zero-padded copy of x on the GPU) is allocated around its
// instruction alone: each such kernel is handed one of the declared size
// inside the arena's tensors, and kernels that write all over theirs leave
// the step's results as a Program without any gives.
TEST(Runtime, AKernelsScratchBufferIsItsOwn) {
  const autodiff::TrainingGraph training = program::testing::TrainingModel("unet", SmallUNet());
  const ir::Graph& graph = training.graph;
  const Program plain = BuildOrDie(graph);
  // The loss, and the input gradient of the last up-convolution.
  const std::initializer_list<std::string_view> capture = {"loss", "bwd/up4.up_conv.data"};
  const Outcome expected = RunSteps(graph, plain, 1, nullptr, capture);
  // Finite (these weights make U-Net's later steps overflow), so that bytes
  // written over would show.
  for (const auto& [name, bytes] : expected.state) EXPECT_FALSE(HasNaN(bytes)) << name;
  for (const auto& [name, bytes] : expected.captured.back()) EXPECT_FALSE(HasNaN(bytes)) << name;

  const int64_t limit = int64_t{64} << 20;  // a GPU preset's
  const std::vector<int64_t> scratch_bytes = program::ScratchBytesByNode(graph, limit);
  std::set<std::string> declaring;
  for (const ir::Node& node : graph.nodes()) {
    if (scratch_bytes[static_cast<size_t>(node.id)] > 0) declaring.insert(node.name);
  }
  // The forward, input-gradient and filter-gradient convolutions of each of
  // the four up-convolutions.
  EXPECT_EQ(declaring.size(), 12u);

  // Keeping everything, and rebuilding for the backward pass each
  // concatenation that an up-convolution's output went into: that runs the
  // up-convolution again (its output is freed after the forward pass), with
  // a scratch of its own.
  program::Plan recomputing("recompute the up-convolutions", graph);
  for (int level = 1; level <= 4; ++level) {
    recomputing.Recompute(*graph.FindValue(fmt::format("up{}.concat", level)));
  }
  for (const program::Plan& plan : {program::Plan("none", graph), recomputing}) {
    SCOPED_TRACE(plan.policy());
    absl::StatusOr<Program> with_scratch =
        program::Rewrite(graph, program::TrainingSchedule(graph), plan, scratch_bytes);
    ASSERT_TRUE(with_scratch.ok()) << StatusMessage(with_scratch.status());
    with_scratch->workspace_bytes = program::WorkspaceRegionBytes(graph, limit);
    program::LayOutArena(*with_scratch);
    std::set<std::string> recomputed_with_scratch;
    for (const Instruction& instruction : with_scratch->instructions) {
      if (instruction.kind == InstructionKind::kRecompute &&
          instruction.scratch != program::kNoBuffer) {
        recomputed_with_scratch.insert(graph.node(instruction.node).name);
      }
    }
    const std::set<std::string> up_convolutions = {"up1.up_conv", "up2.up_conv", "up3.up_conv",
                                                   "up4.up_conv"};
    EXPECT_EQ(recomputed_with_scratch,
              plan.policy() == "none" ? std::set<std::string>() : up_convolutions);

    TestBackend backend;
    backend.ScribbleOverWorkspaces();
    const Outcome outcome = RunSteps(graph, *with_scratch, 1, &backend, capture);
    EXPECT_EQ(outcome.state, expected.state);
    EXPECT_EQ(outcome.captured, expected.captured);

    const auto* arena = static_cast<const std::byte*>(backend.last_device_allocation());
    std::set<std::string> handed;
    for (const auto& [name, scratch] : backend.scratches()) {
      handed.insert(name);
      const auto [address, bytes] = scratch;
      EXPECT_EQ(bytes, scratch_bytes[static_cast<size_t>(*graph.FindNode(name))]) << name;
      EXPECT_GE(static_cast<const std::byte*>(address), arena) << name;
      EXPECT_LE(static_cast<const std::byte*>(address) + bytes,
                arena + with_scratch->workspace_offset)
          << name;
    }
    EXPECT_EQ(handed, declaring);
  }
}

// The policies' plans for U-Net on a GPU profile, which give its padded
// up-convolutions scratch buffers, under a budget that makes them spill and
// recompute: one step, every scratch and workspace scribbled over, gives the
// bits of keeping everything without any.
TEST(Runtime, PlansWithScratchBuffersGiveTheBitsOfKeepingEverything) {
  // Large enough for activations to outweigh the parameters.
  models::ModelOptions options = SmallUNet();
  options.batch = 2;
  options.height = options.width = 64;
  const autodiff::TrainingGraph training = program::testing::TrainingModel("unet", options);
  const ir::Graph& graph = training.graph;
  const std::initializer_list<std::string_view> capture = {"loss"};
  const Outcome expected = RunSteps(graph, BuildOrDie(graph), 1, nullptr, capture);
  for (const auto& [name, bytes] : expected.state) EXPECT_FALSE(HasNaN(bytes)) << name;

  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("h200-141g-pcie5");
  ASSERT_TRUE(profile.ok());
  const analysis::RooflineCostModel cost_model(*profile);
  auto plan = [&](std::string_view policy_name, int64_t budget_bytes) {
    planner::PlanningContext context(graph, cost_model, *profile,
                                     {.budget_bytes = budget_bytes, .max_evaluations = 30});
    absl::StatusOr<std::unique_ptr<planner::Policy>> policy = planner::MakePolicy(policy_name);
    SPILLWAY_CHECK(policy.ok(), "every listed policy can be made");
    absl::StatusOr<planner::PlanResult> result = planner::RunPolicy(**policy, context);
    EXPECT_TRUE(result.ok()) << StatusMessage(result.status());
    return result.ok() ? *std::move(result) : planner::PlanResult{};
  };
  const int64_t none_arena = plan("none", INT64_MAX).best.arena_bytes();
  const int64_t floor = plan("hybrid", 1).smallest_arena_bytes;
  ASSERT_LT(floor, none_arena);
  const int64_t budget = floor + (none_arena - floor) / 3;
  int spilling_or_recomputing = 0;
  for (std::string_view policy : {"swap", "recompute", "hybrid"}) {
    SCOPED_TRACE(policy);
    const planner::PlanResult result = plan(policy, budget);
    if (!result.feasible) continue;  // recompute alone may not get there
    const Program& program = result.best.program;
    spilling_or_recomputing +=
        program.host_bytes > 0 || !IndicesOf(program, InstructionKind::kRecompute).empty();
    TestBackend backend;
    backend.ScribbleOverWorkspaces();
    const Outcome outcome = RunSteps(graph, program, 1, &backend, capture);
    EXPECT_EQ(outcome.state, expected.state);
    EXPECT_EQ(outcome.captured, expected.captured);
    EXPECT_FALSE(backend.scratches().empty());
  }
  EXPECT_GT(spilling_or_recomputing, 0);
}

// Spilling and recomputing change where bytes live and when, never what the
// step computes.
TEST(Runtime, EveryPlanGivesBitwiseTheSameSteps) {
  const ir::Graph kept_graph = ParseOrDie(TrainText());
  const Program kept = BuildOrDie(kept_graph);
  const Outcome expected = RunSteps(kept_graph, kept, 3);
  const std::vector<std::map<std::string, std::string>> pin_sets = {
      {{"a", "spill"}},
      {{"r", "spill"}, {"s", "spill"}},
      {{"a", "spill"}, {"y", "spill"}, {"r", "spill"}, {"s", "spill"}},
      {{"r", "recompute"}},
      {{"y", "recompute"}},
      {{"a", "recompute"}, {"y", "recompute"}, {"r", "recompute"}},
      {{"a", "spill"}, {"y", "recompute"}, {"s", "spill"}},
  };
  for (const auto& pins : pin_sets) {
    std::string label;
    for (const auto& [value, decision] : pins) label += fmt::format("{}={} ", value, decision);
    SCOPED_TRACE(label);
    const ir::Graph graph = ParseOrDie(TrainText(pins));
    const Program program = BuildOrDie(graph);
    const bool recomputes = !IndicesOf(program, InstructionKind::kRecompute).empty();
    ASSERT_TRUE(program.host_bytes > 0 || recomputes);
    const Outcome outcome = RunSteps(graph, program, 3);
    ASSERT_EQ(outcome.results.size(), 3u);
    EXPECT_EQ(outcome.state, expected.state);
    EXPECT_EQ(outcome.captured, expected.captured);
    for (const StepResult& result : outcome.results) {
      EXPECT_LE(result.arena_high_water, program.arena_bytes);
      EXPECT_LE(result.peak_resident_bytes, program.arena_bytes);
      EXPECT_EQ(result.bytes_to_host, program.host_bytes);
      EXPECT_EQ(result.peak_host_bytes > 0, program.host_bytes > 0);
      EXPECT_LE(result.peak_host_bytes, program.host_bytes);
      EXPECT_EQ(result.recompute_seconds > 0, recomputes);
    }
  }
}

TEST(Runtime, SpilledBytesGoOutAndComeBack) {
  const ir::Graph graph = ParseOrDie(TrainText({{"r", "spill"}, {"s", "spill"}}));
  const Program program = BuildOrDie(graph);
  const Outcome outcome = RunSteps(graph, program, 1);
  ASSERT_EQ(outcome.results.size(), 1u);
  EXPECT_EQ(outcome.results[0].bytes_to_host, 2 * program::testing::kKiB);
  EXPECT_EQ(outcome.results[0].bytes_to_device, 2 * program::testing::kKiB);
}

TEST(Runtime, HostMemoryIsAllocatedOnceAndReused) {
  const ir::Graph graph = ParseOrDie(TrainText({{"r", "spill"}, {"s", "spill"}}));
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  const Outcome outcome = RunSteps(graph, program, 4, &backend);
  ASSERT_EQ(outcome.results.size(), 4u);
  // Two spilled tensors of the same size; the second may reuse the first's
  // block if that came back already, so at most two blocks, all from step 0.
  EXPECT_GE(backend.host_allocations(), 1);
  EXPECT_LE(backend.host_allocations(), 2);
}

// Every kernel and copy starts after the ones whose events it waits on have
// ended, and after the previous instruction of its stream.
void ExpectEventsHonoured(const Program& program, const TestBackend& backend) {
  // The n-th kernel or copy a stream ran is its n-th such instruction.
  std::vector<const TestBackend::Span*> span_of(program.instructions.size(), nullptr);
  std::array<size_t, program::kNumStreams> next{};
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    if (instruction.kind == InstructionKind::kAlloc || instruction.kind == InstructionKind::kFree) {
      continue;
    }
    const std::vector<TestBackend::Span>& log = backend.log(instruction.stream);
    size_t& n = next[StreamIndex(instruction.stream)];
    ASSERT_LT(n, log.size());
    span_of[i] = &log[n++];
  }
  for (size_t s = 0; s < program::kNumStreams; ++s) {
    EXPECT_EQ(next[s], backend.log(static_cast<Stream>(s)).size());
  }
  // The kernels and copies each event stands for: the last of its stream,
  // and for a free or an alloc also what it waited on.
  std::vector<std::vector<size_t>> recorded_by(static_cast<size_t>(program.num_events));
  std::array<int64_t, program::kNumStreams> last_span{-1, -1, -1};
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    int64_t& last = last_span[StreamIndex(instruction.stream)];
    if (span_of[i] != nullptr) last = static_cast<int64_t>(i);
    if (instruction.record == program::kNoEvent) continue;
    std::vector<size_t>& ends = recorded_by[static_cast<size_t>(instruction.record)];
    if (last >= 0) ends.push_back(static_cast<size_t>(last));
    for (program::EventId wait : instruction.waits) {
      const std::vector<size_t>& before = recorded_by[static_cast<size_t>(wait)];
      ends.insert(ends.end(), before.begin(), before.end());
    }
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    if (span_of[i] == nullptr) continue;
    for (program::EventId wait : program.instructions[i].waits) {
      for (size_t before : recorded_by[static_cast<size_t>(wait)]) {
        EXPECT_LT(span_of[before]->end, span_of[i]->start)
            << "instruction " << i << " started before instruction " << before << " ended\n"
            << program::ProgramToText(program);
      }
    }
  }
}

TEST(Runtime, StreamsWaitForTheEventsOfOthers) {
  const ir::Graph graph =
      ParseOrDie(TrainText({{"a", "spill"}, {"y", "recompute"}, {"s", "spill"}}));
  const Program program = BuildOrDie(graph);
  // The fetches wait for the compute stream to reach their step, the compute
  // stream for the fetches, and the frees for the spills.
  bool fetch_waits_for_compute = false;
  for (size_t i : IndicesOf(program, InstructionKind::kCopyToDevice)) {
    ASSERT_GT(i, 0u);
    fetch_waits_for_compute |= !program.instructions[i - 1].waits.empty();
  }
  EXPECT_TRUE(fetch_waits_for_compute) << program::ProgramToText(program);
  const Outcome expected = RunSteps(graph, program, 1);
  // A slow stream makes the others wait on it: a slow d2h stream leaves the
  // frees of spilled buffers pending when the compute stream reaches them.
  struct Timing {
    int jitter_us = 0;
    Stream slow = Stream::kCompute;
    int delay_us = 0;
  };
  for (const Timing& timing :
       {Timing{}, Timing{.jitter_us = 200}, Timing{.slow = Stream::kDeviceToHost, .delay_us = 2000},
        Timing{.slow = Stream::kHostToDevice, .delay_us = 2000},
        Timing{.slow = Stream::kCompute, .delay_us = 500}}) {
    SCOPED_TRACE(fmt::format("jitter {} us, {} stream {} us slower", timing.jitter_us,
                             program::StreamName(timing.slow), timing.delay_us));
    TestBackend backend;
    backend.set_jitter_us(timing.jitter_us);
    backend.set_delay_us(timing.slow, timing.delay_us);
    const Outcome outcome = RunSteps(graph, program, 1, &backend);
    EXPECT_EQ(outcome.state, expected.state);
    EXPECT_EQ(outcome.captured, expected.captured);
    ExpectEventsHonoured(program, backend);
  }
}

TEST(Runtime, TheTimelineSaysWhenEachInstructionRanAndHonoursTheEvents) {
  const ir::Graph graph =
      ParseOrDie(TrainText({{"a", "spill"}, {"y", "recompute"}, {"s", "spill"}}));
  const Program program = BuildOrDie(graph);
  // A slow copy stream, so that frees wait for their spills and the
  // compute stream for its fetches.
  TestBackend backend;
  backend.set_delay_us(Stream::kDeviceToHost, 2000);
  backend.set_delay_us(Stream::kHostToDevice, 2000);
  std::unique_ptr<Runtime> runtime = CreateOrDie(program, backend);
  Initialize(graph, *runtime);
  absl::StatusOr<StepResult> untimed = runtime->RunStep(StepOptions{});
  ASSERT_TRUE(untimed.ok()) << StatusMessage(untimed.status());
  EXPECT_TRUE(untimed->timeline.empty());
  StepOptions recording;
  recording.record_timeline = true;
  absl::StatusOr<StepResult> timed = runtime->RunStep(recording);
  ASSERT_TRUE(timed.ok()) << StatusMessage(timed.status());
  const std::vector<program::InstructionTiming>& timeline = timed->timeline;
  ASSERT_EQ(timeline.size(), program.instructions.size());

  // When each event was recorded: the end of its instruction (a free's
  // release is its one instant).
  std::vector<double> recorded_s(static_cast<size_t>(program.num_events), -1);
  std::array<double, program::kNumStreams> stream_end_s{};
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    const program::InstructionTiming& times = timeline[i];
    SCOPED_TRACE(::testing::Message() << "instruction " << i);
    EXPECT_GE(times.start_s, 0);
    EXPECT_LE(times.start_s, times.end_s);
    EXPECT_LE(times.end_s, timed->seconds);
    for (program::EventId wait : instruction.waits) {
      EXPECT_GE(recorded_s[static_cast<size_t>(wait)], 0) << "an event recorded before it";
      EXPECT_GE(times.start_s, recorded_s[static_cast<size_t>(wait)]);
    }
    if (instruction.record != program::kNoEvent) {
      recorded_s[static_cast<size_t>(instruction.record)] = times.end_s;
    }
    if (instruction.kind == InstructionKind::kFree) continue;  // applied by whichever stream
    // A stream runs its instructions one after the other, in program order.
    double& end = stream_end_s[StreamIndex(instruction.stream)];
    EXPECT_GE(times.start_s, end);
    end = times.end_s;
  }
  // The delayed copies take their 2 ms.
  for (size_t i : IndicesOf(program, InstructionKind::kCopyToHost)) {
    EXPECT_GE(timeline[i].end_s - timeline[i].start_s, 2e-3);
  }
}

// An asynchronous backend, shaped like a GPU: each stream is a queue that a
// worker thread of its own drains. RunKernel, Copy, RecordEvent and WaitEvent
// only enqueue; WaitEvent makes the queue wait for the latest record of the
// event issued before it (CUDA's semantics); SynchronizeStream waits for the
// queue to drain. The work itself is the reference backend's, and the
// compute stream's can be slowed. It logs, on one clock, when the host asked
// a stream to wait for an event and when each event completed.
class AsyncBackend final : public backends::Backend {
 public:
  explicit AsyncBackend(int compute_delay_us = 0) : compute_delay_us_(compute_delay_us) {
    for (size_t s = 0; s < program::kNumStreams; ++s) {
      workers_[s] = std::thread([this, s] { Drain(s); });
    }
  }
  ~AsyncBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }
  AsyncBackend(const AsyncBackend&) = delete;
  AsyncBackend& operator=(const AsyncBackend&) = delete;

  struct WaitRecord {
    program::EventId event;
    int64_t generation;  // the record it waits for
    int64_t issued_at;   // on the host
  };
  // Waits issued on the host and, per event and generation, when it completed.
  std::vector<WaitRecord> waits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return waits_;
  }
  int64_t completed_at(program::EventId event, int64_t generation) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_at_.at({event, generation});
  }

  std::string_view name() const override { return "async-test"; }
  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override {
    return reference_.AllocateDevice(bytes);
  }
  void FreeDevice(void* memory) override { reference_.FreeDevice(memory); }
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override {
    return reference_.AllocateHost(bytes);
  }
  void FreeHost(void* memory) override { reference_.FreeHost(memory); }

  absl::Status Prepare(const Program& program) override {
    std::lock_guard<std::mutex> lock(mutex_);
    issued_.assign(static_cast<size_t>(program.num_events), 0);
    completed_.assign(static_cast<size_t>(program.num_events), 0);
    return absl::OkStatus();
  }
  absl::Status RecordEvent(Stream stream, program::EventId event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t generation = ++issued_[static_cast<size_t>(event)];
    Enqueue(stream, [this, event, generation] {
      std::lock_guard<std::mutex> inner(mutex_);
      completed_[static_cast<size_t>(event)] = generation;
      completed_at_[{event, generation}] = clock_++;
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }
  absl::Status WaitEvent(Stream stream, program::EventId event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t generation = issued_[static_cast<size_t>(event)];
    waits_.push_back({event, generation, clock_++});
    Enqueue(stream, [this, event, generation] {
      std::unique_lock<std::mutex> inner(mutex_);
      changed_.wait(inner, [&] { return completed_[static_cast<size_t>(event)] >= generation; });
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }
  absl::Status RunKernel(Stream stream, const backends::KernelCall& call) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Enqueue(stream, [this, stream, node = &call.node, inputs = call.inputs, outputs = call.outputs,
                     context = call.context] {
      if (stream == Stream::kCompute && compute_delay_us_ > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(compute_delay_us_));
      }
      return reference_.RunKernel(stream, {*node, inputs, outputs, context});
    });
    return absl::OkStatus();
  }
  absl::Status Copy(Stream stream, void* destination, const void* source, int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Enqueue(stream, [this, stream, destination, source, bytes] {
      return reference_.Copy(stream, destination, source, bytes);
    });
    return absl::OkStatus();
  }
  absl::Status SynchronizeStream(Stream stream) override {
    const size_t s = StreamIndex(stream);
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queues_[s].empty() && !busy_[s]; });
    return std::exchange(errors_[s], absl::OkStatus());
  }
  absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) override {
    return reference_.Upload(device_destination, host_source, bytes);
  }
  absl::Status Download(void* host_destination, const void* device_source, int64_t bytes) override {
    return reference_.Download(host_destination, device_source, bytes);
  }

 private:
  using Task = std::function<absl::Status()>;

  // With mutex_ held.
  void Enqueue(Stream stream, Task task) {
    queues_[StreamIndex(stream)].push_back(std::move(task));
    changed_.notify_all();
  }

  void Drain(size_t s) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return stopping_ || !queues_[s].empty(); });
      if (queues_[s].empty()) return;  // stopping
      Task task = std::move(queues_[s].front());
      queues_[s].pop_front();
      busy_[s] = true;
      lock.unlock();
      absl::Status status = task();
      lock.lock();
      busy_[s] = false;
      if (errors_[s].ok()) errors_[s] = std::move(status);
      changed_.notify_all();
    }
  }

  const int compute_delay_us_;
  backends::reference::ReferenceBackend reference_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::array<std::deque<Task>, program::kNumStreams> queues_;
  std::array<bool, program::kNumStreams> busy_{};
  std::array<absl::Status, program::kNumStreams> errors_;
  std::vector<int64_t> issued_;     // per event: records issued on the host
  std::vector<int64_t> completed_;  // per event: the latest record the device passed
  int64_t clock_ = 0;
  std::vector<WaitRecord> waits_;
  std::map<std::pair<program::EventId, int64_t>, int64_t> completed_at_;
  std::array<std::thread, program::kNumStreams> workers_;
};

// The events are the device's: the runtime's host threads only wait for a
// record to be issued, so an asynchronous backend overlaps the streams, and
// the results are still those of the synchronous backend, bitwise.
TEST(Runtime, AnAsynchronousBackendGetsTheSameResultsWithoutTheHostWaitingForTheDevice) {
  const ir::Graph graph =
      ParseOrDie(TrainText({{"a", "spill"}, {"y", "recompute"}, {"s", "spill"}}));
  const Program program = BuildOrDie(graph);
  const Outcome expected = RunSteps(graph, program, 3);
  AsyncBackend backend(/*compute_delay_us=*/3000);
  const Outcome outcome = RunSteps(graph, program, 3, &backend);
  EXPECT_EQ(outcome.state, expected.state);
  EXPECT_EQ(outcome.captured, expected.captured);

  // Some stream was told to wait for an event before the device completed
  // it: its host thread went on while the slow compute stream was busy.
  const std::vector<AsyncBackend::WaitRecord> waits = backend.waits();
  ASSERT_FALSE(waits.empty()) << program::ProgramToText(program);
  int early = 0;
  for (const AsyncBackend::WaitRecord& wait : waits) {
    early += wait.issued_at < backend.completed_at(wait.event, wait.generation);
  }
  EXPECT_GT(early, 0);
}

TEST(Runtime, FiftyRunsGiveIdenticalResults) {
  const ir::Graph graph =
      ParseOrDie(TrainText({{"a", "spill"}, {"y", "recompute"}, {"s", "spill"}}));
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  backend.set_jitter_us(20);
  std::unique_ptr<Runtime> runtime = CreateOrDie(program, backend);
  std::map<std::string, Bytes> first;
  for (int run = 0; run < 50; ++run) {
    Initialize(graph, *runtime);
    backend.ClearLog();
    absl::StatusOr<StepResult> result = runtime->RunStep({});
    ASSERT_TRUE(result.ok()) << StatusMessage(result.status());
    ExpectEventsHonoured(program, backend);
    std::map<std::string, Bytes> state = State(graph, *runtime);
    if (run == 0) first = state;
    EXPECT_EQ(state, first) << "run " << run;
  }
}

// Fault injection: a failed step changes no persistent value, and the next
// step runs as if it never happened.
class FailedStep : public ::testing::Test {
 protected:
  FailedStep()
      : graph_(ParseOrDie(TrainText({{"a", "spill"}, {"r", "spill"}, {"s", "spill"}}))),
        program_(BuildOrDie(graph_)),
        expected_(RunSteps(graph_, program_, 1)) {}

  void ExpectFailureLeavesNoTrace(const StepOptions& failing, std::string_view message,
                                  TestBackend& backend) {
    std::unique_ptr<Runtime> runtime = CreateOrDie(program_, backend);
    Initialize(graph_, *runtime);
    const std::map<std::string, Bytes> before = State(graph_, *runtime, /*with_outputs=*/false);
    absl::StatusOr<StepResult> failed = runtime->RunStep(failing);
    ASSERT_FALSE(failed.ok());
    EXPECT_THAT(StatusMessage(failed.status()), HasSubstr(message));
    EXPECT_EQ(State(graph_, *runtime, /*with_outputs=*/false), before);
    Bytes loss(static_cast<size_t>(graph_.value(*graph_.FindValue("loss")).type.bytes()));
    EXPECT_EQ(runtime->Read(*graph_.FindValue("loss"), loss).code(),
              absl::StatusCode::kFailedPrecondition);

    backend.FailKernelOf("");
    StepOptions clean;
    clean.capture = ValuesNamed(graph_, {"dw", "dy", "s"});
    absl::StatusOr<StepResult> result = runtime->RunStep(clean);
    ASSERT_TRUE(result.ok()) << StatusMessage(result.status());
    EXPECT_EQ(State(graph_, *runtime), expected_.state);
  }

  const ir::Graph graph_;
  const Program program_;
  const Outcome expected_;
};

TEST_F(FailedStep, EveryCopyCanFail) {
  const size_t copies = IndicesOf(program_, InstructionKind::kCopyToHost).size() +
                        IndicesOf(program_, InstructionKind::kCopyToDevice).size();
  ASSERT_EQ(copies, 6u);
  for (size_t n = 0; n < copies; ++n) {
    SCOPED_TRACE(fmt::format("copy {}", n));
    TestBackend backend;
    StepOptions options;
    options.faults.fail_copy = static_cast<int64_t>(n);
    ExpectFailureLeavesNoTrace(options, fmt::format("injected failure of copy {} of the step", n),
                               backend);
  }
}

TEST_F(FailedStep, TheFailedCopyIsNamed) {
  TestBackend backend;
  std::unique_ptr<Runtime> runtime = CreateOrDie(program_, backend);
  StepOptions options;
  options.faults.fail_copy = 0;
  absl::StatusOr<StepResult> failed = runtime->RunStep(options);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(StatusMessage(failed.status()), HasSubstr("copy_to_host 'a' -> 'a@host' at step 0"));
}

TEST_F(FailedStep, EveryHostAllocationCanFail) {
  for (int64_t n = 0; n < 3; ++n) {
    SCOPED_TRACE(fmt::format("host allocation {}", n));
    TestBackend backend;
    StepOptions options;
    options.faults.fail_host_allocation = n;
    ExpectFailureLeavesNoTrace(options, "injected failure of host allocation", backend);
  }
  TestBackend backend;
  std::unique_ptr<Runtime> runtime = CreateOrDie(program_, backend);
  StepOptions options;
  options.faults.fail_host_allocation = 1;
  absl::StatusOr<StepResult> failed = runtime->RunStep(options);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(StatusMessage(failed.status()),
              HasSubstr("no host memory for 'r@host' (1024 bytes)"));
}

TEST_F(FailedStep, AFailingKernelStopsEveryStream) {
  // s is computed while a's and r's spills may still be running, and its
  // failure leaves the fetches waiting on events nothing will do the work of.
  for (std::string node : {"s", "dr", "dw", "a"}) {
    SCOPED_TRACE(node);
    TestBackend backend;
    backend.set_jitter_us(50);
    backend.FailKernelOf(node);
    ExpectFailureLeavesNoTrace({}, fmt::format("compute '{}'", node), backend);
  }
}

TEST(Runtime, CapturingAValueNoComputeWritesIsAnError) {
  const ir::Graph graph = ParseOrDie(TrainText());
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  std::unique_ptr<Runtime> runtime = CreateOrDie(program, backend);
  StepOptions options;
  options.capture = {*graph.FindValue("w")};
  EXPECT_EQ(runtime->RunStep(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Runtime, ReadAndWriteCheckTheValueAndItsSize) {
  const ir::Graph graph = ParseOrDie(TrainText());
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  std::unique_ptr<Runtime> runtime = CreateOrDie(program, backend);
  Bytes kib(1024);
  Bytes small(4);
  const ir::ValueId w = *graph.FindValue("w");
  EXPECT_TRUE(runtime->Write(w, kib).ok());
  EXPECT_EQ(runtime->Write(w, small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runtime->Read(w, small).code(), absl::StatusCode::kInvalidArgument);
  // An intermediate is gone after the step; a graph output has no value yet.
  EXPECT_EQ(runtime->Read(*graph.FindValue("dw"), kib).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runtime->Write(*graph.FindValue("loss"), kib).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runtime->Read(*graph.FindValue("loss"), kib).code(),
            absl::StatusCode::kFailedPrecondition);
}

// The arena is the only device memory: a Program that does not fit cannot run.
TEST(Runtime, AProgramOverTheBudgetIsRefused) {
  const ir::Graph graph = ParseOrDie(TrainText());
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(program, backend, program.arena_bytes - 1);
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(StatusMessage(runtime.status()),
              HasSubstr(fmt::format("needs {}", FormatBytes(program.arena_bytes))));
}

// Linux would hand out an arena larger than the machine and kill the process
// when its pages are touched: the runtime asks the backend first.
TEST(Runtime, AProgramLargerThanTheMachineIsRefusedBeforeAllocating) {
  const ir::Graph graph = ParseOrDie(TrainText({{"r", "spill"}, {"s", "spill"}}));
  const Program program = BuildOrDie(graph);
  ASSERT_GT(program.host_bytes, 0);
  const int64_t both = program.arena_bytes + program.host_bytes;
  const auto create = [&](backends::AvailableMemory available) {
    TestBackend backend;
    backend.set_available(available);
    absl::StatusOr<std::unique_ptr<Runtime>> runtime =
        Runtime::Create(program, backend, program.arena_bytes);
    return runtime.status();
  };
  // One pool (the CPU): the arena and the host pool together.
  EXPECT_TRUE(create({.device_bytes = both, .host_bytes = both, .shared = true}).ok());
  const absl::Status shared =
      create({.device_bytes = both - 1, .host_bytes = both - 1, .shared = true});
  EXPECT_EQ(shared.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(StatusMessage(shared),
              HasSubstr(fmt::format("needs {} of memory", FormatBytes(both))));
  // Two pools (a GPU): each against its own.
  EXPECT_TRUE(
      create(
          {.device_bytes = program.arena_bytes, .host_bytes = program.host_bytes, .shared = false})
          .ok());
  EXPECT_THAT(StatusMessage(create(
                  {.device_bytes = program.arena_bytes - 1, .host_bytes = {}, .shared = false})),
              HasSubstr("of device memory"));
  EXPECT_THAT(StatusMessage(create(
                  {.device_bytes = {}, .host_bytes = program.host_bytes - 1, .shared = false})),
              HasSubstr("of host memory"));
  EXPECT_TRUE(create({}).ok());  // unknown: nothing to check against
}

TEST(Runtime, ABufferOutsideTheArenaIsRefused) {
  const ir::Graph graph = ParseOrDie(TrainText());
  Program program = BuildOrDie(graph);
  program.buffers.back().offset = program.arena_bytes;
  TestBackend backend;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(program, backend, program.arena_bytes);
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(StatusMessage(runtime.status()),
              HasSubstr("the Program does not verify: invalid program: buffer 'loss'"));
  EXPECT_THAT(StatusMessage(runtime.status()), HasSubstr("lies outside the"));
}

TEST(Runtime, AMisalignedBufferIsRefused) {
  const ir::Graph graph = ParseOrDie(TrainText());
  Program program = BuildOrDie(graph);
  program.arena_bytes += backends::kTensorAlignment;
  program.buffers.back().offset += 4;
  TestBackend backend;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(program, backend, program.arena_bytes);
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(StatusMessage(runtime.status()),
              HasSubstr("not a multiple of the 256-byte alignment"));
}

// The layout's alignment covers the backends in the tree (256 bytes); a
// backend that needs more refuses the Program before allocating anything.
TEST(Runtime, ABackendNeedingAWiderAlignmentRefusesTheProgram) {
  const ir::Graph graph = ParseOrDie(TrainText());
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  backend.set_alignment(2 * program.alignment);
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(program, backend, program.arena_bytes);
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(StatusMessage(runtime.status()),
              HasSubstr("multiples of 256 bytes; the test backend needs multiples of 512"));
  backend.set_alignment(program.alignment);
  EXPECT_TRUE(Runtime::Create(program, backend, program.arena_bytes).ok());
}

// An op the backend cannot run is refused by name before anything runs.
TEST(Runtime, ANodeTheBackendCannotRunIsRefusedByName) {
  const ir::Graph graph = ParseOrDie(TrainText());
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  backend.set_unsupported(ir::OpKind::kBatchNorm);
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(program, backend, program.arena_bytes);
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(StatusMessage(runtime.status()),
              HasSubstr("the test backend cannot run node 'bn' (batch_norm): the test backend has "
                        "no kernel for it"));
}

TEST(Runtime, ACopyAfterTheFirstUpdateIsRefused) {
  // q's update is ready (and scheduled) before the backward node that reads
  // a back from the host.
  const ir::Graph graph = ParseOrDie(
      "graph late {\n"
      "  param %p: f32[256]\n"
      "  param %q: f32[256]\n"
      "  %a: f32[256] = relu(%p) {memory=\"spill\"}\n"
      "  %b: f32[256] = relu(%q)\n"
      "  %dq: f32[256] = relu_backward(%b, %b) @backward\n"
      "  %q.new: f32[256] = sgd_update(%q, %dq) {lr=0.1} @update\n"
      "  %dp: f32[256] = relu_backward(%a, %a) @backward\n"
      "  %p.new: f32[256] = sgd_update(%p, %dp) {lr=0.1} @update\n"
      "  output %p.new, %q.new\n"
      "}\n");
  const Program program = BuildOrDie(graph);
  TestBackend backend;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Create(program, backend, program.arena_bytes);
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(StatusMessage(runtime.status()),
              HasSubstr("runs after the first update, instruction"));
  EXPECT_THAT(StatusMessage(runtime.status()), HasSubstr("node 'q.new'"));
}

// The policies' Programs for real models, under a budget that makes them spill
// and recompute, train bitwise like keeping everything.
struct ModelCase {
  std::string name;
  models::ModelOptions options;
};

void PrintTo(const ModelCase& model, std::ostream* os) { *os << model.name; }

class EveryPolicy : public ::testing::TestWithParam<ModelCase> {};

TEST_P(EveryPolicy, TrainsBitwiseLikeKeepingEverything) {
  absl::StatusOr<ir::Graph> forward = models::BuildModel(GetParam().name, GetParam().options);
  ASSERT_TRUE(forward.ok()) << StatusMessage(forward.status());
  absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
  ASSERT_TRUE(training.ok()) << StatusMessage(training.status());
  const ir::Graph& graph = training->graph;

  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("v100-16g-nvlink2");
  ASSERT_TRUE(profile.ok());
  const analysis::RooflineCostModel cost_model(*profile);
  auto context = [&](int64_t budget_bytes) {
    return planner::PlanningContext(
        graph, cost_model, *profile,
        {.budget_bytes = budget_bytes, .time_limit_s = 10, .max_evaluations = 30});
  };
  auto plan = [&](std::string_view policy_name, planner::PlanningContext& planning) {
    absl::StatusOr<std::unique_ptr<planner::Policy>> policy = planner::MakePolicy(policy_name);
    SPILLWAY_CHECK(policy.ok(), "every listed policy can be made");
    absl::StatusOr<planner::PlanResult> result = planner::RunPolicy(**policy, planning);
    EXPECT_TRUE(result.ok()) << StatusMessage(result.status());
    return result.ok() ? *std::move(result) : planner::PlanResult{};
  };

  planner::PlanningContext unbounded = context(INT64_MAX);
  const planner::PlanResult none = plan("none", unbounded);
  ASSERT_TRUE(none.feasible);
  const std::initializer_list<std::string_view> loss = {};
  const Outcome expected = RunSteps(graph, none.best.program, 2, nullptr, loss);
  ASSERT_EQ(expected.results.size(), 2u);
  // The buffers' end is rounded up to the layout's alignment (256 bytes);
  // above it, on a GPU profile, the kernels' workspace region.
  const program::Program& kept = none.best.program;
  const int64_t tensors_end = kept.workspace_bytes > 0 ? kept.workspace_offset : kept.arena_bytes;
  EXPECT_LE(expected.results[0].arena_high_water, tensors_end);
  EXPECT_GT(expected.results[0].arena_high_water, tensors_end - 256);
  for (const auto& [name, bytes] : expected.state) EXPECT_FALSE(HasNaN(bytes)) << name;

  // A third of the way from swap's least-memory plan up to the least arena
  // `none` reaches.
  planner::PlanningContext probe = context(0);
  const int64_t need = plan("none", probe).smallest_arena_bytes;
  absl::StatusOr<planner::Evaluation> all_spilled =
      probe.Evaluate(planner::SwapPolicy::PlanFor(probe, -1, 0));
  ASSERT_TRUE(all_spilled.ok()) << StatusMessage(all_spilled.status());
  const int64_t budget = all_spilled->arena_bytes() + (need - all_spilled->arena_bytes()) / 3;
  ASSERT_LT(budget, need);
  int spilling_or_recomputing = 0;
  for (std::string_view policy : {"swap", "recompute", "hybrid"}) {
    SCOPED_TRACE(policy);
    planner::PlanningContext planning = context(budget);
    const planner::PlanResult result = plan(policy, planning);
    if (!result.feasible) continue;  // recompute alone may not get there
    const Program& program = result.best.program;
    spilling_or_recomputing +=
        program.host_bytes > 0 || !IndicesOf(program, InstructionKind::kRecompute).empty();
    const Outcome outcome = RunSteps(graph, program, 2, nullptr, loss);
    ASSERT_EQ(outcome.results.size(), 2u);
    EXPECT_EQ(outcome.state, expected.state);
    for (const StepResult& step : outcome.results) {
      EXPECT_LE(step.arena_high_water, budget);
      EXPECT_LE(step.peak_resident_bytes, budget);
      EXPECT_EQ(step.bytes_to_host, program.host_bytes);
    }
    // The same Program with the streams' order kept by device events alone.
    AsyncBackend asynchronous;
    EXPECT_EQ(RunSteps(graph, program, 2, &asynchronous, loss).state, expected.state);
  }
  EXPECT_GT(spilling_or_recomputing, 0);
}

models::ModelOptions SmallResNet() {
  models::ModelOptions options;
  options.batch = 2;
  options.height = options.width = 64;
  options.classes = 10;
  options.base_width = 2;
  return options;
}

models::ModelOptions SmallGpt2() {
  models::ModelOptions options;
  options.n_layer = 2;
  options.n_head = 2;
  options.batch = 4;
  options.d_model = 16;
  options.seq_len = 64;
  options.vocab = 8;
  return options;
}

INSTANTIATE_TEST_SUITE_P(Models, EveryPolicy,
                         ::testing::Values(ModelCase{"resnet18", SmallResNet()},
                                           ModelCase{"gpt2", SmallGpt2()}),
                         [](const ::testing::TestParamInfo<ModelCase>& param) {
                           return param.param.name;
                         });

}  // namespace
}  // namespace spillway::runtime
