// The trainer: from a forward graph to trained parameters under a memory
// budget. It builds the training graph, plans it with one policy for the
// budget and a hardware profile, builds the Program, and runs it step after
// step on a backend through the runtime: write the batch, run the step, read
// the loss, advance Adam's step counter. It initializes the parameters from
// given values (an imported model's weights) and a seed, or resumes from a
// checkpoint; a resumed run continues bitwise as if it had never stopped
// (the data, dropout masks and Adam's counter are functions of the seed and
// the step, and the checkpoint holds everything else).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/cost_model.h"
#include "analysis/costs_file.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "backends/backend.h"
#include "ir/graph.h"
#include "planner/planner.h"
#include "runtime/runtime.h"
#include "sim/simulator.h"
#include "train/data.h"
#include "train/initializer.h"
#include "train/progress.h"

namespace spillway::train {

struct TrainerOptions {
  autodiff::OptimizerOptions optimizer;
  std::string policy = "hybrid";
  int64_t budget_bytes = 0;
  analysis::HardwareProfile hardware;  // what the planner costs the step with
  // The math the planner costs convolutions and matrix products in: the
  // backend's (session::BackendSpec::math_mode).
  analysis::MathMode math_mode = analysis::MathMode::kFp32;
  // How the planner searches; its budget is `budget_bytes` above.
  planner::PlannerOptions planner;
  // Source and seed of the data; the seed also initializes the parameters
  // that `initial_values` does not name. It should be the seed the forward
  // graph's dropout nodes were built with.
  DataOptions data;
  // Parameters and buffers to start from these bytes rather than from the
  // seed (an imported model's weights). Read by Trainer::Create only, so it
  // need not outlive it; null: none.
  const NamedValues* initial_values = nullptr;
  // Measured costs (`spillway profile`) to plan with instead of the
  // roofline's; nodes they lack keep the roofline's. Read by Create only;
  // null: none.
  const analysis::MeasuredCosts* costs = nullptr;
  // Makes the data source instead of `data.source` (the Python module's
  // arrays or callable): called once by Create with the training graph and
  // the task found in it. Null: MakeDataSource(graph, data).
  std::function<absl::StatusOr<std::unique_ptr<DataSource>>(const ir::Graph&, const TaskInfo&)>
      make_data = nullptr;
};

struct StepStats {
  int64_t step = 0;  // 1-based: steps completed after this one
  double loss = 0;
  runtime::StepResult result;
};

// A run of Trainer::Run, for reports and `spillway train --json`.
struct TrainingSummary {
  std::string policy;
  int64_t first_step = 0;  // 1-based, inclusive
  int64_t last_step = 0;
  std::vector<double> losses;
  std::vector<double> step_seconds;  // wall time of each step, in order
  std::string checksum;              // StateChecksum() at the end, "0x" and 16 hex digits
  int64_t budget_bytes = 0;
  int64_t arena_bytes = 0;             // planned
  int64_t arena_high_water_bytes = 0;  // measured, the most of any step
  int64_t peak_host_bytes = 0;
  int64_t bytes_to_host_per_step = 0;
  int64_t bytes_to_device_per_step = 0;
  // With RunOptions::record_last_step: the last step's instruction times.
  std::vector<program::InstructionTiming> last_step_timeline;
  double mean_step_s = 0;
  double mean_recompute_s = 0;
  double samples_per_s = 0;
  double planning_s = 0;
  std::vector<std::string> checkpoints;  // written during the run, in order
};

struct RunOptions {
  int64_t steps = 0;
  std::string save_path;   // empty: no checkpoints
  int64_t save_every = 0;  // 0: only after the last step
  Progress* progress = nullptr;
  // Polled after every step (and its checkpoint): true stops the run, which
  // fails with absl::CancelledError naming the last step done (Ctrl-C in the
  // Python module).
  std::function<bool()> interrupted = nullptr;
  // Record when each instruction of the last step ran
  // (TrainingSummary::last_step_timeline).
  bool record_last_step = false;
};

class Trainer {
 public:
  // Plans, creates the runtime on `backend` (which must outlive the trainer)
  // and initializes the state from options.initial_values and
  // options.data.seed. Errors: a bad graph or data source; a budget below the
  // smallest arena the policy reaches (named); an initial value that names no
  // parameter or buffer, or has another size than its type.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const ir::Graph& forward,
                                                         const TrainerOptions& options,
                                                         backends::Backend& backend);
  ~Trainer();

  // Loads a checkpoint: every persistent value and the step, replacing the
  // initial state whatever its source. Nothing changes on error (missing,
  // corrupt, another model or optimizer, another seed).
  absl::Status Resume(const std::string& path);
  absl::Status Save(const std::string& path) const;

  // Runs one step on the next batch; `time_nodes` times every node it runs
  // (StepResult::node_seconds).
  absl::StatusOr<StepStats> Step(bool time_nodes = false, bool record_timeline = false);

  // Runs options.steps steps, saving as asked, and summarizes them.
  absl::StatusOr<TrainingSummary> Run(const RunOptions& options);

  // FNV-1a 64 over the bytes of every parameter, buffer and optimizer state
  // in value id order (PersistentValues): equal checksums, equal state.
  absl::StatusOr<uint64_t> StateChecksum() const;

  int64_t steps_done() const { return step_; }
  const autodiff::TrainingGraph& training() const { return *training_; }
  const planner::PlanResult& plan() const { return plan_; }
  const TaskInfo& task() const { return task_; }
  const DataSource& data() const { return *data_; }
  runtime::Runtime& runtime() { return *runtime_; }
  // What runs the step's kernel calls, as the backend reported it once the
  // runtime had prepared them (Backend::KernelSummary); empty where the
  // backend says nothing.
  const std::string& kernels() const { return kernels_; }
  // A measured step of the plan's Program (StepResult::timeline) accounted as
  // the simulator accounts a simulated one, with the cost model the plan was
  // made with: to set beside plan().best.simulation on a trace. Errors: a
  // timeline of another Program (or none: the step did not record one).
  absl::StatusOr<sim::SimulationResult> AccountMeasuredStep(
      std::span<const program::InstructionTiming> timeline) const;

 private:
  Trainer() = default;
  absl::Status WriteAdamStep();

  TrainerOptions options_;
  std::unique_ptr<autodiff::TrainingGraph> training_;
  std::unique_ptr<const analysis::CostModel> cost_model_;  // what the plan was costed with
  planner::PlanResult plan_;
  TaskInfo task_;
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::string kernels_;
  int64_t step_ = 0;  // steps completed
};

// "0x" and 16 lower-case hex digits.
std::string FormatChecksum(uint64_t checksum);

}  // namespace spillway::train
