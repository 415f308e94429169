#include "cli/plan_flags.h"

#include "cli/option_validators.h"
#include "fmt/format.h"

namespace spillway::cli {

void AddPlanFlags(CLI::App& command, PlanFlags& flags, bool one_budget) {
  AddWorkloadFlags(command, flags.workload, GraphFiles::kAccepted);
  command.add_option("--optimizer", flags.optimizer, "Optimizer whose state the step holds")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  command
      .add_option("--hardware", flags.hardware,
                  "Hardware profile: a preset (see `spillway hardware`) or a JSON file")
      ->check(NotEmpty())
      ->capture_default_str();
  if (one_budget) {
    command
        .add_option("--budget", flags.budget,
                    "Device memory for the step: bytes (16GiB, 512MiB, 17179869184) or a share "
                    "of the profile's memory (60%); default: the profile's memory less its "
                    "reserve")
        ->check(NotEmpty());
  }
  command
      .add_option("--math-mode", flags.math_mode,
                  "Arithmetic of convolutions and matrix products, for their compute rate; fp16 is "
                  "mixed precision (tensors also move in 2 bytes)")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16"}))
      ->capture_default_str();
  AddPlannerFlags(command, flags.planner);
  command.add_flag(
      "--no-link", flags.no_link,
      "The device has no link to host memory: plan with recomputation only (none, recompute "
      "and optimal run; the policies that spill refuse)");
  command
      .add_option("--costs", flags.costs,
                  "Plan and simulate with the node and copy times a costs file measured "
                  "(`spillway profile`); nodes it lacks keep the roofline's")
      ->check(NotEmpty());
  if (one_budget) {
    command.add_flag("--bound", flags.bound,
                     "Also prove a lower bound on the step of every plan that fits (a linear "
                     "program solved by Clp; any graph size) and print each plan's gap to it");
  }
  command.add_flag("--json", flags.json, "Print the result as JSON (bytes, seconds, FLOPs)");
}

absl::Status CheckGraphFileFlags(const CLI::App& command, const PlanFlags& flags) {
  if (flags.workload.graph.empty()) {
    for (const char* option : {"--graph-duration", "--graph-size", "--graph-time-unit"}) {
      if (command.count(option) > 0) {
        return absl::InvalidArgumentError(fmt::format("{} applies to --graph only", option));
      }
    }
    return absl::OkStatus();
  }
  for (const char* option : {"--optimizer", "--math-mode", "--costs"}) {
    if (command.count(option) > 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{} does not apply to --graph: the file is the whole step, with its own costs", option));
    }
  }
  return absl::OkStatus();
}

session::PlanningRequest MakeRequest(const PlanFlags& flags) {
  session::PlanningRequest request;
  request.workload = flags.workload;
  request.optimizer = flags.optimizer;
  request.hardware = flags.hardware;
  request.budget = flags.budget;
  request.math_mode = flags.math_mode;
  request.planner = flags.planner;
  request.host_link = !flags.no_link;
  request.costs = flags.costs;
  return request;
}

}  // namespace spillway::cli
