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
  session::TrainingRequest request;  // the workload, budget, policy, optimizer and data
  int64_t steps = 20;
  std::string save;
  int64_t save_every = 0;
  std::string resume;
  std::string costs;  // a costs file to plan with (spillway profile)
  std::string trace;  // a Chrome trace of the last step, measured beside simulated
  BackendFlags backend;
  int64_t log_every = 10;
  bool json = false;
};

void AddTrainFlags(CLI::App& command, TrainFlags& flags) {
  AddWorkloadFlags(command, flags.request.workload);
  command.get_option("--seed")->description(
      "Seed of the parameters' initialization (with --onnx they start from the file's weights), "
      "the synthetic data, the shuffling of a data directory and the dropout masks");
  command
      .add_option("--budget", flags.request.budget,
                  "Device memory for the step: bytes (64MiB, 1.5GiB, 67108864) or a share of "
                  "the profile's memory (60%); default: the profile's memory less its reserve")
      ->check(NotEmpty());
  command
      .add_option("--policy", flags.request.policy,
                  "The planning policy (docs/planner.md says what each does)")
      ->check(CLI::IsMember(planner::PolicyNames()))
      ->capture_default_str();
  command.add_option("--steps", flags.steps, "Training steps to run (after the resumed ones)")
      ->check(PositiveInteger())
      ->capture_default_str();
  command.add_option("--optimizer", flags.request.optimizer, "sgd (with momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  command
      .add_option("--lr", flags.request.lr,
                  fmt::format("Learning rate (default {} for sgd, {} for adamw)",
                              session::kDefaultSgdLr, session::kDefaultAdamLr))
      ->check(Number(kPositiveNumber));
  command.add_option("--momentum", flags.request.momentum, "SGD momentum (0: plain SGD)")
      ->check(Number(kFraction))
      ->capture_default_str();
  command
      .add_option("--weight-decay", flags.request.weight_decay,
                  "Weight decay: L2 for sgd, decoupled for adamw")
      ->check(Number(kNonNegativeNumber))
      ->capture_default_str();
  command
      .add_option("--data", flags.request.data,
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
      .add_option("--hardware", flags.request.hardware,
                  "Hardware profile the planner costs the step with: a preset (see `spillway "
                  "hardware`) or a JSON file")
      ->check(NotEmpty())
      ->capture_default_str();
  AddPlannerFlags(command, flags.request.planner);
  command
      .add_option("--costs", flags.costs,
                  "Plan with the node and copy times a costs file measured (`spillway profile`) "
                  "instead of the roofline's")
      ->check(NotEmpty());
  command
      .add_option("--trace", flags.trace,
                  "Write the last step as a Chrome trace (open in Perfetto): the measured "
                  "streams beside the simulator's prediction of the same Program")
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

void PrintHeader(std::ostream& out, const TrainFlags& flags, const session::Workload& workload,
                 const train::TrainerOptions& options, train::Trainer& trainer) {
  const planner::PlanResult& plan = trainer.plan();
  fmt::print(out, "Workload     {} ({})\n", session::DescribeWorkload(flags.request.workload),
             session::DescribeOptimizer(options.optimizer));
  fmt::print(out,
             "Plan         {} on {}: arena {} of a {} budget, {} tensors spilled, {} recomputed "
             "(planned in {:.2f} s)\n",
             plan.policy, options.hardware.name, FormatBytes(plan.best.arena_bytes()),
             FormatBytes(options.budget_bytes), plan.best.plan.Count(program::Decision::kSpill),
             plan.best.plan.Count(program::Decision::kRecompute), plan.planning_s);
  fmt::print(out, "Backend      {}\n", session::DescribeBackend(flags.backend));
  if (!trainer.kernels().empty()) fmt::print(out, "Kernels      {}\n", trainer.kernels());
  fmt::print(out, "Data         {}\n", trainer.data().Describe());
  if (!flags.request.workload.onnx.empty()) {
    fmt::print(out, "Weights      {} parameters and buffers from {}\n",
               workload.initial_values.size(), flags.request.workload.onnx);
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
  if (!flags.trace.empty())
    fmt::print(out, "Trace        {} (step {} measured, beside the simulated step)\n", flags.trace,
               summary.last_step);
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
    if (!flags->trace.empty()) RETURN_IF_ERROR(CheckOutputPath(flags->trace, "trace"));
    // The planner costs the step in the math the backend runs.
    flags->request.math_mode = flags->backend.math_mode;
    ASSIGN_OR_RETURN(train::TrainerOptions options, session::MakeTrainerOptions(flags->request));
    ASSIGN_OR_RETURN(const session::Workload workload,
                     session::BuildWorkload(flags->request.workload));
    const ir::Graph& forward = workload.graph;
    options.initial_values = &workload.initial_values;
    std::optional<analysis::MeasuredCosts> costs;
    if (!flags->costs.empty()) {
      ASSIGN_OR_RETURN(costs, analysis::LoadCostsFile(flags->costs));
      options.costs = &*costs;
      // Times measured under another configuration still plan, but say so.
      if (const std::optional<std::string> warning =
              session::CostsMismatch(*costs, flags->costs, flags->backend)) {
        fmt::print(std::cerr, "warning: {}\n", *warning);
      }
    }
    ASSIGN_OR_RETURN(const std::unique_ptr<backends::Backend> backend,
                     session::MakeBackend(flags->backend));
    PlanningProgress planning;
    planning.Begin(options.policy);
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
    run.record_last_step = !flags->trace.empty();
    ASSIGN_OR_RETURN(const train::TrainingSummary summary, trainer->Run(run));
    if (!flags->trace.empty()) {
      ASSIGN_OR_RETURN(const std::string trace,
                       session::TrainingTraceJson(*trainer, summary, flags->backend));
      RETURN_IF_ERROR(WriteFileAtomically(flags->trace, trace, "trace"));
    }
    if (flags->json) {
      out << session::TrainingSummaryToJson(flags->request, options, flags->backend, *trainer,
                                            summary, {flags->resume, flags->save})
                 .dump(2)
          << "\n";
    } else {
      PrintSummary(out, *flags, *trainer, summary);
    }
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
