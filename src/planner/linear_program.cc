#include "planner/linear_program.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fmt/format.h"

#ifdef SPILLWAY_HAVE_CBC
#include <zlib.h>

#include <fstream>

#include "Cbc_C_Interface.h"
#include "Clp_C_Interface.h"
#include "support/status_macros.h"
#endif

namespace spillway::planner {

int LinearProgram::AddColumn(Column column) {
  columns_.push_back(std::move(column));
  return static_cast<int>(columns_.size()) - 1;
}

int LinearProgram::AddRow(Row row) {
  rows_.push_back(std::move(row));
  return static_cast<int>(rows_.size()) - 1;
}

int64_t LinearProgram::nonzeros() const {
  int64_t count = 0;
  for (const Row& row : rows_) count += static_cast<int64_t>(row.terms.size());
  return count;
}

double LinearProgram::MaxViolation(const std::vector<double>& point, std::string* worst) const {
  double max_violation = 0;
  auto note = [&](double violation, const std::string& name) {
    if (violation > max_violation) {
      max_violation = violation;
      if (worst != nullptr) *worst = name;
    }
  };
  if (point.size() != columns_.size()) {
    if (worst != nullptr) *worst = "the point's size";
    return kInfinity;
  }
  for (size_t j = 0; j < columns_.size(); ++j) {
    const Column& column = columns_[j];
    note(column.lower - point[j], column.name);
    note(point[j] - column.upper, column.name);
    if (column.integer) note(std::abs(point[j] - std::round(point[j])), column.name);
  }
  for (const Row& row : rows_) {
    double activity = 0;
    for (const auto& [j, coefficient] : row.terms) {
      activity += coefficient * point[static_cast<size_t>(j)];
    }
    note(row.lower - activity, row.name);
    note(activity - row.upper, row.name);
  }
  return max_violation;
}

double LinearProgram::Objective(const std::vector<double>& point) const {
  double sum = 0;
  for (size_t j = 0; j < columns_.size() && j < point.size(); ++j) {
    sum += columns_[j].objective * point[j];
  }
  return sum;
}

#ifdef SPILLWAY_HAVE_CBC

namespace {

struct CbcDeleter {
  void operator()(Cbc_Model* model) const { Cbc_deleteModel(model); }
};
using CbcModel = std::unique_ptr<Cbc_Model, CbcDeleter>;

// CBC's infinity (COIN_DBL_MAX, which its C header does not declare).
constexpr double kCbcInfinity = std::numeric_limits<double>::max();

absl::Status Gunzip(const std::string& from, const std::string& to) {
  gzFile in = gzopen(from.c_str(), "rb");
  if (in == nullptr) return absl::InternalError(fmt::format("cannot read '{}'", from));
  std::ofstream out(to, std::ios::binary);
  std::vector<char> chunk(1 << 16);
  int read = 0;
  while ((read = gzread(in, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0) {
    out.write(chunk.data(), read);
  }
  gzclose(in);
  out.close();
  if (read < 0 || !out) return absl::InternalError(fmt::format("cannot write '{}'", to));
  return absl::OkStatus();
}

// The program in compressed columns, with CBC's infinities: what both
// solvers load.
struct Matrix {
  std::vector<CoinBigIndex> start = {0};
  std::vector<int> index;
  std::vector<double> value;
  std::vector<double> column_lower, column_upper, objective, row_lower, row_upper;
};

Matrix Compress(const LinearProgram& program) {
  const std::vector<LinearProgram::Column>& columns = program.columns();
  const std::vector<LinearProgram::Row>& rows = program.rows();
  std::vector<std::vector<std::pair<int, double>>> by_column(columns.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (const auto& [j, coefficient] : rows[i].terms) {
      by_column[static_cast<size_t>(j)].emplace_back(static_cast<int>(i), coefficient);
    }
  }
  Matrix m;
  for (size_t j = 0; j < columns.size(); ++j) {
    for (const auto& [i, coefficient] : by_column[j]) {
      m.index.push_back(i);
      m.value.push_back(coefficient);
    }
    m.start.push_back(static_cast<CoinBigIndex>(m.index.size()));
    m.column_lower.push_back(columns[j].lower);
    m.column_upper.push_back(columns[j].upper == kInfinity ? kCbcInfinity : columns[j].upper);
    m.objective.push_back(columns[j].objective);
  }
  for (const LinearProgram::Row& row : rows) {
    m.row_lower.push_back(row.lower == -kInfinity ? -kCbcInfinity : row.lower);
    m.row_upper.push_back(row.upper == kInfinity ? kCbcInfinity : row.upper);
  }
  return m;
}

// CBC's model of `program`: the matrix, names and integrality.
CbcModel Load(const LinearProgram& program) {
  const std::vector<LinearProgram::Column>& columns = program.columns();
  const std::vector<LinearProgram::Row>& rows = program.rows();
  const Matrix m = Compress(program);
  CbcModel model(Cbc_newModel());
  Cbc_loadProblem(model.get(), static_cast<int>(columns.size()), static_cast<int>(rows.size()),
                  m.start.data(), m.index.data(), m.value.data(), m.column_lower.data(),
                  m.column_upper.data(), m.objective.data(), m.row_lower.data(),
                  m.row_upper.data());
  Cbc_setObjSense(model.get(), 1);
  for (size_t j = 0; j < columns.size(); ++j) {
    Cbc_setColName(model.get(), static_cast<int>(j), columns[j].name.c_str());
    if (columns[j].integer) Cbc_setInteger(model.get(), static_cast<int>(j));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    Cbc_setRowName(model.get(), static_cast<int>(i), rows[i].name.c_str());
  }
  return model;
}

// A program without integer columns is an LP: Clp solves it (CBC's own
// path for one reports it infeasible when it is not).
SolverResult SolveLp(const LinearProgram& program, const SolverOptions& options) {
  const auto begin = std::chrono::steady_clock::now();
  const Matrix m = Compress(program);
  std::unique_ptr<Clp_Simplex, void (*)(Clp_Simplex*)> model(Clp_newModel(), Clp_deleteModel);
  Clp_loadProblem(model.get(), static_cast<int>(program.columns().size()),
                  static_cast<int>(program.rows().size()), m.start.data(), m.index.data(),
                  m.value.data(), m.column_lower.data(), m.column_upper.data(), m.objective.data(),
                  m.row_lower.data(), m.row_upper.data());
  Clp_setLogLevel(model.get(), 0);
  Clp_setMaximumSeconds(model.get(), options.time_limit_s);
  Clp_initialSolve(model.get());
  SolverResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (Clp_isProvenPrimalInfeasible(model.get())) {
    result.status = SolverResult::Status::kInfeasible;
  } else if (Clp_isProvenOptimal(model.get())) {
    const double* solution = Clp_primalColumnSolution(model.get());
    result.point.assign(solution, solution + program.columns().size());
    result.objective = result.bound = Clp_objectiveValue(model.get());
    result.status = SolverResult::Status::kOptimal;
  } else {
    result.status = SolverResult::Status::kStoppedWithoutSolution;
  }
  return result;
}

}  // namespace

bool HaveMilpSolver() { return true; }

absl::StatusOr<SolverResult> SolveMilp(const LinearProgram& program, const SolverOptions& options) {
  const bool integer = std::any_of(program.columns().begin(), program.columns().end(),
                                   [](const LinearProgram::Column& c) { return c.integer; });
  if (!integer) return SolveLp(program, options);
  const auto begin = std::chrono::steady_clock::now();
  CbcModel model = Load(program);
  Cbc_setLogLevel(model.get(), 0);
  // One thread and a fixed seed: the same model gives the same answer.
  Cbc_setParameter(model.get(), "threads", "0");
  Cbc_setParameter(model.get(), "randomSeed", "1");
  Cbc_setParameter(model.get(), "randomCbcSeed", "1");
  Cbc_setParameter(model.get(), "timeMode", "elapsed");
  Cbc_setMaximumSeconds(model.get(), options.time_limit_s);
  Cbc_setAllowableGap(model.get(), 0);
  Cbc_setAllowableFractionGap(model.get(), 1e-9);
  if (!options.start.empty()) {
    std::vector<int> indices(options.start.size());
    for (size_t j = 0; j < indices.size(); ++j) indices[j] = static_cast<int>(j);
    Cbc_setMIPStartI(model.get(), static_cast<int>(indices.size()), indices.data(),
                     options.start.data());
  }
  Cbc_solve(model.get());

  SolverResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (Cbc_isAbandoned(model.get())) {
    return absl::InternalError("CBC abandoned the program (numerical difficulties)");
  }
  const bool has_solution =
      Cbc_numberSavedSolutions(model.get()) > 0 || Cbc_bestSolution(model.get()) != nullptr;
  if (Cbc_isProvenInfeasible(model.get()) && !has_solution) {
    if (options.start.empty()) {
      result.status = SolverResult::Status::kInfeasible;
      return result;
    }
    // The start is feasible (the caller checked it), so the claim is wrong:
    // CBC has been seen to make it when its time limit stopped it in
    // preprocessing (DeepLabV3+ on PCIe at its tightest budget, once in
    // two runs). Nothing is proven; the start is the best solution known.
    result.status = SolverResult::Status::kStoppedWithSolution;
    result.point = options.start;
    result.objective = program.Objective(options.start);
    return result;
  }
  if (has_solution) {
    const double* solution = Cbc_bestSolution(model.get());
    if (solution == nullptr) solution = Cbc_getColSolution(model.get());
    result.point.assign(solution, solution + program.columns().size());
    result.objective = Cbc_getObjValue(model.get());
  }
  const bool optimal = Cbc_isProvenOptimal(model.get()) != 0;
  result.bound = optimal ? result.objective : Cbc_getBestPossibleObjValue(model.get());
  result.status = optimal        ? SolverResult::Status::kOptimal
                  : has_solution ? SolverResult::Status::kStoppedWithSolution
                                 : SolverResult::Status::kStoppedWithoutSolution;
  return result;
}

absl::Status WriteMilp(const LinearProgram& program, const std::string& path) {
  const std::filesystem::path target(path);
  const std::string extension = target.extension().string();
  if (extension != ".lp" && extension != ".mps") {
    return absl::InvalidArgumentError(
        fmt::format("cannot tell the model's form from '{}': name it *.lp or *.mps", path));
  }
  CbcModel model = Load(program);
  // CBC's writers add the extension themselves.
  const std::string stem = (target.parent_path() / target.stem()).string();
  std::error_code error;
  if (extension == ".lp") {
    Cbc_writeLp(model.get(), stem.c_str());
  } else {
    // CBC writes MPS compressed (FILE.mps.gz) when it has zlib: unpack it.
    Cbc_writeMps(model.get(), stem.c_str());
    const std::string packed = path + ".gz";
    if (std::filesystem::exists(packed, error)) {
      RETURN_IF_ERROR(Gunzip(packed, path));
      std::filesystem::remove(packed, error);
    }
  }
  if (!std::filesystem::exists(target, error)) {
    return absl::InternalError(fmt::format("CBC did not write '{}'", path));
  }
  return absl::OkStatus();
}

#else  // !SPILLWAY_HAVE_CBC

namespace {
absl::Status NoSolver() {
  return absl::FailedPreconditionError(
      "this build has no MILP solver: install coinor-libcbc-dev (scripts/install-deps.sh) and "
      "configure again");
}
}  // namespace

bool HaveMilpSolver() { return false; }

absl::StatusOr<SolverResult> SolveMilp(const LinearProgram&, const SolverOptions&) {
  return NoSolver();
}

absl::Status WriteMilp(const LinearProgram&, const std::string&) { return NoSolver(); }

#endif  // SPILLWAY_HAVE_CBC

}  // namespace spillway::planner
