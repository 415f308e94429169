// The flags `plan`, `compare` and `sweep` share, and what they do with
// them: the session's request, the progress line, percentages as printed.
#pragma once

#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "cli/planning_progress.h"
#include "cli/workload_flags.h"
#include "fmt/ostream.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "session/planning.h"

namespace spillway::cli {

struct PlanFlags {
  WorkloadFlags workload;
  std::string optimizer = "sgd";
  std::string hardware = "v100-16g-nvlink2";
  std::string budget;
  std::string math_mode = "fp32";
  std::string policy = "hybrid";
  planner::PlannerOptions planner;  // all but the budget
  std::string trace_path;
  std::string memory_plot_path;
  std::string program_path;
  bool json = false;
  planner::OptimalOptions optimal;  // plan --policy optimal only
  bool bound = false;               // also prove a lower bound on the step
  bool no_link = false;             // the device cannot reach host memory
  std::string costs;                // a costs file of measured times (spillway profile)
};

// The workload, profile, planner and output flags. `one_budget`: also
// --budget and --bound (plan and compare; a sweep has budgets of its own).
void AddPlanFlags(CLI::App& command, PlanFlags& flags, bool one_budget = true);

// The options that describe a model's training step, which a graph file
// already is: refused with --graph rather than silently ignored.
absl::Status CheckGraphFileFlags(const CLI::App& command, const PlanFlags& flags);

// The session's request: everything but the workload's flags is the
// planner's and the profile's.
session::PlanningRequest MakeRequest(const PlanFlags& flags);

// The progress line on a terminal; the costs file's note on stderr.
class TerminalObserver final : public session::PlanningObserver {
 public:
  void Begin(const std::string& label) override { progress_.Begin(label); }
  void Progress(int candidates) override { progress_.Draw(candidates); }
  void End() override { progress_.Clear(); }
  void Note(const std::string& line) override { fmt::print(std::cerr, "{}\n", line); }

 private:
  PlanningProgress progress_;
};

}  // namespace spillway::cli
