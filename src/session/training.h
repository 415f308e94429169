// Training sessions: the backend a run uses, the trainer's options from a
// request, and the run's summary in the JSON form `spillway train --json`
// prints (docs/training.md). The CLI and the Python module share them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "analysis/costs_file.h"
#include "backends/backend.h"
#include "nlohmann/json.hpp"
#include "planner/planner.h"
#include "session/workload.h"
#include "train/trainer.h"

namespace spillway::session {

// A backend from the registry (backends/registry.h) and its threads.
struct BackendSpec {
  std::string backend = "cpu";
  int threads = 2;
  // fp32, or tf32 (TF32 convolutions on the cuda backend); the planner costs
  // the step in the same mode. fp16 plans only: no backend runs it.
  std::string math_mode = "fp32";
  // False allows the cuda backend's nondeterministic algorithms.
  bool deterministic = true;
};

// The backend the spec names, in its math mode (a one-line error for a mode
// the backend does not run). The CPU backend's ISA switches
// (ONEDNN_MAX_CPU_ISA, SPILLWAY_DIRECT_KERNELS) are checked first, so a bad
// value is a one-line error rather than a silent default.
absl::StatusOr<std::unique_ptr<backends::Backend>> MakeBackend(const BackendSpec& spec);

// "cpu, 2 threads, oneDNN 2.6.3 on avx512_core, direct kernels avx512", or
// "reference"; a math mode other than fp32 and nondeterminism are named
// ("cuda, tf32, nondeterministic").
std::string DescribeBackend(const BackendSpec& spec);

// The CPU backend's direct-kernel path ("avx512", "avx2", "generic") for
// this spec; empty for another backend or when it cannot be told.
std::string DirectKernelPath(const BackendSpec& spec);

// {"backend", "threads", "onednn_version", "onednn_isa", "direct_kernels"}:
// the configuration bits are reproducible for (docs/training.md). The last
// three are null for the reference backend.
nlohmann::ordered_json BackendToJson(const BackendSpec& spec);

// A warning when a costs file was measured under another configuration than
// this backend's (the times still plan); nullopt when they agree.
std::optional<std::string> CostsMismatch(const analysis::MeasuredCosts& costs,
                                         const std::string& path, const BackendSpec& spec);

struct TrainingRequest {
  WorkloadSpec workload;
  std::string hardware = "cpu";  // the profile the planner costs the step with
  std::string budget;            // as PlanningRequest::budget
  std::string policy = "hybrid";
  std::string optimizer = "sgd";    // sgd (with momentum) or adamw
  std::optional<double> lr;         // default: kDefaultSgdLr or kDefaultAdamLr
  double momentum = 0.9;            // sgd only
  double weight_decay = 0;          // L2 for sgd, decoupled for adamw
  std::string data = "synthetic";   // or a directory of images (docs/training.md)
  std::string math_mode = "fp32";   // what the planner costs the step in (BackendSpec's)
  planner::PlannerOptions planner;  // all but the budget
};

// "sgd" (with momentum) or "adamw": the optimizer's kind; a one-line error
// naming --optimizer otherwise. Planning and training read the name alike.
absl::StatusOr<autodiff::OptimizerKind> ParseOptimizer(std::string_view name);

inline constexpr double kDefaultSgdLr = 0.01;
inline constexpr double kDefaultAdamLr = 1e-3;

// The trainer's options for the request: optimizer, profile, budget, policy,
// planner, data and the one seed (the model's) for dropout, initialization
// and data. One-line errors for a bad optimizer, profile or budget, and for
// an ONNX workload without a loss to feed labels to.
absl::StatusOr<train::TrainerOptions> MakeTrainerOptions(const TrainingRequest& request);

// "sgd, lr 0.01, momentum 0.9" or "adamw, lr 0.001", with the weight decay.
std::string DescribeOptimizer(const autodiff::OptimizerOptions& optimizer);

// Where a run came from and went to, for its summary.
struct RunFiles {
  std::string resumed_from;  // empty: a fresh start
  std::string checkpoint;    // empty: none written
};

// The run as `spillway train --json` prints it.
nlohmann::ordered_json TrainingSummaryToJson(const TrainingRequest& request,
                                             const train::TrainerOptions& options,
                                             const BackendSpec& backend,
                                             const train::Trainer& trainer,
                                             const train::TrainingSummary& summary,
                                             const RunFiles& files);

// The last step of a run that recorded it (RunOptions::record_last_step) as
// a Chrome trace: the measured step beside the simulator's prediction for the
// same Program (sim::ChromeTraceJson), as `spillway train --trace` writes it.
absl::StatusOr<std::string> TrainingTraceJson(const train::Trainer& trainer,
                                              const train::TrainingSummary& summary,
                                              const BackendSpec& backend);

}  // namespace spillway::session
