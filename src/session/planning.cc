#include "session/planning.h"

#include <cmath>
#include <utility>

#include "analysis/costs_file.h"
#include "fmt/format.h"
#include "nodelink/node_link.h"
#include "planner/step_relaxation.h"
#include "session/training.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::session {

PlanningSession::PlanningSession(PlanningRequest request, PlanningObserver* observer)
    : request_(std::move(request)), observer_(observer) {}

absl::StatusOr<std::unique_ptr<PlanningSession>> PlanningSession::Create(
    const PlanningRequest& request, PlanningObserver* observer) {
  const WorkloadSpec& spec = request.workload;
  if (spec.graph.empty() && spec.model.empty() == spec.onnx.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model, --onnx and --graph");
  }
  // Not make_unique: the constructor is private.
  std::unique_ptr<PlanningSession> session(new PlanningSession(request, observer));
  if (!spec.graph.empty()) {
    RETURN_IF_ERROR(session->BuildGraphFileStep());
  } else {
    RETURN_IF_ERROR(session->BuildModelStep());
  }
  session->MakeContext();
  return session;
}

void PlanningSession::MakeContext() {
  planner::PlannerOptions options = request_.planner;
  options.host_link = request_.host_link;
  options.budget_bytes = budget_bytes_;
  if (observer_ != nullptr) {
    options.progress = [this](int evaluations) {
      observer_->Progress(evaluations - evaluations_at_begin_);
    };
    options.interrupted = [observer = observer_] { return observer->Interrupted(); };
  }
  context_ =
      std::make_unique<planner::PlanningContext>(training_.graph, *cost_model_, profile_, options);
}

absl::Status PlanningSession::SetBudget(int64_t budget_bytes) {
  if (budget_bytes < 1) {
    return absl::InvalidArgumentError(
        fmt::format("a budget must be at least 1 byte, not {}", budget_bytes));
  }
  budget_bytes_ = budget_bytes;
  MakeContext();
  return absl::OkStatus();
}

absl::Status PlanningSession::BuildGraphFileStep() {
  ASSIGN_OR_RETURN(profile_, analysis::LoadHardwareProfile(request_.hardware));
  ASSIGN_OR_RETURN(budget_bytes_, planner::ParseBudget(request_.budget, profile_));
  ASSIGN_OR_RETURN(nodelink::CostedGraph costed, LoadGraphFile(request_.workload));
  training_.graph = std::move(costed.graph);
  cost_model_ = std::make_unique<analysis::TabulatedCostModel>(
      std::vector<std::optional<double>>(costed.node_seconds.begin(), costed.node_seconds.end()),
      std::make_unique<analysis::RooflineCostModel>(profile_));
  return absl::OkStatus();
}

absl::Status PlanningSession::BuildModelStep() {
  ASSIGN_OR_RETURN(const Workload built, BuildWorkload(request_.workload));
  autodiff::OptimizerOptions optimizer;
  ASSIGN_OR_RETURN(optimizer.kind, ParseOptimizer(request_.optimizer));
  ASSIGN_OR_RETURN(training_, autodiff::BuildTrainingGraph(built.graph, optimizer));
  ASSIGN_OR_RETURN(profile_, analysis::LoadHardwareProfile(request_.hardware));
  ASSIGN_OR_RETURN(budget_bytes_, planner::ParseBudget(request_.budget, profile_));
  analysis::RooflineCostModel::Options cost_options;
  const std::optional<analysis::MathMode> math_mode = analysis::ParseMathMode(request_.math_mode);
  if (!math_mode.has_value()) {
    return absl::InvalidArgumentError(
        fmt::format("--math-mode '{}': fp32, tf32 or fp16", request_.math_mode));
  }
  cost_options.math_mode = *math_mode;
  cost_model_ = std::make_unique<analysis::RooflineCostModel>(profile_, cost_options);
  if (!request_.costs.empty()) RETURN_IF_ERROR(UseCostsFile());
  return absl::OkStatus();
}

// Replaces the roofline by the times a costs file measured (the roofline
// stays for the nodes the file lacks), telling the observer what they are.
absl::Status PlanningSession::UseCostsFile() {
  const std::string& path = request_.costs;
  ASSIGN_OR_RETURN(const analysis::MeasuredCosts costs, analysis::LoadCostsFile(path));
  ASSIGN_OR_RETURN(analysis::MeasuredCostModel measured,
                   analysis::MakeMeasuredCostModel(costs, training_.graph, std::move(cost_model_)));
  const analysis::MeasuredCosts::Configuration& on = costs.measured_on;
  if (observer_ != nullptr) {
    observer_->Note(fmt::format(
        "costs: {} of {} nodes and the copies from {} (measured on {}, {} backend, {} threads, "
        "{}, {}){}; {}",
        measured.matched, measured.matched + measured.unmatched, path, on.machine, on.backend,
        on.threads, on.isa, on.date,
        measured.unmatched > 0
            ? fmt::format("; {} nodes it lacks keep the roofline's times", measured.unmatched)
            : "",
        costs.contention
            ? fmt::format("while they overlap, a copy slows kernels by {:.0f}% and a kernel slows "
                          "copies by {:.0f}%",
                          100 * costs.contention->compute_slowdown,
                          100 * costs.contention->copy_slowdown)
            : "copies and kernels planned as independent (the file measured no contention)"));
  }
  cost_model_ = std::move(measured.model);
  return absl::OkStatus();
}

void PlanningSession::Begin(std::string label) {
  evaluations_at_begin_ = context_->evaluations();
  if (observer_ != nullptr) observer_->Begin(label);
}

void PlanningSession::End() {
  if (observer_ != nullptr) observer_->End();
}

absl::StatusOr<planner::PlanResult> PlanningSession::Run(planner::Policy& policy,
                                                         std::string label) {
  Begin(label.empty() ? std::string(policy.name()) : std::move(label));
  absl::StatusOr<planner::PlanResult> result = planner::RunPolicy(policy, *context_);
  End();
  return result;
}

absl::StatusOr<planner::PlanResult> PlanningSession::Run(std::string_view policy,
                                                         std::string label) {
  ASSIGN_OR_RETURN(std::unique_ptr<planner::Policy> made, planner::MakePolicy(policy));
  return Run(*made, std::move(label));
}

absl::StatusOr<planner::PlanResult> PlanningSession::RunOptimal(planner::OptimalOptions options,
                                                                std::string label) {
  // The solver reports nothing until it ends: say that it runs.
  options.solving = [this, limit_s = options.solver_time_limit_s] {
    Begin(fmt::format("optimal: CBC solving its integer program (at most {:g} s)", limit_s));
  };
  planner::OptimalPolicy optimal(std::move(options));
  return Run(optimal, std::move(label));
}

absl::StatusOr<planner::PlanResult::Bound> PlanningSession::ProveBound() {
  RETURN_IF_ERROR(CheckOneOrder("--bound"));
  const planner::StepBoundOptions options;
  Begin(fmt::format("lower bound: Clp solving its LP (at most {:g} s)", options.time_limit_s));
  absl::StatusOr<planner::PlanResult::Bound> bound = planner::LowerBoundOnStep(*context_, options);
  End();
  return bound;
}

absl::Status PlanningSession::CheckOneOrder(std::string_view what) const {
  if (!context_->options().every_backward_order) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "{} bounds the plans of one backward order, and --backward-order each plans hybrid in "
      "several: give the order (auto, memory-aware, lookahead or topological)",
      what));
}

std::string PlanningSession::Describe(bool with_budget) const {
  const bool graph_file = !request_.workload.graph.empty();
  return fmt::format("{}{} on {}{}{}", DescribeWorkload(request_.workload),
                     graph_file ? "" : fmt::format(" ({})", request_.optimizer), profile_.name,
                     request_.host_link ? "" : " without a host link",
                     with_budget ? fmt::format(", budget {}", FormatBytes(budget_bytes_)) : "");
}

const planner::PlanResult* Comparison::Find(std::string_view policy) const {
  for (const planner::PlanResult& result : results) {
    if (result.policy == policy) return &result;
  }
  return nullptr;
}

absl::StatusOr<Comparison> Compare(PlanningSession& session, const CompareOptions& options) {
  if (options.optimal) RETURN_IF_ERROR(session.CheckOneOrder("--optimal"));
  if (options.bound) RETURN_IF_ERROR(session.CheckOneOrder("--bound"));
  Comparison comparison;
  std::vector<std::string> names;
  for (const planner::PolicyEntry& entry : planner::PolicyRegistry()) {
    if (entry.exact) continue;
    const bool skipped = !session.request().host_link && entry.needs_host_link;
    (skipped ? comparison.not_run : names).push_back(entry.name);
  }
  const size_t total = names.size() + (options.optimal ? 1 : 0);
  for (size_t i = 0; i < names.size(); ++i) {
    ASSIGN_OR_RETURN(planner::PlanResult result,
                     session.Run(names[i], fmt::format("{} ({}/{})", names[i], i + 1, total)));
    comparison.results.push_back(std::move(result));
  }
  if (options.optimal) {
    ASSIGN_OR_RETURN(
        planner::PlanResult result,
        session.RunOptimal(options.optimal_options, fmt::format("optimal ({}/{})", total, total)));
    comparison.bound = result.bound;
    comparison.results.push_back(std::move(result));
  } else if (options.bound) {
    ASSIGN_OR_RETURN(comparison.bound, session.ProveBound());
  }
  return comparison;
}

nlohmann::json PlanResultToJson(const planner::PlanResult& result, const planner::PlanResult& none,
                                const planner::PlanResult* swap, int64_t budget_bytes) {
  const sim::SimulationResult& simulation = result.best.simulation;
  const program::Plan& plan = result.best.plan;
  nlohmann::json json = {
      {"policy", result.policy},
      {"feasible", result.feasible},
      {"budget_bytes", budget_bytes},
      {"arena_bytes", result.best.arena_bytes()},
      {"workspace_bytes", result.best.program.workspace_bytes},
      {"smallest_arena_bytes", result.smallest_arena_bytes},
      {"step_time_s", simulation.step_time_s},
      {"none_step_time_s", none.best.step_time_s()},
      {"overhead", simulation.step_time_s / none.best.step_time_s() - 1.0},
      {"d2h_bytes", simulation.d2h_bytes},
      {"h2d_bytes", simulation.h2d_bytes},
      {"host_bytes", result.best.program.host_bytes},
      {"recompute_flops", simulation.recompute_flops},
      {"recompute_s", simulation.recompute_s},
      {"compute_stall_s", simulation.streams[0].stall_s},
      {"compute_stall_fetch_s", simulation.compute_stalls.fetch_s},
      {"compute_stall_memory_s", simulation.compute_stalls.memory_s},
      {"compute_stall_other_s",
       simulation.compute_stalls.spill_s + simulation.compute_stalls.other_s},
      {"spilled_tensors", plan.Count(program::Decision::kSpill)},
      {"refetched_tensors", plan.CountRefetched()},
      {"recomputed_tensors", plan.Count(program::Decision::kRecompute)},
      {"planning_ms", result.planning_s * 1e3},
      {"evaluations", result.evaluations},
      {"laid_out", result.laid_out},
      {"repeated", result.repeated},
      {"converged", !result.hit_time_limit},
      {"backward_order", program::BackwardOrderName(result.backward_order)},
      {"orders_planned", result.orders_planned},
  };
  if (!result.start.empty()) json["start"] = result.start;
  if (!result.tuning.empty()) json["tuning"] = result.tuning;
  if (!result.race.empty()) {
    nlohmann::json& race = json["race"] = nlohmann::json::array();
    for (const planner::PlanResult::Refinement& refinement : result.race) {
      race.push_back({{"start", refinement.start},
                      {"start_step_time_s", refinement.start_step_s},
                      {"step_time_s", refinement.step_s},
                      {"evaluations", refinement.evaluations},
                      {"finished", refinement.finished},
                      {"stopped_by_time_limit", refinement.timed_out}});
    }
  }
  if (result.bound.has_value()) {
    const planner::PlanResult::Bound& bound = *result.bound;
    nlohmann::json entry = {{"solved", bound.solved},
                            {"solve_s", bound.solve_s},
                            {"columns", bound.columns},
                            {"rows", bound.rows},
                            {"method", bound.returned.empty() ? "lp" : "milp"}};
    if (!bound.returned.empty()) entry["returned"] = bound.returned;
    // An infinite bound (nothing fits) is not a JSON number: null.
    if (std::isfinite(bound.step_s)) {
      entry["step_time_s"] = bound.step_s;
      if (result.feasible && planner::BoundCovers(result.best.plan)) {
        entry["gap"] = planner::GapToBound(simulation.step_time_s, bound.step_s);
      }
    } else {
      entry["step_time_s"] = nullptr;
    }
    if (bound.relaxation_plan) {
      entry["relaxation_plan"] = {{"step_time_s", bound.relaxation_plan_step_s},
                                  {"arena_bytes", bound.relaxation_plan_arena_bytes},
                                  {"fits", bound.relaxation_plan_fits}};
    }
    json["lower_bound"] = std::move(entry);
  }
  if (swap != nullptr && swap->feasible && result.feasible) {
    json["speedup_over_swap"] = swap->best.step_time_s() / simulation.step_time_s - 1.0;
  }
  return json;
}

nlohmann::json ComparisonToJson(const Comparison& comparison, int64_t budget_bytes) {
  const planner::PlanResult* swap = comparison.Find("swap");
  std::optional<double> bound_s;
  if (comparison.bound.has_value() && std::isfinite(comparison.bound->step_s)) {
    bound_s = comparison.bound->step_s;
  }
  nlohmann::json list = nlohmann::json::array();
  for (const planner::PlanResult& result : comparison.results) {
    list.push_back(PlanResultToJson(result, comparison.none(), swap, budget_bytes));
    if (bound_s.has_value() && result.feasible && planner::BoundCovers(result.best.plan)) {
      list.back()["gap_to_bound"] = planner::GapToBound(result.best.step_time_s(), *bound_s);
    }
  }
  return list;
}

}  // namespace spillway::session
