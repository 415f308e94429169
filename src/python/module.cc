// The Python module `spillway._spillway`, which the package `spillway`
// (spillway/__init__.py) re-exports: workloads, planning and comparing on a
// hardware profile, and training on the CPU backend. A thin layer over the
// session library and the trainer, as the CLI is: results carry the fields of
// the CLI's --json, and errors the CLI's one-line messages (spillway.Error;
// Ctrl-C during planning or training raises KeyboardInterrupt).
//
// Threads: long work (planning, training) runs with the GIL released. The
// callbacks that need Python (a data callable, the Ctrl-C poll) take it back
// on the calling thread; planning threads never call into Python.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/costs_file.h"
#include "analysis/hardware.h"
#include "fmt/format.h"
#include "models/models.h"
#include "nlohmann/json.hpp"
#include "program/program.h"
#include "session/export.h"
#include "session/option_flags.h"
#include "session/planning.h"
#include "session/sweep.h"
#include "session/training.h"
#include "session/workload.h"
#include "sim/chrome_trace.h"
#include "sim/memory_plot.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/units.h"
#include "train/checkpoint.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace py = pybind11;

namespace spillway::python {
namespace {

// spillway.Error, set up in the module's init.
PyObject* g_error = nullptr;

// Raises the status as a Python exception: Cancelled (Ctrl-C) as
// KeyboardInterrupt, anything else as spillway.Error with its message.
[[noreturn]] void Raise(const absl::Status& status) {
  const std::string message(status.message());
  PyErr_SetString(status.code() == absl::StatusCode::kCancelled ? PyExc_KeyboardInterrupt : g_error,
                  message.c_str());
  throw py::error_already_set();
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Unwrap(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return *std::move(value);
}

template <typename Json>  // nlohmann::json or nlohmann::ordered_json
py::object JsonToPython(const Json& json) {
  return py::module_::import("json").attr("loads")(json.dump());
}

// Whether Ctrl-C was pressed: called without the GIL, it takes it to let
// Python run its signal handlers. A pending KeyboardInterrupt is cleared here
// and raised again from the Cancelled status the work returns.
bool PythonInterrupted() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  PyErr_Clear();
  return true;
}

// ---- Workloads ------------------------------------------------------------

int64_t PositiveInteger(const py::handle& value, const char* keyword) {
  const auto integer = value.cast<int64_t>();
  if (integer <= 0) {
    throw py::value_error(fmt::format("{} must be a positive integer, not {}", keyword, integer));
  }
  return integer;
}

std::vector<std::string> Strings(const py::handle& value) {
  if (py::isinstance<py::str>(value)) return {value.cast<std::string>()};
  return value.cast<std::vector<std::string>>();
}

// A workload from keywords: model= (with its options), onnx= (with
// input_shape=, loss=, freeze=, batch=) or graph= (with graph_duration=,
// graph_size=, graph_time_unit=).
session::WorkloadSpec SpecFromKeywords(const py::kwargs& keywords) {
  session::WorkloadSpec spec;
  for (const auto& [key_handle, value] : keywords) {
    const auto key = key_handle.cast<std::string>();
    if (value.is_none()) continue;
    if (key == "model") {
      spec.model = value.cast<std::string>();
    } else if (key == "onnx") {
      spec.onnx = py::str(value).cast<std::string>();  // a str or a pathlib.Path
    } else if (key == "graph") {
      spec.graph = py::str(value).cast<std::string>();
    } else if (key == "input_shape") {
      spec.input_shapes = Strings(value);
    } else if (key == "loss") {
      spec.loss = value.cast<std::string>();
    } else if (key == "freeze") {
      spec.frozen = Strings(value);
    } else if (key == "graph_duration") {
      spec.graph_options.duration_attr = value.cast<std::string>();
    } else if (key == "graph_size") {
      spec.graph_options.size_attr = value.cast<std::string>();
    } else if (key == "graph_time_unit") {
      spec.graph_options.time_unit = value.cast<std::string>();
    } else if (key == "batch") {
      spec.batch = PositiveInteger(value, "batch");
      spec.given.push_back({"batch", "--batch"});
    } else if (key == "image") {
      spec.image = PositiveInteger(value, "image");
      spec.given.push_back({"height", "--image"});
    } else if (key == "height" || key == "width") {
      (key == "height" ? spec.height : spec.width) = PositiveInteger(value, key.c_str());
      spec.given.push_back({key, "--" + key});
    } else {
      // A model option's keyword is its flag without the dashes: d_model, --d-model.
      std::string flag = "--" + key;
      std::replace(flag.begin() + 2, flag.end(), '_', '-');
      const std::optional<std::string_view> field = session::ModelOptionOfFlag(flag);
      if (!field.has_value()) {
        throw py::type_error(fmt::format("Workload() got an unexpected keyword '{}'", key));
      }
      // As the command line checks them: the seed at least 0, dropout a
      // probability below 1, the backbone a name, every other a positive integer.
      std::string text;
      if (key == "seed") {
        const auto seed = value.cast<int64_t>();
        if (seed < 0) throw py::value_error(fmt::format("seed must be at least 0, not {}", seed));
        text = std::to_string(seed);
      } else if (key == "dropout") {
        const auto dropout = value.cast<double>();
        if (!(dropout >= 0 && dropout < 1)) {
          throw py::value_error(fmt::format("dropout must be in [0, 1), not {}", dropout));
        }
        text = fmt::format("{}", dropout);
      } else if (key == "backbone") {
        text = value.cast<std::string>();
      } else {
        text = std::to_string(PositiveInteger(value, key.c_str()));
      }
      Check(models::SetModelOption(spec.options, *field, text));
      spec.given.push_back({std::string(*field), flag});
    }
  }
  // The seed reaches every model (training initializes from it), so it is
  // never refused as not applying, as on the command line.
  std::erase_if(spec.given, [](const models::GivenOption& given) { return given.field == "seed"; });
  return spec;
}

struct PyWorkload {
  session::WorkloadSpec spec;
};

// ---- Planning -------------------------------------------------------------

// Redraws one line on stderr while a policy plans, when stderr is a terminal
// (at most five times a second, as the CLI's line), and polls for Ctrl-C. Not
// the CLI's PlanningProgress: that one installs its own SIGINT handler, which
// would take Ctrl-C from Python.
class PythonObserver final : public session::PlanningObserver {
 public:
  explicit PythonObserver(bool progress) : shown_(progress && isatty(STDERR_FILENO) != 0) {}
  void Begin(const std::string& label) override {
    label_ = label;
    Draw(0);
  }
  void Progress(int candidates) override {
    if (std::chrono::steady_clock::now() - drawn_ >= std::chrono::milliseconds(200)) {
      Draw(candidates);
    }
  }
  void End() override {
    if (open_) std::cerr << "\r\033[K" << std::flush;
    open_ = false;
  }
  void Note(const std::string& line) override { std::cerr << line << "\n"; }
  bool Interrupted() override { return PythonInterrupted(); }

 private:
  void Draw(int candidates) {
    if (!shown_) return;
    drawn_ = std::chrono::steady_clock::now();
    std::cerr << fmt::format("\r\033[Kplanning {}: {} candidate plans", label_, candidates)
              << std::flush;
    open_ = true;
  }

  bool shown_;
  bool open_ = false;
  std::string label_;
  std::chrono::steady_clock::time_point drawn_;
};

// The session and its observer, shared by the results planned in it (their
// Programs point into its training graph).
struct SharedSession {
  std::unique_ptr<PythonObserver> observer;
  std::unique_ptr<session::PlanningSession> session;
};

// One policy's plan, with what it is measured against.
class PyPlanResult {
 public:
  // `budget_bytes`: the budget it was planned for (a sweep's results share
  // one session, which ends at the largest).
  PyPlanResult(std::shared_ptr<SharedSession> shared, planner::PlanResult result,
               nlohmann::json json, int64_t budget_bytes)
      : shared_(std::move(shared)),
        result_(std::move(result)),
        json_(std::move(json)),
        budget_bytes_(budget_bytes) {}

  const nlohmann::json& json() const { return json_; }
  py::object Field(const std::string& name) const {
    if (!json_.contains(name)) {
      throw py::attribute_error(fmt::format("PlanResult has no field '{}'", name));
    }
    return JsonToPython(json_[name]);
  }
  void WriteTrace(const std::string& path) const {
    RequireFeasible("trace");
    Check(WriteFileAtomically(
        path, sim::ChromeTraceJson(result_.best.program, result_.best.simulation, Title()),
        "trace"));
  }
  void WriteMemoryPlot(const std::string& path) const {
    RequireFeasible("memory plot");
    Check(WriteFileAtomically(path,
                              sim::MemoryPlotSvg(result_.best.simulation, budget_bytes_,
                                                 result_.best.arena_bytes(), Title()),
                              "memory plot"));
  }
  void WriteProgram(const std::string& path) const {
    RequireFeasible("Program");
    Check(WriteFileAtomically(path, program::ProgramToText(result_.best.program), "program dump"));
  }
  // Device bytes allocated from each time on, as two arrays (seconds, bytes).
  py::tuple MemoryCurve() const {
    const std::vector<sim::MemoryPoint>& memory = result_.best.simulation.memory;
    py::array_t<double> times(static_cast<py::ssize_t>(memory.size()));
    py::array_t<int64_t> bytes(static_cast<py::ssize_t>(memory.size()));
    auto t = times.mutable_unchecked<1>();
    auto b = bytes.mutable_unchecked<1>();
    for (size_t i = 0; i < memory.size(); ++i) {
      t(static_cast<py::ssize_t>(i)) = memory[i].time_s;
      b(static_cast<py::ssize_t>(i)) = memory[i].bytes;
    }
    return py::make_tuple(times, bytes);
  }
  std::string Repr() const {
    if (!result_.feasible) {
      return fmt::format("<PlanResult {}: infeasible, smallest arena {} bytes>", result_.policy,
                         result_.smallest_arena_bytes);
    }
    return fmt::format("<PlanResult {}: step {:.4g} s ({:+.1f}% over none), arena {} bytes>",
                       result_.policy, result_.best.step_time_s(),
                       100.0 * json_["overhead"].get<double>(), result_.best.arena_bytes());
  }

 private:
  // A plan that does not fit has no Program worth writing: say so.
  void RequireFeasible(const char* what) const {
    if (!result_.feasible) {
      Raise(absl::FailedPreconditionError(
          fmt::format("policy {} found no plan that fits the budget: there is no {} to write",
                      result_.policy, what)));
    }
  }
  std::string Title() const {
    return fmt::format("{}: {}, budget {}", result_.policy,
                       shared_->session->Describe(/*with_budget=*/false),
                       FormatBytes(budget_bytes_));
  }

  std::shared_ptr<SharedSession> shared_;
  planner::PlanResult result_;
  nlohmann::json json_;
  int64_t budget_bytes_;
};

// A policy at several budgets (session/sweep.h): its points as PlanResults,
// its JSON and its plot.
class PySweep {
 public:
  PySweep(std::shared_ptr<SharedSession> shared, session::Sweep sweep)
      : shared_(std::move(shared)),
        sweep_(std::move(sweep)),
        json_(session::SweepToJson(*shared_->session, sweep_)) {}

  py::object Field(const std::string& name) const {
    if (!json_.contains(name)) {
      throw py::attribute_error(fmt::format("Sweep has no field '{}'", name));
    }
    return JsonToPython(json_[name]);
  }
  std::vector<PyPlanResult> Points() const {
    std::vector<PyPlanResult> points;
    for (size_t i = 0; i < sweep_.points.size(); ++i) {
      points.emplace_back(shared_, sweep_.points[i].result, json_["points"][i],
                          sweep_.points[i].budget_bytes);
    }
    return points;
  }
  const nlohmann::json& json() const { return json_; }
  const session::Sweep& sweep() const { return sweep_; }
  const session::PlanningSession& session() const { return *shared_->session; }
  void WritePlot(const std::string& path) const {
    const session::Sweep* const self = &sweep_;
    Check(WriteFileAtomically(path, session::SweepPlot(*shared_->session, {&self, 1}), "plot"));
  }
  std::string Repr() const {
    return fmt::format(
        "<Sweep {}: {} budgets, {} with a plan>", sweep_.policy, sweep_.points.size(),
        std::ranges::count_if(
            sweep_.points, [](const session::SweepPoint& point) { return point.result.feasible; }));
  }

 private:
  std::shared_ptr<SharedSession> shared_;
  session::Sweep sweep_;
  nlohmann::json json_;
};

// Several sweeps of one workload (several policies) in one plot, as
// `spillway sweep --policy a,b --plot` draws them.
void WriteSweepPlot(const std::string& path, const std::vector<const PySweep*>& sweeps) {
  if (sweeps.empty()) Raise(absl::InvalidArgumentError("write_sweep_plot needs a sweep"));
  if (std::ranges::find(sweeps, nullptr) != sweeps.end()) {
    Raise(absl::InvalidArgumentError("write_sweep_plot: a sweep is None"));
  }
  std::vector<const session::Sweep*> all;
  const std::string workload = sweeps.front()->session().Describe(/*with_budget=*/false);
  for (const PySweep* sweep : sweeps) {
    if (const std::string other = sweep->session().Describe(/*with_budget=*/false);
        other != workload) {
      Raise(absl::InvalidArgumentError(fmt::format(
          "write_sweep_plot: the sweeps plan different workloads: {} and {}", workload, other)));
    }
    all.push_back(&sweep->sweep());
  }
  Check(WriteFileAtomically(path, session::SweepPlot(sweeps.front()->session(), all), "plot"));
}

// The planning keywords of plan(), compare() and train().
struct PlanningKeywords {
  std::string hardware;
  std::optional<std::string> budget;
  std::string optimizer;
  std::string math_mode;
  bool no_link;
  std::optional<std::string> costs;
  int max_evaluations;
  int refine_passes;
  double time_limit;
  int plan_threads;
  std::string backward_order;
  bool fetch_once;
};

// The keywords' defaults are the planner's own, as the command line's are.
const planner::PlannerOptions kPlannerDefaults;

planner::PlannerOptions PlannerOptionsOf(const PlanningKeywords& keywords) {
  planner::PlannerOptions options;
  if (keywords.max_evaluations < 0 || keywords.refine_passes < 0 || keywords.plan_threads < 0 ||
      keywords.time_limit <= 0) {
    throw py::value_error(
        "max_evaluations, refine_passes and plan_threads must be at least 0, time_limit above 0");
  }
  options.max_evaluations = keywords.max_evaluations;
  options.max_refine_passes = keywords.refine_passes;
  options.time_limit_s = keywords.time_limit;
  options.threads = keywords.plan_threads;
  options.fetch_twice = !keywords.fetch_once;
  options.backward_order = program::ParseBackwardOrder(keywords.backward_order);
  options.every_backward_order = keywords.backward_order == "each";
  if (!options.backward_order.has_value() && keywords.backward_order != "auto" &&
      !options.every_backward_order) {
    throw py::value_error(
        fmt::format("backward_order must be 'auto', 'each', 'memory-aware', 'lookahead' or "
                    "'topological', not '{}'",
                    keywords.backward_order));
  }
  return options;
}

std::shared_ptr<SharedSession> OpenSession(const PyWorkload& workload,
                                           const PlanningKeywords& keywords, bool progress) {
  session::PlanningRequest request;
  request.workload = workload.spec;
  request.hardware = keywords.hardware;
  request.budget = keywords.budget.value_or("");
  request.optimizer = keywords.optimizer;
  request.math_mode = keywords.math_mode;
  request.planner = PlannerOptionsOf(keywords);
  request.host_link = !keywords.no_link;
  request.costs = keywords.costs.value_or("");
  auto shared = std::make_shared<SharedSession>();
  shared->observer = std::make_unique<PythonObserver>(progress);
  absl::StatusOr<std::unique_ptr<session::PlanningSession>> session;
  {
    py::gil_scoped_release release;
    session = session::PlanningSession::Create(request, shared->observer.get());
  }
  shared->session = Unwrap(std::move(session));
  return shared;
}

PyPlanResult Plan(const PyWorkload& workload, const std::string& policy, bool bound,
                  const PlanningKeywords& keywords, bool progress) {
  std::shared_ptr<SharedSession> shared = OpenSession(workload, keywords, progress);
  session::PlanningSession& session = *shared->session;
  absl::StatusOr<planner::PlanResult> none;
  absl::StatusOr<planner::PlanResult> result;
  {
    py::gil_scoped_release release;
    none = session.Run("none");
    if (none.ok()) {
      result = policy == "optimal" ? session.RunOptimal({}) : session.Run(policy);
    }
    if (none.ok() && result.ok() && bound && !result->bound.has_value()) {
      absl::StatusOr<planner::PlanResult::Bound> proven = session.ProveBound();
      if (proven.ok()) {
        result->bound = *std::move(proven);
      } else {
        result = proven.status();
      }
    }
  }
  const planner::PlanResult unconstrained = Unwrap(std::move(none));
  planner::PlanResult planned = Unwrap(std::move(result));
  nlohmann::json json =
      session::PlanResultToJson(planned, unconstrained, nullptr, session.budget_bytes());
  return PyPlanResult(shared, std::move(planned), std::move(json), session.budget_bytes());
}

std::vector<PyPlanResult> Compare(const PyWorkload& workload, bool optimal, bool bound,
                                  const PlanningKeywords& keywords, bool progress) {
  std::shared_ptr<SharedSession> shared = OpenSession(workload, keywords, progress);
  session::CompareOptions options;
  options.optimal = optimal;
  options.bound = bound;
  absl::StatusOr<session::Comparison> compared;
  {
    py::gil_scoped_release release;
    compared = session::Compare(*shared->session, options);
  }
  session::Comparison comparison = Unwrap(std::move(compared));
  const nlohmann::json rows =
      session::ComparisonToJson(comparison, shared->session->budget_bytes());
  std::vector<PyPlanResult> results;
  for (size_t i = 0; i < comparison.results.size(); ++i) {
    results.emplace_back(shared, std::move(comparison.results[i]), rows[i],
                         shared->session->budget_bytes());
  }
  return results;
}

PySweep Sweep(const PyWorkload& workload, const std::string& policy, session::SweepBudgets budgets,
              const PlanningKeywords& keywords, bool progress) {
  Check(session::CheckSweepBudgets(budgets));
  std::shared_ptr<SharedSession> shared = OpenSession(workload, keywords, progress);
  absl::StatusOr<session::Sweep> swept;
  {
    py::gil_scoped_release release;
    absl::StatusOr<std::vector<int64_t>> bytes = session::ResolveBudgets(*shared->session, budgets);
    swept = bytes.ok() ? session::RunSweep(*shared->session, policy, *std::move(bytes))
                       : absl::StatusOr<session::Sweep>(bytes.status());
  }
  return PySweep(shared, Unwrap(std::move(swept)));
}

// ---- Training -------------------------------------------------------------

// One step's samples and labels from Python: arrays cycled in order, or a
// callable step -> (samples, labels). Holds no Python object itself (it may
// be destroyed without the GIL): `source` is owned by the Python training
// call, which outlives the trainer's use of it.
class PythonData final : public train::DataSource {
 public:
  // `arrays`: `source` is a (samples, labels) tuple, else a callable.
  PythonData(const ir::Graph& graph, const train::TaskInfo& task, const py::object* source,
             bool arrays)
      : task_(task),
        samples_(graph.value(task.samples_input).type),
        labels_(graph.value(task.labels_input).type),
        source_(source),
        arrays_(arrays) {}

  std::string Describe() const override {
    return arrays_ ? "arrays given from Python" : "a Python callable";
  }

  absl::StatusOr<train::Batch> BatchForStep(int64_t step) override {
    py::gil_scoped_acquire gil;
    try {
      py::object samples;
      py::object labels;
      if (arrays_) {
        // Arrays of any number of examples: the step's batch is the next
        // `batch` rows, wrapping around.
        const auto arrays = source_->cast<py::tuple>();
        samples = Rows(arrays[0], step);
        labels = Rows(arrays[1], step);
      } else {
        const py::object returned = (*source_)(step);
        if (!py::isinstance<py::tuple>(returned) || py::len(returned) != 2) {
          return absl::InvalidArgumentError(
              fmt::format("the data callable must return (samples, labels), not {} (step {})",
                          py::str(py::type::of(returned)).cast<std::string>(), step));
        }
        samples = returned.cast<py::tuple>()[0];
        labels = returned.cast<py::tuple>()[1];
      }
      train::Batch batch;
      ASSIGN_OR_RETURN(batch.inputs[task_.samples_input], Bytes(samples, samples_, "samples"));
      ASSIGN_OR_RETURN(batch.inputs[task_.labels_input], Bytes(labels, labels_, "labels"));
      return batch;
    } catch (py::error_already_set& error) {
      // The callable raised: its message, as one line.
      return absl::InvalidArgumentError(
          fmt::format("the data callable raised at step {}: {}", step, error.what()));
    }
  }

 private:
  py::object Rows(const py::handle& array, int64_t step) const {
    const py::array all = py::array::ensure(array);
    if (!all || all.ndim() == 0 || all.shape(0) == 0) {
      throw py::value_error("data arrays must have at least one example on their first axis");
    }
    const int64_t count = all.shape(0);
    py::list rows;
    for (int64_t i = 0; i < task_.batch; ++i) rows.append((step * task_.batch + i) % count);
    return all.attr("take")(rows, 0);
  }

  // The array's bytes, checked against the input's type: its shape and a
  // dtype of the same kind and size.
  static absl::StatusOr<std::vector<std::byte>> Bytes(const py::object& object,
                                                      const ir::TensorType& type,
                                                      const char* what) {
    const char* dtype = type.dtype == ir::DType::kF32   ? "float32"
                        : type.dtype == ir::DType::kI32 ? "int32"
                                                        : "int64";
    const py::array array = py::array::ensure(object);
    std::vector<int64_t> shape;
    if (array) {
      for (py::ssize_t axis = 0; axis < array.ndim(); ++axis) shape.push_back(array.shape(axis));
    }
    if (!array || shape != type.shape || !array.dtype().is(py::dtype(std::string(dtype)))) {
      return absl::InvalidArgumentError(fmt::format(
          "{} must be a {} array of shape {} (the model's input{}), not {}", what, dtype,
          ir::ShapeToString(type.shape), type.layout == ir::Layout::kNHWC ? ", NHWC" : "",
          array ? fmt::format("{} {}", py::str(array.dtype()).cast<std::string>(),
                              ir::ShapeToString(shape))
                : "something that is not an array"));
    }
    const py::array contiguous = py::array::ensure(array, py::array::c_style);
    std::vector<std::byte> bytes(static_cast<size_t>(type.bytes()));
    std::memcpy(bytes.data(), contiguous.data(), bytes.size());
    return bytes;
  }

  train::TaskInfo task_;
  ir::TensorType samples_;
  ir::TensorType labels_;
  const py::object* source_;
  bool arrays_;
};

// A finished training run: the trainer (and its backend) stay, so the
// parameters can be read and training continued.
class PyTraining {
 public:
  PyTraining(std::unique_ptr<backends::Backend> backend, std::unique_ptr<train::Trainer> trainer,
             std::unique_ptr<py::object> data, nlohmann::ordered_json summary)
      : backend_(std::move(backend)),
        trainer_(std::move(trainer)),
        data_(std::move(data)),
        summary_(std::move(summary)) {}
  ~PyTraining() {
    // The trainer first: it uses the backend, and its data source reads `data_`.
    trainer_.reset();
    backend_.reset();
  }

  py::object Field(const std::string& name) const {
    if (!summary_.contains(name)) {
      throw py::attribute_error(fmt::format("Training has no field '{}'", name));
    }
    return JsonToPython(summary_[name]);
  }
  py::array_t<double> Losses() const {
    const auto losses = summary_["losses"].get<std::vector<double>>();
    return py::array_t<double>(static_cast<py::ssize_t>(losses.size()), losses.data());
  }
  // Every trained parameter, by name, as float32 arrays of the IR's shape.
  py::dict Parameters() const { return Values(ir::ValueKind::kParameter); }
  // Batch-norm running statistics and other buffers.
  py::dict Buffers() const { return Values(ir::ValueKind::kBuffer); }
  void Save(const std::string& path) const { Check(trainer_->Save(path)); }
  py::dict Summary() const { return JsonToPython(summary_); }

 private:
  py::dict Values(ir::ValueKind kind) const {
    const ir::Graph& graph = trainer_->training().graph;
    py::dict values;
    for (const ir::Value& value : graph.values()) {
      if (value.kind != kind || value.type.dtype != ir::DType::kF32) continue;
      py::array_t<float> array(value.type.shape);
      Check(trainer_->runtime().Read(
          value.id, std::as_writable_bytes(
                        std::span(array.mutable_data(), static_cast<size_t>(array.size())))));
      values[py::str(value.name)] = array;
    }
    return values;
  }

  std::unique_ptr<backends::Backend> backend_;
  std::unique_ptr<train::Trainer> trainer_;
  std::unique_ptr<py::object> data_;  // what the trainer's data source points to
  nlohmann::ordered_json summary_;
};

struct TrainKeywords {
  int64_t steps;
  std::string policy;
  std::string optimizer;
  std::optional<double> lr;
  double momentum;
  double weight_decay;
  py::object data;
  std::optional<std::string> save;
  int64_t save_every;
  std::optional<std::string> resume;
  std::optional<std::string> trace;
  int threads;
  bool progress;
};

std::unique_ptr<PyTraining> Train(const PyWorkload& workload, const TrainKeywords& keywords,
                                  const PlanningKeywords& planning) {
  if (keywords.steps <= 0) throw py::value_error("steps must be a positive integer");
  if (keywords.save_every < 0) throw py::value_error("save_every must be at least 0");
  if (keywords.save_every > 0 && !keywords.save) {
    Raise(absl::InvalidArgumentError("--save-every needs --save PATH"));
  }
  if (keywords.save) Check(CheckOutputPath(*keywords.save, "checkpoint"));
  if (keywords.trace) Check(CheckOutputPath(*keywords.trace, "trace"));
  session::TrainingRequest request;
  request.workload = workload.spec;
  request.hardware = planning.hardware;
  request.budget = planning.budget.value_or("");
  request.policy = keywords.policy;
  request.optimizer = keywords.optimizer;
  request.lr = keywords.lr;
  request.momentum = keywords.momentum;
  request.weight_decay = keywords.weight_decay;
  request.planner = PlannerOptionsOf(planning);
  request.planner.interrupted = PythonInterrupted;
  // The data: a source name (str: the CLI's --data), arrays (a tuple) or a
  // callable.
  py::object data = keywords.data;
  if (py::isinstance<py::str>(data)) {
    request.data = data.cast<std::string>();
  } else if (py::isinstance<py::tuple>(data) || py::isinstance<py::list>(data)) {
    if (py::len(data) != 2) throw py::value_error("data must be (samples, labels)");
    data = py::tuple(data);
  } else if (!PyCallable_Check(data.ptr())) {
    throw py::type_error(
        "data must be 'synthetic', a directory, (samples, labels) arrays or a callable "
        "step -> (samples, labels)");
  }
  train::TrainerOptions options = Unwrap(session::MakeTrainerOptions(request));
  const session::BackendSpec backend_spec{.backend = "cpu", .threads = keywords.threads};
  std::optional<analysis::MeasuredCosts> costs;
  if (planning.costs) {
    costs = Unwrap(analysis::LoadCostsFile(*planning.costs));
    options.costs = &*costs;
    if (const std::optional<std::string> warning =
            session::CostsMismatch(*costs, *planning.costs, backend_spec)) {
      PyErr_WarnEx(PyExc_UserWarning, warning->c_str(), 1);
    }
  }
  // The trainer's data source reads `data` through this pointer: the object
  // moves to the PyTraining that owns the trainer, and lives as long as it.
  auto owned_data = std::make_unique<py::object>(data);
  if (!py::isinstance<py::str>(data)) {
    options.make_data =
        [source = owned_data.get(), arrays = py::isinstance<py::tuple>(data)](
            const ir::Graph& graph,
            const train::TaskInfo& task) -> absl::StatusOr<std::unique_ptr<train::DataSource>> {
      return std::make_unique<PythonData>(graph, task, source, arrays);
    };
  }
  const session::Workload built = Unwrap(session::BuildWorkload(workload.spec));
  options.initial_values = &built.initial_values;
  std::unique_ptr<backends::Backend> backend = Unwrap(session::MakeBackend(backend_spec));

  absl::StatusOr<std::unique_ptr<train::Trainer>> created;
  absl::StatusOr<train::TrainingSummary> ran;
  std::unique_ptr<train::Trainer> trainer;
  {
    py::gil_scoped_release release;
    created = train::Trainer::Create(built.graph, options, *backend);
    if (created.ok()) {
      trainer = *std::move(created);
      absl::Status resumed = keywords.resume ? trainer->Resume(*keywords.resume) : absl::OkStatus();
      if (resumed.ok()) {
        train::Progress progress(std::cerr, train::Progress::Mode::kPlain, /*log_every=*/10,
                                 "samples");
        train::RunOptions run;
        run.steps = keywords.steps;
        run.save_path = keywords.save.value_or("");
        run.save_every = keywords.save_every;
        run.progress = keywords.progress ? &progress : nullptr;
        run.interrupted = PythonInterrupted;
        run.record_last_step = keywords.trace.has_value();
        ran = trainer->Run(run);
        if (ran.ok() && keywords.trace) {
          absl::StatusOr<std::string> trace =
              session::TrainingTraceJson(*trainer, *ran, backend_spec);
          absl::Status written =
              trace.ok() ? WriteFileAtomically(*keywords.trace, *trace, "trace") : trace.status();
          if (!written.ok()) ran = written;
        }
      } else {
        ran = resumed;
      }
    } else {
      ran = created.status();
    }
  }
  if (!ran.ok()) {
    {
      py::gil_scoped_release release;
      trainer.reset();  // before the data it reads
    }
    Raise(ran.status());
  }
  nlohmann::ordered_json json =
      session::TrainingSummaryToJson(request, options, backend_spec, *trainer, *ran,
                                     {keywords.resume.value_or(""), keywords.save.value_or("")});
  return std::make_unique<PyTraining>(std::move(backend), std::move(trainer), std::move(owned_data),
                                      std::move(json));
}

}  // namespace
}  // namespace spillway::python

PYBIND11_MODULE(_spillway, m) {
  using namespace spillway;
  using namespace spillway::python;
  m.doc() = "Spillway: plan and train deep networks whose activations do not fit in memory";
  g_error = PyErr_NewExceptionWithDoc(
      "spillway.Error",
      "A bad workload, option, file or budget: the message is the CLI's one line.", nullptr,
      nullptr);
  m.add_object("Error", py::handle(g_error));

  m.def(
      "models",
      [] {
        py::list list;
        for (const models::ModelInfo& info : models::ListModels()) {
          py::dict options;
          for (const models::ModelOptionInfo& option : info.options) {
            std::string keyword(session::ModelOptionFlag(option.name).substr(2));
            std::replace(keyword.begin(), keyword.end(), '-', '_');
            options[py::str(keyword)] = option.default_value;
          }
          list.append(py::dict(py::arg("name") = info.name,
                               py::arg("description") = info.description,
                               py::arg("options") = options));
        }
        return list;
      },
      "The built-in models: name, description and options (keyword -> default).");
  m.def(
      "hardware_presets",
      [] {
        std::vector<std::string> names;
        for (const analysis::HardwareProfile& profile : analysis::HardwarePresets()) {
          names.push_back(profile.name);
        }
        return names;
      },
      "The names of the built-in hardware profiles.");
  m.def(
      "hardware",
      [](const std::string& name_or_path) {
        return JsonToPython(nlohmann::json::parse(
            analysis::HardwareProfileToJson(Unwrap(analysis::LoadHardwareProfile(name_or_path)))));
      },
      py::arg("name_or_path"), "A hardware profile (a preset or a JSON file) as a dict.");

  py::class_<PyWorkload>(m, "Workload",
                         "What to plan or train: Workload(model='resnet50', image=8000), "
                         "Workload(onnx='m.onnx', loss='cross-entropy'), or "
                         "Workload(graph='g.json').")
      .def(py::init(
          [](const py::kwargs& keywords) { return PyWorkload{SpecFromKeywords(keywords)}; }))
      .def("describe", [](const PyWorkload& w) { return session::DescribeWorkload(w.spec); })
      .def("__repr__", [](const PyWorkload& w) {
        return fmt::format("<Workload {}>", session::DescribeWorkload(w.spec));
      });

  py::class_<PyPlanResult>(m, "PlanResult",
                           "One policy's plan: the fields of `spillway plan --json` as "
                           "attributes, and its trace, memory plot, Program and memory curve.")
      .def("__getattr__", &PyPlanResult::Field)
      .def("to_dict", [](const PyPlanResult& r) { return JsonToPython(r.json()); })
      .def("write_trace", &PyPlanResult::WriteTrace, py::arg("path"),
           "Write the simulated step as a Chrome trace (open it in Perfetto).")
      .def("write_memory_plot", &PyPlanResult::WriteMemoryPlot, py::arg("path"),
           "Write device memory over the step as an SVG plot.")
      .def("write_program", &PyPlanResult::WriteProgram, py::arg("path"),
           "Write the Program (every instruction, buffer and event) as text.")
      .def("memory_curve", &PyPlanResult::MemoryCurve,
           "Device bytes allocated over the step: (seconds, bytes) arrays, a step function.")
      .def("__repr__", &PyPlanResult::Repr);

  py::class_<PySweep>(m, "Sweep",
                      "A policy at several budgets: the fields of `spillway sweep --json` as "
                      "attributes, its points as PlanResults, and its plot.")
      .def("__getattr__", &PySweep::Field)
      .def_property_readonly("points", &PySweep::Points,
                             "One PlanResult per budget, the smallest first.")
      .def("to_dict", [](const PySweep& s) { return JsonToPython(s.json()); })
      .def("write_plot", &PySweep::WritePlot, py::arg("path"),
           "Write the overhead against the budget as an SVG plot.")
      .def("__repr__", &PySweep::Repr);

  py::class_<PyTraining>(m, "Training",
                         "A finished run: the fields of `spillway train --json` as attributes, "
                         "its losses, parameters and buffers as arrays.")
      .def("__getattr__", &PyTraining::Field)
      .def_property_readonly("losses", &PyTraining::Losses)
      .def("parameters", &PyTraining::Parameters, "Trained parameters by name (float32 arrays).")
      .def("buffers", &PyTraining::Buffers, "Batch-norm running statistics by name.")
      .def("save", &PyTraining::Save, py::arg("path"), "Write a checkpoint of the state.")
      .def("to_dict", &PyTraining::Summary);

  const auto planning_keywords =
      [](const std::string& hardware, const std::optional<std::string>& budget,
         const std::string& optimizer, const std::string& math_mode, bool no_link,
         const std::optional<std::string>& costs, int max_evaluations, int refine_passes,
         double time_limit, int plan_threads, const std::string& backward_order, bool fetch_once) {
        return PlanningKeywords{hardware,   budget,       optimizer,       math_mode,
                                no_link,    costs,        max_evaluations, refine_passes,
                                time_limit, plan_threads, backward_order,  fetch_once};
      };
  m.def(
      "plan",
      [planning_keywords](const PyWorkload& workload, const std::string& policy,
                          const std::string& hardware, const std::optional<std::string>& budget,
                          const std::string& optimizer, const std::string& math_mode, bool no_link,
                          const std::optional<std::string>& costs, bool bound, int max_evaluations,
                          int refine_passes, double time_limit, int plan_threads,
                          const std::string& backward_order, bool fetch_once, bool progress) {
        return Plan(workload, policy, bound,
                    planning_keywords(hardware, budget, optimizer, math_mode, no_link, costs,
                                      max_evaluations, refine_passes, time_limit, plan_threads,
                                      backward_order, fetch_once),
                    progress);
      },
      py::arg("workload"), py::kw_only(), py::arg("policy") = "hybrid",
      py::arg("hardware") = "v100-16g-nvlink2", py::arg("budget") = py::none(),
      py::arg("optimizer") = "sgd", py::arg("math_mode") = "fp32", py::arg("no_link") = false,
      py::arg("costs") = py::none(), py::arg("bound") = false,
      py::arg("max_evaluations") = kPlannerDefaults.max_evaluations,
      py::arg("refine_passes") = kPlannerDefaults.max_refine_passes,
      py::arg("time_limit") = kPlannerDefaults.time_limit_s,
      py::arg("plan_threads") = kPlannerDefaults.threads, py::arg("backward_order") = "auto",
      py::arg("fetch_once") = false, py::arg("progress") = true,
      "Plan one policy under a budget and predict its step: `spillway plan`.");
  m.def(
      "compare",
      [planning_keywords](
          const PyWorkload& workload, const std::string& hardware,
          const std::optional<std::string>& budget, const std::string& optimizer,
          const std::string& math_mode, bool no_link, const std::optional<std::string>& costs,
          bool optimal, bool bound, int max_evaluations, int refine_passes, double time_limit,
          int plan_threads, const std::string& backward_order, bool fetch_once, bool progress) {
        return Compare(workload, optimal, bound,
                       planning_keywords(hardware, budget, optimizer, math_mode, no_link, costs,
                                         max_evaluations, refine_passes, time_limit, plan_threads,
                                         backward_order, fetch_once),
                       progress);
      },
      py::arg("workload"), py::kw_only(), py::arg("hardware") = "v100-16g-nvlink2",
      py::arg("budget") = py::none(), py::arg("optimizer") = "sgd", py::arg("math_mode") = "fp32",
      py::arg("no_link") = false, py::arg("costs") = py::none(), py::arg("optimal") = false,
      py::arg("bound") = false, py::arg("max_evaluations") = kPlannerDefaults.max_evaluations,
      py::arg("refine_passes") = kPlannerDefaults.max_refine_passes,
      py::arg("time_limit") = kPlannerDefaults.time_limit_s,
      py::arg("plan_threads") = kPlannerDefaults.threads, py::arg("backward_order") = "auto",
      py::arg("fetch_once") = false, py::arg("progress") = true,
      "Every policy on one workload and budget, none first: `spillway compare`.");
  m.def(
      "sweep",
      [planning_keywords](const PyWorkload& workload, const std::string& policy,
                          const std::optional<std::vector<std::string>>& budgets,
                          const std::optional<std::string>& from_share,
                          const std::optional<std::string>& to_share,
                          const std::optional<int>& points, const std::string& hardware,
                          const std::string& optimizer, const std::string& math_mode, bool no_link,
                          const std::optional<std::string>& costs, int max_evaluations,
                          int refine_passes, double time_limit, int plan_threads,
                          const std::string& backward_order, bool fetch_once, bool progress) {
        session::SweepBudgets wanted;
        if (budgets.has_value()) {
          if (from_share || to_share || points) {
            Raise(absl::InvalidArgumentError(
                "give budgets, or from_share, to_share and points, not both"));
          }
          if (budgets->empty()) Raise(absl::InvalidArgumentError("budgets is empty"));
          wanted.sizes = *budgets;
        }
        if (from_share) wanted.from = *from_share;
        if (to_share) wanted.to = *to_share;
        if (points) wanted.points = *points;
        return Sweep(workload, policy, std::move(wanted),
                     planning_keywords(hardware, std::nullopt, optimizer, math_mode, no_link, costs,
                                       max_evaluations, refine_passes, time_limit, plan_threads,
                                       backward_order, fetch_once),
                     progress);
      },
      py::arg("workload"), py::kw_only(), py::arg("policy") = "hybrid",
      py::arg("budgets") = py::none(), py::arg("from_share") = py::none(),
      py::arg("to_share") = py::none(), py::arg("points") = py::none(),
      py::arg("hardware") = "v100-16g-nvlink2", py::arg("optimizer") = "sgd",
      py::arg("math_mode") = "fp32", py::arg("no_link") = false, py::arg("costs") = py::none(),
      py::arg("max_evaluations") = kPlannerDefaults.max_evaluations,
      py::arg("refine_passes") = kPlannerDefaults.max_refine_passes,
      py::arg("time_limit") = kPlannerDefaults.time_limit_s,
      py::arg("plan_threads") = kPlannerDefaults.threads, py::arg("backward_order") = "auto",
      py::arg("fetch_once") = false, py::arg("progress") = true,
      "One policy at several budgets, the smallest first: `spillway sweep`. budgets=['8GiB', "
      "'12GiB'], or points budgets from from_share to to_share of the arena none needs "
      "('30%' to '100%', 8 points by default).");
  m.def("write_sweep_plot", &WriteSweepPlot, py::arg("path"), py::arg("sweeps"),
        "Write several sweeps of one workload (one a policy) as one SVG plot, as `spillway sweep "
        "--policy a,b --plot` draws them.");
  m.def(
      "export",
      [](const PyWorkload& workload, const std::string& checkpoint, const std::string& out) {
        absl::StatusOr<session::ExportSummary> exported;
        {
          py::gil_scoped_release release;
          exported = session::ExportToOnnx(workload.spec, checkpoint, out);
        }
        const session::ExportSummary summary = Unwrap(std::move(exported));
        return py::dict(py::arg("tensors") = summary.tensors,
                        py::arg("elements") = summary.elements, py::arg("step") = summary.step);
      },
      py::arg("workload"), py::kw_only(), py::arg("checkpoint"), py::arg("out"),
      "Write a checkpoint's trained values back into the workload's ONNX file: `spillway "
      "export`. Returns the tensors and values written and the checkpoint's step.");
  m.def(
      "train",
      [planning_keywords](const PyWorkload& workload, int64_t steps, const std::string& policy,
                          const std::string& hardware, const std::optional<std::string>& budget,
                          const std::string& optimizer, const std::optional<double>& lr,
                          double momentum, double weight_decay, const py::object& data,
                          const std::optional<std::string>& save, int64_t save_every,
                          const std::optional<std::string>& resume,
                          const std::optional<std::string>& trace, int threads,
                          const std::optional<std::string>& costs, int max_evaluations,
                          int refine_passes, double time_limit, int plan_threads,
                          const std::string& backward_order, bool fetch_once, bool progress) {
        const TrainKeywords keywords{steps,        policy,  optimizer, lr,         momentum,
                                     weight_decay, data,    save,      save_every, resume,
                                     trace,        threads, progress};
        return Train(
            workload, keywords,
            planning_keywords(hardware, budget, optimizer, "fp32", false, costs, max_evaluations,
                              refine_passes, time_limit, plan_threads, backward_order, fetch_once));
      },
      py::arg("workload"), py::kw_only(), py::arg("steps") = 20, py::arg("policy") = "hybrid",
      py::arg("hardware") = "cpu", py::arg("budget") = py::none(), py::arg("optimizer") = "sgd",
      py::arg("lr") = py::none(), py::arg("momentum") = 0.9, py::arg("weight_decay") = 0.0,
      py::arg("data") = "synthetic", py::arg("save") = py::none(), py::arg("save_every") = 0,
      py::arg("resume") = py::none(), py::arg("trace") = py::none(), py::arg("threads") = 2,
      py::arg("costs") = py::none(), py::arg("max_evaluations") = kPlannerDefaults.max_evaluations,
      py::arg("refine_passes") = kPlannerDefaults.max_refine_passes,
      py::arg("time_limit") = kPlannerDefaults.time_limit_s,
      py::arg("plan_threads") = kPlannerDefaults.threads, py::arg("backward_order") = "auto",
      py::arg("fetch_once") = false, py::arg("progress") = false,
      "Train on the CPU backend under a budget, as the policy plans it: `spillway train`; "
      "trace='step.json' writes the last step measured beside the simulated one.");
}
