// The exact policy's integer program: a relaxation of the rewriter, the arena
// and the simulator, over the decisions a Plan can express. Every plan that
// fits the budget maps to a feasible point of it whose objective is at most the
// plan's simulated step (PointOf builds that point, and the tests check it on
// every plan of small graphs), so its optimum, or any bound the solver proves
// on it, is a lower bound on the step of every plan. docs/planner.md gives the
// model and the argument, constraint by constraint.
//
// Units inside the program: microseconds and KiB, so that the coefficients of
// a tiny test graph and of a large model both stay well scaled for the solver.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/linear_program.h"
#include "planner/planner.h"
#include "program/plan.h"

namespace spillway::planner {

// The largest graphs the program is built for: beyond these it is refused.
inline constexpr int kMaxRelaxationSavedTensors = 400;
inline constexpr int kMaxRelaxationSteps = 4000;

// What to build. The defaults are the exact policy's program; a lower bound
// on a large graph (LowerBoundOnStep) reduces it. Every reduction drops rows
// or integrality, so the program stays a relaxation and its bound stays a
// bound, only a looser one.
struct RelaxationOptions {
  bool exact_limits = true;       // refuse graphs past kMaxRelaxation*
  bool integer_decisions = true;  // false: spill and recompute in [0, 1] (an LP)
  // Model memory only at the over-budget steps furthest over the budget, as
  // many as keep the `absent` columns within this cap (0: every step).
  int64_t max_absent_columns = 0;
  // Copy windows from this many producer steps and to this many reader
  // steps, evenly spread (0: all of them).
  int max_window_steps = 0;
};

class StepRelaxation {
 public:
  // Errors: the graph is past the limits above (the message gives them).
  static absl::StatusOr<StepRelaxation> Build(const PlanningContext& context,
                                              const RelaxationOptions& options = {});

  const LinearProgram& program() const { return program_; }
  // Steps at which the graph with everything kept would exceed the budget:
  // the only steps at which the program needs anything absent.
  int over_budget_steps() const { return static_cast<int>(over_budget_.size()); }
  int decided_tensors() const { return static_cast<int>(tensors_.size()); }

  // The program's objective (microseconds) in seconds.
  static double Seconds(double objective) { return objective * 1e-6; }

  // The point that a laid-out, simulated plan maps to: its decisions, each
  // node's start, and which spilled tensors were physically absent from the
  // device at the start of each over-budget step. Feasible whenever the plan
  // fits the budget, with the plan's step as its objective.
  std::vector<double> PointOf(const Evaluation& evaluation) const;

  // What a solver's result proves: its bound in seconds (never below none's
  // step, which every plan takes at least), and the program's size.
  PlanResult::Bound BoundOf(const SolverResult& solved) const;

  // How far a point is from feasible, relative to its step in the
  // program's units (rounding grows with it), naming the worst constraint:
  // a point from PointOf is within rounding unless the model and the
  // Programs disagree.
  double RelativeViolation(const std::vector<double>& point, std::string* worst = nullptr) const;

  // The Plan a solution describes: its decisions, and each spilled tensor
  // fetched after the last step at which the solution has it absent.
  program::Plan PlanOf(const std::vector<double>& point) const;

 private:
  struct Tensor {
    ir::ValueId value = ir::kInvalidValue;
    int64_t bytes = 0;
    int producer_step = 0;
    int last_forward_step = 0;  // its producer's step if no forward node reads it
    int first_backward_step = 0;
    int spill = -1;      // column of "spilled", -1 when it cannot be
    int recompute = -1;  // column of "recomputed", -1 when it cannot be
    // Over-budget steps inside its gap, and the column of "absent through a
    // spill at that step" for each.
    std::vector<std::pair<int, int>> absent;  // (step, column)
  };

  // A forward node that recomputing any of several tensors re-runs.
  struct Rebuilt {
    int column = -1;            // at least one of `users` is recomputed
    std::vector<size_t> users;  // indices into tensors_
  };

  explicit StepRelaxation(const PlanningContext& context) : context_(&context) {}

  const PlanningContext* context_;
  LinearProgram program_;
  std::vector<Tensor> tensors_;
  std::vector<Rebuilt> rebuilt_;
  std::vector<int> over_budget_;   // steps, increasing
  std::vector<int> start_column_;  // one per step: when its node starts
  int end_column_ = -1;            // when the step ends: the objective
};

// A lower bound on the step of every plan that fits, for a graph of any size:
// the program reduced by `options` (by default an LP over some over-budget
// steps, up to 20,000 `absent` columns, and 32 copy windows each way),
// solved by Clp.
struct StepBoundOptions {
  RelaxationOptions relaxation = {.exact_limits = false,
                                  .integer_decisions = false,
                                  .max_absent_columns = 20000,
                                  .max_window_steps = 32};
  double time_limit_s = 60;
};
absl::StatusOr<PlanResult::Bound> LowerBoundOnStep(const PlanningContext& context,
                                                   const StepBoundOptions& options = {});

}  // namespace spillway::planner
