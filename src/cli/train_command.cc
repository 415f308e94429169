// `spillway train`: plan a workload for a budget and train it for real on the
// CPU backend, with checkpoints, progress and a summary. A built-in model
// starts from the seed, an ONNX model from the weights in its file.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <optional>

#include "analysis/hardware.h"
#include "cli/backend_flags.h"
#include "cli/commands.h"
#include "cli/option_validators.h"
#include "cli/planning_progress.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "nlohmann/json.hpp"
#include "planner/planner.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/terminal.h"
#include "support/units.h"
#include "train/trainer.h"

namespace spillway::cli {
namespace {

struct TrainFlags {
  WorkloadFlags workload;
  std::string hardware = "cpu";
  std::string budget;
  std::string policy = "hybrid";
  int64_t steps = 20;
  std::string optimizer = "sgd";
  std::optional<double> lr;
  double momentum = 0.9;
  double weight_decay = 0;
  std::string data = "synthetic";
  std::string save;
  int64_t save_every = 0;
  std::string resume;
  std::string costs;  // a costs file to plan with (spillway profile)
  BackendFlags backend;
  planner::PlannerOptions planner;  // all but the budget
  int64_t log_every = 10;
  bool json = false;
};

constexpr double kDefaultSgdLr = 0.01;
constexpr double kDefaultAdamLr = 1e-3;

void AddTrainFlags(CLI::App& command, TrainFlags& flags) {
  AddWorkloadFlags(command, flags.workload);
  command.get_option("--seed")->description(
      "Seed of the parameters' initialization (with --onnx they start from the file's weights), "
      "the synthetic data, the shuffling of a data directory and the dropout masks");
  command
      .add_option("--budget", flags.budget,
                  "Device memory for the step: bytes (64MiB, 1.5GiB, 67108864) or a share of "
                  "the profile's memory (60%); default: the profile's memory less its reserve")
      ->check(NotEmpty());
  command
      .add_option("--policy", flags.policy,
                  "The planning policy (docs/planner.md says what each does)")
      ->check(CLI::IsMember(planner::PolicyNames()))
      ->capture_default_str();
  command.add_option("--steps", flags.steps, "Training steps to run (after the resumed ones)")
      ->check(PositiveInteger())
      ->capture_default_str();
  command.add_option("--optimizer", flags.optimizer, "sgd (with momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  command
      .add_option("--lr", flags.lr,
                  fmt::format("Learning rate (default {} for sgd, {} for adamw)", kDefaultSgdLr,
                              kDefaultAdamLr))
      ->check(Number(kPositiveNumber));
  command.add_option("--momentum", flags.momentum, "SGD momentum (0: plain SGD)")
      ->check(Number(kFraction))
      ->capture_default_str();
  command
      .add_option("--weight-decay", flags.weight_decay,
                  "Weight decay: L2 for sgd, decoupled for adamw")
      ->check(Number(kNonNegativeNumber))
      ->capture_default_str();
  command
      .add_option("--data", flags.data,
                  "'synthetic' (learnable, generated from --seed) or a directory of images: "
                  "DIR/<class>/*.png|jpg for classifiers, DIR/images + DIR/masks for "
                  "segmentation (docs/training.md)")
      ->check(NotEmpty())
      ->capture_default_str();
  command
      .add_option("--save", flags.save,
                  "Write a checkpoint here after the last step (and every --save-every steps)")
      ->check(NotEmpty());
  command
      .add_option("--save-every", flags.save_every, "Also save every K steps (0: only at the end)")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  command
      .add_option("--resume", flags.resume,
                  "Continue from a checkpoint of the same model, optimizer and --seed")
      ->check(NotEmpty());
  AddBackendFlags(command, flags.backend);
  command
      .add_option("--hardware", flags.hardware,
                  "Hardware profile the planner costs the step with: a preset (see `spillway "
                  "hardware`) or a JSON file")
      ->check(NotEmpty())
      ->capture_default_str();
  AddPlannerFlags(command, flags.planner);
  command
      .add_option("--costs", flags.costs,
                  "Plan with the node and copy times a costs file measured (`spillway profile`) "
                  "instead of the roofline's")
      ->check(NotEmpty());
  command
      .add_option("--log-every", flags.log_every,
                  "When output is not a terminal, print a progress line every K steps")
      ->check(PositiveInteger())
      ->capture_default_str();
  command.add_flag("--json", flags.json,
                   "Print the summary as JSON on stdout (progress goes to stderr); keys in "
                   "docs/training.md");
}

absl::StatusOr<train::TrainerOptions> MakeTrainerOptions(const TrainFlags& flags) {
  train::TrainerOptions options;
  autodiff::OptimizerOptions& optimizer = options.optimizer;
  if (flags.optimizer == "adamw") {
    optimizer.kind = autodiff::OptimizerKind::kAdam;
    optimizer.decoupled = true;
    optimizer.lr = flags.lr.value_or(kDefaultAdamLr);
  } else {
    optimizer.kind = autodiff::OptimizerKind::kSgd;
    optimizer.momentum = flags.momentum;
    optimizer.lr = flags.lr.value_or(kDefaultSgdLr);
  }
  optimizer.weight_decay = flags.weight_decay;
  options.policy = flags.policy;
  ASSIGN_OR_RETURN(options.hardware, analysis::LoadHardwareProfile(flags.hardware));
  ASSIGN_OR_RETURN(options.budget_bytes, planner::ParseBudget(flags.budget, options.hardware));
  options.planner = flags.planner;
  options.data.source = flags.data;
  // One seed for dropout (the model's), initialization and data.
  options.data.seed = static_cast<uint64_t>(flags.workload.options.seed);
  return options;
}

std::string DescribeOptimizer(const train::TrainerOptions& options) {
  const autodiff::OptimizerOptions& o = options.optimizer;
  std::string text = o.kind == autodiff::OptimizerKind::kAdam
                         ? fmt::format("adamw, lr {:g}", o.lr)
                         : fmt::format("sgd, lr {:g}, momentum {:g}", o.lr, o.momentum);
  if (o.weight_decay > 0) text += fmt::format(", weight decay {:g}", o.weight_decay);
  return text;
}

nlohmann::ordered_json SummaryToJson(const TrainFlags& flags, const train::TrainerOptions& options,
                                     train::Trainer& trainer,
                                     const train::TrainingSummary& summary) {
  const program::Plan& plan = trainer.plan().best.plan;
  nlohmann::ordered_json json = {
      {"model", flags.workload.onnx.empty() ? flags.workload.model : flags.workload.onnx},
      {"workload", DescribeWorkload(flags.workload)},
      {"optimizer", flags.optimizer},
      {"lr", options.optimizer.lr},
      {"policy", summary.policy},
      {"hardware", options.hardware.name},
  };
  json.update(BackendToJson(flags.backend));
  json.update(nlohmann::ordered_json{
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
      {"recomputed_tensors", plan.Count(program::Decision::kRecompute)},
      {"mean_step_s", summary.mean_step_s},
      {"predicted_step_s", trainer.plan().best.step_time_s()},
      {"step_seconds", summary.step_seconds},
      {"mean_recompute_s", summary.mean_recompute_s},
      {"samples_per_s", summary.samples_per_s},
      {"planning_s", summary.planning_s},
      {"resumed_from", flags.resume.empty() ? nlohmann::ordered_json(nullptr)
                                            : nlohmann::ordered_json(flags.resume)},
      {"checkpoint",
       flags.save.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(flags.save)},
  });
  return json;
}

void PrintHeader(std::ostream& out, const TrainFlags& flags, const Workload& workload,
                 const train::TrainerOptions& options, train::Trainer& trainer) {
  const planner::PlanResult& plan = trainer.plan();
  fmt::print(out, "Workload     {} ({})\n", DescribeWorkload(flags.workload),
             DescribeOptimizer(options));
  fmt::print(out,
             "Plan         {} on {}: arena {} of a {} budget, {} tensors spilled, {} recomputed "
             "(planned in {:.2f} s)\n",
             plan.policy, options.hardware.name, FormatBytes(plan.best.arena_bytes()),
             FormatBytes(options.budget_bytes), plan.best.plan.Count(program::Decision::kSpill),
             plan.best.plan.Count(program::Decision::kRecompute), plan.planning_s);
  fmt::print(out, "Backend      {}\n", DescribeBackend(flags.backend));
  fmt::print(out, "Data         {}\n", trainer.data().Describe());
  if (!flags.workload.onnx.empty()) {
    fmt::print(out, "Weights      {} parameters and buffers from {}\n",
               workload.initial_values.size(), flags.workload.onnx);
  }
  if (!flags.resume.empty()) {
    fmt::print(out, "Resumed      from {} after step {}\n", flags.resume, trainer.steps_done());
  }
}

void PrintSummary(std::ostream& out, const TrainFlags& flags, const train::Trainer& trainer,
                  const train::TrainingSummary& summary) {
  const std::string unit = trainer.task().task == train::Task::kLanguageModel ? "seq" : "img";
  fmt::print(out, "Loss         {:.4f} at step {} -> {:.4f} at step {}\n", summary.losses.front(),
             summary.first_step, summary.losses.back(), summary.last_step);
  fmt::print(out, "Memory       arena high-water {} (planned arena {}, budget {}); host pool {}\n",
             FormatBytes(summary.arena_high_water_bytes), FormatBytes(summary.arena_bytes),
             FormatBytes(summary.budget_bytes), FormatBytes(summary.peak_host_bytes));
  fmt::print(out, "Transfers    {} to host, {} back per step\n",
             FormatBytes(summary.bytes_to_host_per_step),
             FormatBytes(summary.bytes_to_device_per_step));
  fmt::print(out, "Time         {:.3f} s per step, {:.3f} s of it recomputing; {:.1f} {}/s\n",
             summary.mean_step_s, summary.mean_recompute_s, summary.samples_per_s, unit);
  fmt::print(out, "Checksum     {}\n", summary.checksum);
  if (!flags.save.empty())
    fmt::print(out, "Checkpoint   {} (step {})\n", flags.save, summary.last_step);
}

}  // namespace

CommandRunner AddTrainCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "train",
      "Train a workload for real on the CPU under a memory budget, as the chosen policy plans it; "
      "--onnx needs --loss cross-entropy and starts from the file's weights");
  auto flags = std::make_shared<TrainFlags>();
  AddTrainFlags(*command, *flags);
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    if (flags->save_every > 0 && flags->save.empty()) {
      return absl::InvalidArgumentError("--save-every needs --save PATH");
    }
    // Before planning and training, not after them.
    if (!flags->save.empty()) RETURN_IF_ERROR(CheckOutputPath(flags->save, "checkpoint"));
    if (!flags->workload.onnx.empty() && flags->workload.loss.empty()) {
      return absl::InvalidArgumentError(
          "train --onnx needs --loss cross-entropy: the trainer feeds labels to the loss it adds "
          "over the model's logits");
    }
    ASSIGN_OR_RETURN(train::TrainerOptions options, MakeTrainerOptions(*flags));
    ASSIGN_OR_RETURN(const Workload workload, BuildWorkload(flags->workload));
    const ir::Graph& forward = workload.graph;
    options.initial_values = &workload.initial_values;
    std::optional<analysis::MeasuredCosts> costs;
    if (!flags->costs.empty()) {
      ASSIGN_OR_RETURN(costs, analysis::LoadCostsFile(flags->costs));
      options.costs = &*costs;
      // Times measured under another configuration still plan, but say so.
      const std::string isa = DirectKernelPath(flags->backend);
      if (costs->measured_on.backend != flags->backend.backend ||
          costs->measured_on.threads != flags->backend.threads || costs->measured_on.isa != isa) {
        fmt::print(std::cerr,
                   "warning: {} was measured on the {} backend with {} threads and {} kernels; "
                   "this run uses {} with {} threads and {} kernels\n",
                   flags->costs, costs->measured_on.backend, costs->measured_on.threads,
                   costs->measured_on.isa, flags->backend.backend, flags->backend.threads,
                   isa.empty() ? "no direct" : isa);
      }
    }
    ASSIGN_OR_RETURN(const std::unique_ptr<backends::Backend> backend, MakeBackend(flags->backend));
    PlanningProgress planning;
    planning.Begin(options.policy, 0);
    options.planner.progress = [&planning](int evaluations) { planning.Draw(evaluations); };
    absl::StatusOr<std::unique_ptr<train::Trainer>> created =
        train::Trainer::Create(forward, options, *backend);
    planning.Clear();
    ASSIGN_OR_RETURN(std::unique_ptr<train::Trainer> trainer, std::move(created));
    if (!flags->resume.empty()) RETURN_IF_ERROR(trainer->Resume(flags->resume));

    // With --json, stdout holds only the JSON: progress goes to stderr.
    std::ostream& log = flags->json ? std::cerr : out;
    const int log_fd = flags->json ? STDERR_FILENO : STDOUT_FILENO;
    if (!flags->json) PrintHeader(out, *flags, workload, options, *trainer);
    const bool terminal = isatty(log_fd) != 0;
    // Ctrl-C leaves the redrawn line with a newline, not under the prompt.
    if (terminal) EndLineOnInterrupt();
    train::Progress progress(
        log, terminal ? train::Progress::Mode::kTerminal : train::Progress::Mode::kPlain,
        flags->log_every, trainer->task().task == train::Task::kLanguageModel ? "seq" : "img",
        terminal ? TerminalColumns(log_fd) : 0);
    train::RunOptions run;
    run.steps = flags->steps;
    run.save_path = flags->save;
    run.save_every = flags->save_every;
    run.progress = &progress;
    ASSIGN_OR_RETURN(const train::TrainingSummary summary, trainer->Run(run));
    if (flags->json) {
      out << SummaryToJson(*flags, options, *trainer, summary).dump(2) << "\n";
    } else {
      PrintSummary(out, *flags, *trainer, summary);
    }
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
