// A mixed-integer linear program, written down independently of any solver,
// and its solution by CBC (COIN-OR's branch and cut, Debian's
// coinor-libcbc-dev). The exact policy (planner/step_relaxation.h) builds one;
// tests check points against it without a solver.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace spillway::planner {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// minimise sum(objective * x) subject to lower <= row . x <= upper per row and
// lower <= x <= upper per column; integer columns take whole values.
class LinearProgram {
 public:
  struct Column {
    std::string name;
    double lower = 0;
    double upper = kInfinity;
    double objective = 0;
    bool integer = false;
  };
  struct Row {
    std::string name;
    std::vector<std::pair<int, double>> terms;  // (column, coefficient)
    double lower = -kInfinity;
    double upper = kInfinity;
  };

  int AddColumn(Column column);
  int AddRow(Row row);
  const std::vector<Column>& columns() const { return columns_; }
  const std::vector<Row>& rows() const { return rows_; }
  Column& column(int index) { return columns_.at(static_cast<size_t>(index)); }
  int64_t nonzeros() const;

  // The largest amount by which `point` breaks a bound, a row or
  // integrality (0 for a feasible point), naming the worst in `worst`.
  double MaxViolation(const std::vector<double>& point, std::string* worst = nullptr) const;
  double Objective(const std::vector<double>& point) const;

 private:
  std::vector<Column> columns_;
  std::vector<Row> rows_;
};

struct SolverOptions {
  double time_limit_s = 60;
  // A feasible point to start from (a MIP start), or empty. With one, the
  // result is never kInfeasible: a claim of CBC's that contradicts the start
  // is reported as stopped, with the start as its solution and no bound.
  std::vector<double> start;
};

struct SolverResult {
  enum class Status { kOptimal, kStoppedWithSolution, kStoppedWithoutSolution, kInfeasible };
  Status status = Status::kInfeasible;
  std::vector<double> point;  // the best solution found (empty without one)
  double objective = kInfinity;
  // A proven lower bound on the optimum (the objective when optimal).
  double bound = -kInfinity;
  double seconds = 0;
};

// Whether this build has a solver (CBC was found when it was configured).
bool HaveMilpSolver();

// Solves with CBC, single-threaded with a fixed seed, so that the same input
// gives the same result unless the time limit stops it. FailedPrecondition
// when the build has no CBC.
absl::StatusOr<SolverResult> SolveMilp(const LinearProgram& program, const SolverOptions& options);

// Writes the program in LP form (a path ending in .lp) or MPS form (.mps),
// through CBC's writers.
absl::Status WriteMilp(const LinearProgram& program, const std::string& path);

}  // namespace spillway::planner
