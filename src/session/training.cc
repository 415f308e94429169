#include "session/training.h"

#include <array>

#include "backends/cpu/cpu_isa.h"
#include "backends/registry.h"
#include "fmt/format.h"
#include "sim/chrome_trace.h"
#include "support/status_macros.h"

namespace spillway::session {
namespace {

// The CPU backend's ISA paths; an error in a build without the CPU backend
// (SPILLWAY_CPU_BACKEND=OFF), where a spec never names a working cpu backend.
absl::StatusOr<backends::cpu::CpuIsaPaths> DescribeCpuPaths() {
#ifdef SPILLWAY_NO_CPU_BACKEND
  return absl::FailedPreconditionError("this build has no CPU backend");
#else
  return backends::cpu::DescribeCpuIsaPaths();
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<backends::Backend>> MakeBackend(const BackendSpec& spec) {
  if (spec.math_mode != "fp32" && spec.math_mode != "tf32") {
    return absl::InvalidArgumentError(
        spec.math_mode == "fp16"
            ? "--math-mode fp16: no backend runs fp16 kernels yet (plan with it: spillway plan)"
            : fmt::format("--math-mode '{}': fp32 or tf32", spec.math_mode));
  }
  return backends::MakeBackend(spec.backend, {.threads = spec.threads,
                                              .tf32 = spec.math_mode == "tf32",
                                              .deterministic = spec.deterministic});
}

std::string DescribeBackend(const BackendSpec& spec) {
  std::string described = spec.backend;
  if (spec.backend == "cpu") {
    absl::StatusOr<backends::cpu::CpuIsaPaths> paths = DescribeCpuPaths();
    described = paths.ok() ? fmt::format("cpu, {} threads, oneDNN {} on {}, direct kernels {}",
                                         spec.threads, paths->onednn_version, paths->onednn_isa,
                                         paths->direct_kernels)
                           : fmt::format("cpu, {} threads", spec.threads);
  }
  if (spec.math_mode != "fp32") described += ", " + spec.math_mode;
  if (!spec.deterministic) described += ", nondeterministic";
  return described;
}

std::string DirectKernelPath(const BackendSpec& spec) {
  if (spec.backend != "cpu") return "";
  absl::StatusOr<backends::cpu::CpuIsaPaths> paths = DescribeCpuPaths();
  return paths.ok() ? paths->direct_kernels : "";
}

nlohmann::ordered_json BackendToJson(const BackendSpec& spec) {
  nlohmann::ordered_json json = {
      {"backend", spec.backend},     {"threads", spec.threads},
      {"math_mode", spec.math_mode}, {"deterministic", spec.deterministic},
      {"onednn_version", nullptr},   {"onednn_isa", nullptr},
      {"direct_kernels", nullptr}};
  if (spec.backend != "cpu") return json;
  absl::StatusOr<backends::cpu::CpuIsaPaths> paths = DescribeCpuPaths();
  if (!paths.ok()) return json;
  json["onednn_version"] = paths->onednn_version;
  json["onednn_isa"] = paths->onednn_isa;
  json["direct_kernels"] = paths->direct_kernels;
  return json;
}

std::optional<std::string> CostsMismatch(const analysis::MeasuredCosts& costs,
                                         const std::string& path, const BackendSpec& spec) {
  const analysis::MeasuredCosts::Configuration& on = costs.measured_on;
  const std::string isa = DirectKernelPath(spec);
  if (on.backend == spec.backend && on.threads == spec.threads && on.isa == isa &&
      on.math_mode == spec.math_mode) {
    return std::nullopt;
  }
  return fmt::format(
      "{} was measured on the {} backend with {} threads and {} kernels in {}; this run uses {} "
      "with {} threads and {} kernels in {}",
      path, on.backend, on.threads, on.isa, on.math_mode, spec.backend, spec.threads,
      isa.empty() ? "no direct" : isa, spec.math_mode);
}

absl::StatusOr<autodiff::OptimizerKind> ParseOptimizer(std::string_view name) {
  if (name == "adamw") return autodiff::OptimizerKind::kAdam;
  if (name == "sgd") return autodiff::OptimizerKind::kSgd;
  return absl::InvalidArgumentError(fmt::format("--optimizer '{}': sgd or adamw", name));
}

absl::StatusOr<train::TrainerOptions> MakeTrainerOptions(const TrainingRequest& request) {
  if (!request.workload.onnx.empty() && request.workload.loss.empty()) {
    return absl::InvalidArgumentError(
        "train --onnx needs --loss cross-entropy: the trainer feeds labels to the loss it adds "
        "over the model's logits");
  }
  train::TrainerOptions options;
  autodiff::OptimizerOptions& optimizer = options.optimizer;
  ASSIGN_OR_RETURN(optimizer.kind, ParseOptimizer(request.optimizer));
  if (optimizer.kind == autodiff::OptimizerKind::kAdam) {
    optimizer.decoupled = true;
    optimizer.lr = request.lr.value_or(kDefaultAdamLr);
  } else {
    optimizer.momentum = request.momentum;
    optimizer.lr = request.lr.value_or(kDefaultSgdLr);
  }
  optimizer.weight_decay = request.weight_decay;
  options.policy = request.policy;
  ASSIGN_OR_RETURN(options.hardware, analysis::LoadHardwareProfile(request.hardware));
  const std::optional<analysis::MathMode> math_mode = analysis::ParseMathMode(request.math_mode);
  if (!math_mode.has_value()) {
    return absl::InvalidArgumentError(
        fmt::format("--math-mode '{}': fp32, tf32 or fp16", request.math_mode));
  }
  options.math_mode = *math_mode;
  ASSIGN_OR_RETURN(options.budget_bytes, planner::ParseBudget(request.budget, options.hardware));
  options.planner = request.planner;
  options.data.source = request.data;
  // One seed for dropout (the model's), initialization and data.
  options.data.seed = static_cast<uint64_t>(request.workload.options.seed);
  return options;
}

std::string DescribeOptimizer(const autodiff::OptimizerOptions& o) {
  std::string text = o.kind == autodiff::OptimizerKind::kAdam
                         ? fmt::format("adamw, lr {:g}", o.lr)
                         : fmt::format("sgd, lr {:g}, momentum {:g}", o.lr, o.momentum);
  if (o.weight_decay > 0) text += fmt::format(", weight decay {:g}", o.weight_decay);
  return text;
}

nlohmann::ordered_json TrainingSummaryToJson(const TrainingRequest& request,
                                             const train::TrainerOptions& options,
                                             const BackendSpec& backend,
                                             const train::Trainer& trainer,
                                             const train::TrainingSummary& summary,
                                             const RunFiles& files) {
  const program::Plan& plan = trainer.plan().best.plan;
  const auto path_or_null = [](const std::string& path) {
    return path.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(path);
  };
  nlohmann::ordered_json json = {
      {"model", request.workload.onnx.empty() ? request.workload.model : request.workload.onnx},
      {"workload", DescribeWorkload(request.workload)},
      {"optimizer", request.optimizer},
      {"lr", options.optimizer.lr},
      {"policy", summary.policy},
      {"hardware", options.hardware.name},
  };
  json.update(BackendToJson(backend));
  json.update(nlohmann::ordered_json{
      {"kernels", trainer.kernels().empty() ? nlohmann::ordered_json(nullptr)
                                            : nlohmann::ordered_json(trainer.kernels())},
      {"data", trainer.data().Describe()},
      {"seed", options.data.seed},
      {"first_step", summary.first_step},
      {"last_step", summary.last_step},
      {"losses", summary.losses},
      {"initial_loss", summary.losses.front()},
      {"final_loss", summary.losses.back()},
      {"checksum", summary.checksum},
      {"budget_bytes", summary.budget_bytes},
      {"arena_bytes", summary.arena_bytes},
      {"arena_high_water_bytes", summary.arena_high_water_bytes},
      {"peak_host_bytes", summary.peak_host_bytes},
      {"bytes_to_host_per_step", summary.bytes_to_host_per_step},
      {"bytes_to_device_per_step", summary.bytes_to_device_per_step},
      {"spilled_tensors", plan.Count(program::Decision::kSpill)},
      {"refetched_tensors", plan.CountRefetched()},
      {"recomputed_tensors", plan.Count(program::Decision::kRecompute)},
      {"mean_step_s", summary.mean_step_s},
      {"predicted_step_s", trainer.plan().best.step_time_s()},
      {"step_seconds", summary.step_seconds},
      {"mean_recompute_s", summary.mean_recompute_s},
      {"samples_per_s", summary.samples_per_s},
      {"planning_s", summary.planning_s},
      {"resumed_from", path_or_null(files.resumed_from)},
      {"checkpoint", path_or_null(files.checkpoint)},
  });
  return json;
}

absl::StatusOr<std::string> TrainingTraceJson(const train::Trainer& trainer,
                                              const train::TrainingSummary& summary,
                                              const BackendSpec& backend) {
  ASSIGN_OR_RETURN(const sim::SimulationResult measured,
                   trainer.AccountMeasuredStep(summary.last_step_timeline));
  const planner::Evaluation& planned = trainer.plan().best;
  const std::string what = fmt::format("{} on {}", summary.policy, backend.backend);
  const std::string measured_title = fmt::format("measured: {}, step {}", what, summary.last_step);
  const std::string simulated_title = fmt::format("simulated: {}", what);
  const std::array<sim::TraceProcess, 2> processes = {
      sim::TraceProcess{measured_title, &measured},
      sim::TraceProcess{simulated_title, &planned.simulation}};
  return sim::ChromeTraceJson(planned.program, processes);
}

}  // namespace spillway::session
