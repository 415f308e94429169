#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "analysis/cost_model.h"
#include "fmt/format.h"
#include "sim/simulator.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/units.h"
#include "train/checkpoint.h"
#include "train/initializer.h"

namespace spillway::train {

std::string FormatChecksum(uint64_t checksum) { return fmt::format("0x{:016x}", checksum); }

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const ir::Graph& forward,
                                                         const TrainerOptions& options,
                                                         backends::Backend& backend) {
  std::unique_ptr<Trainer> trainer(new Trainer());
  trainer->options_ = options;
  // Read in Create only: the caller's values need not outlive it.
  trainer->options_.initial_values = nullptr;
  ASSIGN_OR_RETURN(autodiff::TrainingGraph training,
                   autodiff::BuildTrainingGraph(forward, options.optimizer));
  // The Program and the runtime point into the graph: it stays where it is.
  trainer->training_ = std::make_unique<autodiff::TrainingGraph>(std::move(training));
  const ir::Graph& graph = trainer->training_->graph;
  ASSIGN_OR_RETURN(trainer->task_, FindTask(graph));
  if (options.make_data) {
    ASSIGN_OR_RETURN(trainer->data_, options.make_data(graph, trainer->task_));
  } else {
    ASSIGN_OR_RETURN(trainer->data_, MakeDataSource(graph, options.data));
  }
  // Before planning, so that bad initial values fail fast, and after a check
  // that the machine can hold them.
  RETURN_IF_ERROR(CheckStateFitsHost(graph));
  const NamedValues none;
  ASSIGN_OR_RETURN(
      const auto state,
      InitialState(graph, options.data.seed,
                   options.initial_values != nullptr ? *options.initial_values : none));

  std::unique_ptr<const analysis::CostModel> cost_model =
      std::make_unique<analysis::RooflineCostModel>(
          options.hardware, analysis::RooflineCostModel::Options{.math_mode = options.math_mode});
  if (options.costs != nullptr) {
    ASSIGN_OR_RETURN(analysis::MeasuredCostModel measured,
                     analysis::MakeMeasuredCostModel(*options.costs, graph, std::move(cost_model)));
    cost_model = std::move(measured.model);
  }
  trainer->cost_model_ = std::move(cost_model);
  planner::PlannerOptions planner_options = options.planner;
  planner_options.budget_bytes = options.budget_bytes;
  planner::PlanningContext context(graph, *trainer->cost_model_, options.hardware, planner_options);
  ASSIGN_OR_RETURN(std::unique_ptr<planner::Policy> policy, planner::MakePolicy(options.policy));
  ASSIGN_OR_RETURN(trainer->plan_, planner::RunPolicy(*policy, context));
  if (!trainer->plan_.feasible) {
    return absl::ResourceExhaustedError(fmt::format(
        "policy {} cannot fit the step in a budget of {}: the smallest arena it reaches is {}; "
        "rerun with --budget {} or more",
        options.policy, FormatBytes(options.budget_bytes),
        FormatBytes(trainer->plan_.smallest_arena_bytes), trainer->plan_.smallest_arena_bytes));
  }
  ASSIGN_OR_RETURN(trainer->runtime_, runtime::Runtime::Create(trainer->plan_.best.program, backend,
                                                               options.budget_bytes));
  trainer->kernels_ = backend.KernelSummary();

  for (const auto& [value, bytes] : state) {
    RETURN_IF_ERROR(trainer->runtime_->Write(value, bytes));
  }
  return trainer;
}

absl::Status Trainer::WriteAdamStep() {
  const ir::ValueId counter = training_->adam_step;
  if (counter == ir::kInvalidValue) return absl::OkStatus();
  const int64_t value = kAdamInitialStep + step_;
  return runtime_->Write(counter, std::as_bytes(std::span(&value, 1)));
}

absl::StatusOr<sim::SimulationResult> Trainer::AccountMeasuredStep(
    std::span<const program::InstructionTiming> timeline) const {
  const program::Program& program = plan_.best.program;
  if (timeline.size() != program.instructions.size()) {
    return absl::InvalidArgumentError(
        fmt::format("a timeline of {} instructions for a Program of {} (was the step recorded?)",
                    timeline.size(), program.instructions.size()));
  }
  const sim::Simulator simulator(
      training_->graph, *cost_model_,
      sim::SimulatorOptions{.copy_engines = options_.hardware.copy_engines});
  return simulator.Account(program, timeline);
}

absl::StatusOr<StepStats> Trainer::Step(bool time_nodes, bool record_timeline) {
  ASSIGN_OR_RETURN(Batch batch, data_->BatchForStep(step_));
  for (const auto& [value, bytes] : batch.inputs) RETURN_IF_ERROR(runtime_->Write(value, bytes));
  runtime::StepOptions step_options;
  step_options.step = static_cast<uint64_t>(step_);
  step_options.time_nodes = time_nodes;
  step_options.record_timeline = record_timeline;
  StepStats stats;
  ASSIGN_OR_RETURN(stats.result, runtime_->RunStep(step_options));
  float loss = 0;
  RETURN_IF_ERROR(runtime_->Read(training_->loss, std::as_writable_bytes(std::span(&loss, 1))));
  ++step_;
  RETURN_IF_ERROR(WriteAdamStep());
  stats.step = step_;
  stats.loss = loss;
  if (!std::isfinite(loss)) {
    return absl::OutOfRangeError(fmt::format(
        "the loss is {} after step {}: training diverged (try a smaller --lr)", loss, step_));
  }
  return stats;
}

absl::StatusOr<TrainingSummary> Trainer::Run(const RunOptions& options) {
  TrainingSummary summary;
  summary.policy = options_.policy;
  summary.first_step = step_ + 1;
  summary.last_step = step_ + options.steps;
  summary.budget_bytes = options_.budget_bytes;
  summary.arena_bytes = runtime_->arena_bytes();
  summary.planning_s = plan_.planning_s;
  // A checkpoint that cannot be written is found before the steps run.
  if (!options.save_path.empty()) {
    RETURN_IF_ERROR(CheckOutputPath(options.save_path, "checkpoint"));
  }
  double seconds = 0;
  double recompute_seconds = 0;
  for (int64_t i = 0; i < options.steps; ++i) {
    const bool last = i + 1 == options.steps;
    ASSIGN_OR_RETURN(StepStats stats, Step(/*time_nodes=*/false, last && options.record_last_step));
    const runtime::StepResult& result = stats.result;
    summary.losses.push_back(stats.loss);
    summary.step_seconds.push_back(result.seconds);
    summary.arena_high_water_bytes =
        std::max(summary.arena_high_water_bytes, result.arena_high_water);
    summary.peak_host_bytes = std::max(summary.peak_host_bytes, result.peak_host_bytes);
    // The same Program every step: the same transfers.
    summary.bytes_to_host_per_step = result.bytes_to_host;
    summary.bytes_to_device_per_step = result.bytes_to_device;
    seconds += result.seconds;
    recompute_seconds += result.recompute_seconds;
    if (options.progress != nullptr) {
      options.progress->Update({.step = stats.step,
                                .last_step = summary.last_step,
                                .loss = stats.loss,
                                .seconds = result.seconds,
                                .recompute_seconds = result.recompute_seconds,
                                .samples = task_.batch,
                                .arena_high_water = result.arena_high_water,
                                .bytes_to_host = result.bytes_to_host});
    }
    if (last) summary.last_step_timeline = std::move(stats.result.timeline);
    const bool periodic = options.save_every > 0 && stats.step % options.save_every == 0;
    if (!options.save_path.empty() && (last || periodic)) {
      RETURN_IF_ERROR(Save(options.save_path));
      if (summary.checkpoints.empty() || summary.checkpoints.back() != options.save_path) {
        summary.checkpoints.push_back(options.save_path);
      }
    }
    if (!last && options.interrupted && options.interrupted()) {
      if (options.progress != nullptr) options.progress->Finish();
      return absl::CancelledError(fmt::format("training interrupted after step {}", stats.step));
    }
  }
  if (options.progress != nullptr) options.progress->Finish();
  const auto steps = static_cast<double>(std::max<int64_t>(options.steps, 1));
  summary.mean_step_s = seconds / steps;
  summary.mean_recompute_s = recompute_seconds / steps;
  summary.samples_per_s =
      seconds > 0 ? static_cast<double>(task_.batch * options.steps) / seconds : 0;
  ASSIGN_OR_RETURN(const uint64_t checksum, StateChecksum());
  summary.checksum = FormatChecksum(checksum);
  return summary;
}

absl::StatusOr<uint64_t> Trainer::StateChecksum() const {
  const ir::Graph& graph = training_->graph;
  uint64_t hash = kFnvOffset;
  std::vector<std::byte> bytes;
  for (ir::ValueId value : PersistentValues(graph)) {
    bytes.resize(static_cast<size_t>(graph.value(value).type.bytes()));
    RETURN_IF_ERROR(runtime_->Read(value, bytes));
    hash = Fnv1a(bytes, hash);
  }
  return hash;
}

absl::Status Trainer::Save(const std::string& path) const {
  const ir::Graph& graph = training_->graph;
  Checkpoint checkpoint;
  checkpoint.fingerprint = ModelFingerprint(graph);
  checkpoint.step = step_;
  checkpoint.seed = options_.data.seed;
  for (ir::ValueId id : PersistentValues(graph)) {
    const ir::Value& value = graph.value(id);
    CheckpointTensor tensor{
        .name = value.name, .kind = value.kind, .type = value.type, .bytes = {}};
    tensor.bytes.resize(static_cast<size_t>(value.type.bytes()));
    RETURN_IF_ERROR(runtime_->Read(id, tensor.bytes));
    checkpoint.tensors.push_back(std::move(tensor));
  }
  return Annotate(WriteCheckpoint(path, checkpoint), "saving the checkpoint");
}

absl::Status Trainer::Resume(const std::string& path) {
  ASSIGN_OR_RETURN(const Checkpoint checkpoint, ReadCheckpoint(path));
  const ir::Graph& graph = training_->graph;
  RETURN_IF_ERROR(CheckCheckpointMatches(checkpoint, graph));
  if (checkpoint.seed != options_.data.seed) {
    return absl::FailedPreconditionError(fmt::format(
        "checkpoint '{}' was saved from a run with --seed {}, this run has --seed {}: the data "
        "and dropout masks would differ; resume with --seed {}",
        path, checkpoint.seed, options_.data.seed, checkpoint.seed));
  }
  if (checkpoint.step < 0) {
    return absl::DataLossError(
        fmt::format("checkpoint '{}' is corrupt: its step is {}", path, checkpoint.step));
  }
  const std::vector<ir::ValueId> values = PersistentValues(graph);
  for (size_t i = 0; i < values.size(); ++i) {
    RETURN_IF_ERROR(runtime_->Write(values[i], checkpoint.tensors[i].bytes));
  }
  step_ = checkpoint.step;
  return absl::OkStatus();
}

}  // namespace spillway::train
