#include "planner/planner.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <queue>
#include <set>
#include <thread>
#include <utility>

#include "fmt/format.h"
#include "planner/policies.h"
#include "planner/refetch.h"
#include "program/rewriter.h"
#include "program/verifier.h"
#include "program/workspaces.h"
#include "support/check.h"
#include "support/option_check.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::planner {

namespace {

// A Program and the plan it was built from: what PeakRefetcher::Lower needs.
struct BuiltPlan {
  program::Plan plan;
  program::Program program;
  int64_t arena_bytes() const { return program.arena_bytes; }
};

// The smallest arena of the plan that frees the most, in one order: every
// saved tensor spilled (fetched twice where that lowers the peak, as swap
// does) or, with no host link, every recomputable one recomputed.
absl::StatusOr<int64_t> FloorInOrder(const ir::Graph& graph,
                                     const std::vector<ir::NodeId>& schedule, bool host_link,
                                     bool fetch_twice) {
  program::Plan freeing("floor", graph);
  for (const autodiff::SavedTensor& saved : autodiff::SavedTensors(graph)) {
    if (host_link && program::CanSpill(graph, saved.value)) {
      freeing.Spill(saved.value);
    } else if (program::CanRecompute(graph, saved.value)) {
      freeing.Recompute(saved.value);
    }
  }
  auto build = [&](program::Plan plan) -> absl::StatusOr<BuiltPlan> {
    ASSIGN_OR_RETURN(program::Program program, program::BuildProgram(graph, schedule, plan));
    return BuiltPlan{std::move(plan), std::move(program)};
  };
  ASSIGN_OR_RETURN(BuiltPlan start, build(std::move(freeing)));
  if (!fetch_twice) return start.arena_bytes();
  const PeakRefetcher refetcher(graph, schedule, host_link);
  ASSIGN_OR_RETURN(BuiltPlan lowest,
                   refetcher.Lower<BuiltPlan>(std::move(start), SwapOptions{}.refetch_rounds, build,
                                              [](const BuiltPlan&) { return false; }));
  return lowest.arena_bytes();
}

}  // namespace

program::BackwardOrder ChooseBackwardOrder(const ir::Graph& graph, bool host_link,
                                           int64_t tensor_budget_bytes, bool fetch_twice) {
  using program::BackwardOrder;
  const std::vector<ir::NodeId> topological =
      program::TrainingSchedule(graph, BackwardOrder::kTopological);
  const std::vector<ir::NodeId> memory_aware =
      program::TrainingSchedule(graph, BackwardOrder::kMemoryAware);
  auto lower = [&](bool twice) -> std::optional<std::pair<BackwardOrder, int64_t>> {
    const absl::StatusOr<int64_t> in_topological =
        FloorInOrder(graph, topological, host_link, twice);
    const absl::StatusOr<int64_t> in_memory_aware =
        FloorInOrder(graph, memory_aware, host_link, twice);
    // Both build (every plan a policy makes must); if not, the planner will
    // say why on its first candidate, in autodiff's order.
    if (!in_memory_aware.ok() || !in_topological.ok()) return std::nullopt;
    if (*in_memory_aware < *in_topological) {
      return std::pair(BackwardOrder::kMemoryAware, *in_memory_aware);
    }
    return std::pair(BackwardOrder::kTopological, *in_topological);
  };
  if (memory_aware != topological) {
    const auto once = lower(false);
    if (!once) return BackwardOrder::kTopological;
    if (once->second <= tensor_budget_bytes || !fetch_twice) return once->first;
  } else if (!fetch_twice) {
    return BackwardOrder::kTopological;
  }
  // Nothing fits without fetching twice: the lowest floor with it, the
  // lookahead order's only where it is lower than the other two's.
  const auto twice = lower(true);
  if (!twice) return BackwardOrder::kTopological;
  const std::vector<ir::NodeId> lookahead =
      program::TrainingSchedule(graph, BackwardOrder::kLookahead);
  if (lookahead == memory_aware || lookahead == topological) return twice->first;
  const absl::StatusOr<int64_t> in_lookahead = FloorInOrder(graph, lookahead, host_link, true);
  if (in_lookahead.ok() && *in_lookahead < twice->second) return BackwardOrder::kLookahead;
  return twice->first;
}

PlanningContext::PlanningContext(const ir::Graph& graph, const analysis::CostModel& cost_model,
                                 const analysis::HardwareProfile& hardware, PlannerOptions options)
    : graph_(graph),
      cost_model_(cost_model),
      hardware_(hardware),
      options_(options),
      threads_(options.threads),
      workspace_bytes_(program::WorkspaceRegionBytes(graph, hardware.workspace_limit_bytes)),
      // Not value_or: that would build the two trial Programs even when the
      // order is given.
      backward_order_(options.backward_order.has_value()
                          ? *options.backward_order
                          : ChooseBackwardOrder(graph, options.host_link,
                                                options.budget_bytes - workspace_bytes_,
                                                options.fetch_twice)),
      rewrite_(program::RewriteSetup::Of(
          graph, program::TrainingSchedule(graph, backward_order_),
          program::ScratchBytesByNode(graph, hardware.workspace_limit_bytes))),
      simulator_(graph, cost_model, sim::SimulatorOptions{.copy_engines = hardware.copy_engines}) {
  pins_ = program::ReadPins(graph);
  const std::vector<ir::NodeId>& schedule = rewrite_.schedule;
  ideal_start_s_.assign(schedule.size() + 1, 0.0);
  for (size_t step = 0; step < schedule.size(); ++step) {
    ideal_start_s_[step + 1] = ideal_start_s_[step] + simulator_.node_seconds(schedule[step]);
  }
  saved_ = autodiff::SavedTensors(graph);
  std::stable_sort(saved_.begin(), saved_.end(),
                   [&](const autodiff::SavedTensor& a, const autodiff::SavedTensor& b) {
                     return step_of(a.producer) < step_of(b.producer);
                   });
}

program::Plan PlanningContext::KeepAll(std::string policy) const {
  program::Plan plan(std::move(policy), graph_);
  return plan;
}

absl::Status PlanningContext::Count() {
  ++evaluations_;
  // Lanes on other threads report and poll under the same lock, so the
  // caller's callbacks run on one thread at a time.
  std::lock_guard lock(progress_->mutex);
  ++progress_->considered;
  if (options_.progress) options_.progress(progress_->considered);
  if (options_.interrupted && options_.interrupted()) {
    return absl::CancelledError("planning interrupted");
  }
  return absl::OkStatus();
}

absl::StatusOr<Evaluation> PlanningContext::Evaluate(program::Plan plan,
                                                     std::optional<int64_t> layout_budget_bytes) {
  std::optional<int64_t> fit_bytes;
  if (layout_budget_bytes) fit_bytes = *layout_budget_bytes - workspace_bytes_;
  Outcome outcome = Examine(std::move(plan), std::numeric_limits<double>::infinity(),
                            /*bounded=*/false, fit_bytes);
  RETURN_IF_ERROR(outcome.status);
  RETURN_IF_ERROR(Count());
  Remember(*outcome.evaluation);
  return *std::move(outcome.evaluation);
}

std::vector<int> ReleasesAfterCopies(const program::Program& program,
                                     const sim::SimulationResult& unplaced, int64_t cap_bytes) {
  using program::BufferId;
  using program::Instruction;
  using program::InstructionKind;
  const std::vector<Instruction>& instructions = program.instructions;
  // Without a copy out there is nothing to put off (a plan that only keeps
  // and recomputes, most of a deep model's candidates).
  if (std::none_of(instructions.begin(), instructions.end(), [](const Instruction& instruction) {
        return instruction.kind == InstructionKind::kCopyToHost;
      })) {
    return {};
  }
  std::vector<int> release(program.buffers.size(), -1);
  std::vector<double> copy_end_of_event(static_cast<size_t>(program.num_events), -1);
  std::vector<size_t> compute;  // compute-stream instructions, in order: their starts rise
  for (size_t i = 0; i < instructions.size(); ++i) {
    const Instruction& instruction = instructions[i];
    if (instruction.kind == InstructionKind::kCopyToHost &&
        instruction.record != program::kNoEvent) {
      copy_end_of_event[static_cast<size_t>(instruction.record)] = unplaced.timings[i].end_s;
    }
    if (instruction.stream == program::Stream::kCompute) compute.push_back(i);
  }
  // A Free that waits for a copy out: its bytes are released before the first
  // compute instruction after it that starts once the copy has ended.
  std::vector<double> copied_s(program.buffers.size(), -1);
  for (size_t i = 0; i < instructions.size(); ++i) {
    const Instruction& instruction = instructions[i];
    if (instruction.kind != InstructionKind::kFree) continue;
    double end_s = -1;
    for (const program::EventId event : instruction.waits) {
      end_s = std::max(end_s, copy_end_of_event[static_cast<size_t>(event)]);
    }
    if (end_s < 0) continue;
    const auto next = std::upper_bound(compute.begin(), compute.end(), i);
    const auto after = std::partition_point(
        next, compute.end(), [&](size_t c) { return unplaced.timings[c].start_s < end_s; });
    if (after == next) continue;  // the next compute instruction starts after the copy anyway
    const auto buffer = static_cast<size_t>(instruction.buffer);
    copied_s[buffer] = end_s;
    release[buffer] = static_cast<int>(after == compute.end() ? instructions.size() : *after);
  }
  // Walk program order with the releases put off, and where an alloc would
  // take the bytes allocated past the cap, release first the tensors whose
  // copies end first.
  std::set<std::pair<double, BufferId>> held;  // put off and not yet released, by copy end
  std::priority_queue<std::pair<int, BufferId>, std::vector<std::pair<int, BufferId>>,
                      std::greater<>>
      due;  // the same, by the instruction they are released before
  int64_t live = 0;
  auto release_now = [&](BufferId buffer) {
    held.erase({copied_s[static_cast<size_t>(buffer)], buffer});
    live -= program.buffer(buffer).bytes;
  };
  for (size_t i = 0; i < instructions.size(); ++i) {
    while (!due.empty() && due.top().first <= static_cast<int>(i)) {
      const auto [at, buffer] = due.top();
      due.pop();
      // Skipped if an earlier alloc released it already.
      if (release[static_cast<size_t>(buffer)] == at) release_now(buffer);
    }
    const Instruction& instruction = instructions[i];
    const auto buffer = static_cast<size_t>(instruction.buffer);
    if (instruction.kind == InstructionKind::kAlloc) {
      const int64_t bytes = program.buffer(instruction.buffer).bytes;
      while (live + bytes > cap_bytes && !held.empty()) {
        const BufferId first = held.begin()->second;
        release_now(first);
        release[static_cast<size_t>(first)] = static_cast<int>(i);
      }
      live += bytes;
    } else if (instruction.kind == InstructionKind::kFree) {
      if (release[buffer] < 0) {
        live -= program.buffer(instruction.buffer).bytes;
      } else {
        held.insert({copied_s[buffer], instruction.buffer});
        due.emplace(release[buffer], instruction.buffer);
      }
    }
  }
  if (std::all_of(release.begin(), release.end(), [](int at) { return at < 0; })) return {};
  return release;
}

PlanningContext::Outcome PlanningContext::Examine(program::Plan plan, double must_beat_s,
                                                  bool bounded,
                                                  std::optional<int64_t> fit_bytes) const {
  const int64_t fit = fit_bytes.value_or(tensor_budget_bytes());
  Outcome outcome;
  if (!options_.host_link) {
    for (const ir::Value& value : graph_.values()) {
      if (plan.decision(value.id) == program::Decision::kSpill) {
        outcome.status = absl::FailedPreconditionError(fmt::format(
            "the plan spills '{}', but the device has no host link (--no-link)", value.name));
        return outcome;
      }
    }
  }
  if (!pins_.ok()) {
    outcome.status = pins_.status();
    return outcome;
  }
  program::ApplyPins(*pins_, plan);
  const bool keep = bounded && options_.recall;
  if (keep) {
    outcome.key = plan.Changes();
    if (std::optional<Outcome> recalled = Recall(*outcome.key, must_beat_s)) {
      recalled->key = std::move(outcome.key);
      return *std::move(recalled);
    }
  }
  absl::StatusOr<program::Program> program = program::Rewrite(graph_, rewrite_, plan);
  if (!program.ok()) {
    outcome.status = program.status();
    return outcome;
  }
  program->workspace_bytes = workspace_bytes_;
  Examined found;
  if (bounded) {
    found.live_bytes_peak = program::LiveBytesPeak(*program);
    if (found.live_bytes_peak > tensor_budget_bytes()) {
      if (keep) outcome.found = found;
      return outcome;
    }
  }
  // The step before layout: no arena reuse waits yet, so no layout makes it
  // shorter.
  const sim::SimulationResult unplaced = simulator_.Timeline(*program);
  found.unplaced_step_s = unplaced.step_time_s;
  if (bounded && unplaced.step_time_s >= must_beat_s) {
    if (keep) outcome.found = found;
    return outcome;
  }
  const std::vector<int> releases = ReleasesAfterCopies(*program, unplaced, fit);
  // A bounded search rejects a candidate whose arena neither fits nor is the
  // smallest yet, so the layout may give up past both.
  const int64_t useless_above = bounded
                                    ? std::max(options_.budget_bytes, smallest_arena_bytes_.load())
                                    : std::numeric_limits<int64_t>::max();
  program::LayOutArena(*program, fit, releases, useless_above);
  Evaluation evaluation{std::move(plan), *std::move(program), {}, backward_order_};
  evaluation.simulation = simulator_.Timeline(evaluation.program);
  if (keep) {
    found.laid_out = true;
    found.arena_bytes = evaluation.arena_bytes();
    found.step_time_s = evaluation.step_time_s();
    outcome.found = found;
  }
  outcome.evaluation = std::move(evaluation);
  return outcome;
}

std::optional<PlanningContext::Outcome> PlanningContext::Recall(const PlanKey& key,
                                                                double must_beat_s) const {
  Examined seen;
  {
    std::lock_guard lock(examined_mutex_);
    const Examined* found = FindExamined(key);
    if (found == nullptr) return std::nullopt;
    seen = *found;
  }
  Outcome recalled;
  // The bounds as Examine applies them, in its order.
  if (seen.live_bytes_peak > tensor_budget_bytes()) return recalled;
  if (!seen.unplaced_step_s) return std::nullopt;
  if (*seen.unplaced_step_s >= must_beat_s) return recalled;
  if (!seen.laid_out) return std::nullopt;  // rejected before layout by a lower bar
  // Laid out again, the same arena and step (the layout's limit only falls
  // within a run, and an arena past it was useless then too).
  if (seen.arena_bytes <= options_.budget_bytes && seen.step_time_s < must_beat_s) {
    return std::nullopt;  // accepted now: the Evaluation is needed
  }
  recalled.laid_out_again = true;
  return recalled;
}

absl::StatusOr<std::optional<Evaluation>> PlanningContext::Record(Outcome outcome,
                                                                  double must_beat_s) {
  RETURN_IF_ERROR(outcome.status);
  RETURN_IF_ERROR(Count());
  if (outcome.key) {
    // Counted here, in the order of the search, so that the count does not
    // depend on which examinations the workers ran before their turn.
    std::lock_guard lock(examined_mutex_);
    if (FindExamined(*outcome.key) != nullptr) ++repeated_;
    if (outcome.found) examined_.insert_or_assign(*std::move(outcome.key), *outcome.found);
  }
  if (outcome.laid_out_again) {
    // Its arena was remembered when it was laid out in this run, and the
    // smallest arena only falls since: nothing to remember but the count.
    ++laid_out_;
    return std::nullopt;
  }
  if (!outcome.evaluation) return std::nullopt;
  Evaluation& evaluation = *outcome.evaluation;
  Remember(evaluation);
  if (Fits(evaluation) && evaluation.step_time_s() < must_beat_s) return std::move(evaluation);
  return std::nullopt;
}

void PlanningContext::Remember(const Evaluation& evaluation) {
  ++laid_out_;
  if (!smallest_ || evaluation.arena_bytes() < smallest_->arena_bytes()) {
    smallest_ = evaluation;
    smallest_arena_bytes_ = evaluation.arena_bytes();
  }
}

void PlanningContext::Absorb(const PlanningContext& other) {
  evaluations_ += other.evaluations_;
  if (other.progress_ != progress_) {  // a lane's already count in the progress
    std::lock_guard lock(progress_->mutex);
    progress_->considered += other.evaluations_;
  }
  laid_out_ += other.laid_out_;
  repeated_ += other.repeated_;
  if (other.smallest_ &&
      (!smallest_ || other.smallest_->arena_bytes() < smallest_->arena_bytes())) {
    smallest_ = other.smallest_;
    smallest_arena_bytes_ = smallest_->arena_bytes();
  }
}

PlanningContext::PlanningContext(const PlanningContext& parent, PlannerOptions options)
    : graph_(parent.graph_),
      cost_model_(parent.cost_model_),
      hardware_(parent.hardware_),
      options_(std::move(options)),
      threads_(options_.threads),
      workspace_bytes_(parent.workspace_bytes_),
      backward_order_(parent.backward_order_),
      rewrite_(parent.rewrite_),
      simulator_(parent.simulator_),
      saved_(parent.saved_),
      pins_(parent.pins_),
      ideal_start_s_(parent.ideal_start_s_),
      smallest_(parent.smallest_),
      smallest_arena_bytes_(parent.smallest_arena_bytes_.load()),
      run_start_(parent.run_start_) {
  std::lock_guard lock(parent.examined_mutex_);
  if (!parent.examined_.empty()) {
    auto frozen = parent.examined_before_ == nullptr
                      ? std::make_shared<ExaminedPlans>()
                      : std::make_shared<ExaminedPlans>(*parent.examined_before_);
    for (const auto& [key, found] : parent.examined_) frozen->insert_or_assign(key, found);
    parent.examined_before_ = std::move(frozen);
    parent.examined_.clear();
  }
  examined_before_ = parent.examined_before_;
}

const PlanningContext::Examined* PlanningContext::FindExamined(const PlanKey& key) const {
  if (const auto it = examined_.find(key); it != examined_.end()) return &it->second;
  if (examined_before_ != nullptr) {
    if (const auto it = examined_before_->find(key); it != examined_before_->end())
      return &it->second;
  }
  return nullptr;
}

std::unique_ptr<PlanningContext> PlanningContext::Lane(int threads) const {
  PlannerOptions options = options_;
  options.threads = threads;
  // The private constructor: make_unique cannot reach it.
  std::unique_ptr<PlanningContext> lane(new PlanningContext(*this, std::move(options)));
  lane->progress_ = progress_;
  return lane;
}

int PlanningContext::threads() const {
  if (const int threads = threads_.load(); threads > 0) return threads;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

absl::StatusOr<std::optional<std::pair<size_t, Evaluation>>> PlanningContext::FirstBetter(
    size_t count, const std::function<program::Plan(size_t)>& make, double must_beat_s) {
  const auto width = static_cast<size_t>(threads());
  if (width <= 1 || count <= 1) {
    for (size_t i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(std::optional<Evaluation> accepted, EvaluateIfBetter(make(i), must_beat_s));
      if (accepted) return std::make_pair(i, *std::move(accepted));
    }
    return std::nullopt;
  }
  // Workers take candidates in order, at most `window` ahead of the one being
  // recorded; this thread records them in order, as a search trying them one
  // by one would, up to the first accepted. Those examined after it were
  // speculative and leave no trace: not in the counts, not in the smallest
  // arena. Lists end early (a refinement's usually after two or three
  // candidates), so every candidate a worker runs ahead is likely thrown
  // away: one each, no more (four each planned slower on two threads than
  // one thread did; docs/planner.md, "Threads").
  const size_t window = width;
  std::vector<std::optional<Outcome>> outcomes(count);
  std::mutex mutex;
  std::condition_variable changed;
  size_t next = 0;       // the next candidate a worker takes
  size_t recording = 0;  // the candidate this thread waits for
  bool stop = false;     // an accepted candidate (or an error) was recorded
  auto work = [&] {
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return stop || next >= count || next < recording + window; });
      if (stop || next >= count) return;
      const size_t i = next++;
      lock.unlock();
      Outcome outcome = Examine(make(i), must_beat_s, options_.use_bounds);
      lock.lock();
      outcomes[i] = std::move(outcome);
      changed.notify_all();
    }
  };
  std::optional<std::pair<size_t, Evaluation>> result;
  absl::Status status;
  auto record = [&] {
    for (; recording < count;) {
      Outcome outcome;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return outcomes[recording].has_value(); });
        outcome = *std::move(outcomes[recording]);
        outcomes[recording].reset();
      }
      absl::StatusOr<std::optional<Evaluation>> accepted = Record(std::move(outcome), must_beat_s);
      const bool done = !accepted.ok() || accepted->has_value();
      if (!accepted.ok()) status = accepted.status();
      if (accepted.ok() && accepted->has_value()) result.emplace(recording, **std::move(accepted));
      std::lock_guard lock(mutex);
      if (done) {
        stop = true;
      } else {
        ++recording;
      }
      changed.notify_all();
      if (done) break;
    }
    std::lock_guard lock(mutex);
    stop = true;
    changed.notify_all();
  };
  // The pool's threads outlive this call, and with them their caches.
  if (pool_ == nullptr || pool_->size() != static_cast<int>(width)) {
    pool_ = std::make_unique<WorkerPool>(static_cast<int>(width));
  }
  pool_->Run(work, record);
  RETURN_IF_ERROR(status);
  return result;
}

absl::StatusOr<std::optional<Evaluation>> PlanningContext::EvaluateIfBetter(program::Plan plan,
                                                                            double must_beat_s) {
  return Record(Examine(std::move(plan), must_beat_s, options_.use_bounds), must_beat_s);
}

absl::StatusOr<std::optional<Evaluation>> PlanningContext::EvaluateIfFits(program::Plan plan) {
  return EvaluateIfBetter(std::move(plan), std::numeric_limits<double>::infinity());
}

bool Better(const Evaluation& a, const Evaluation& b, int64_t budget_bytes) {
  const bool a_fits = a.arena_bytes() <= budget_bytes;
  const bool b_fits = b.arena_bytes() <= budget_bytes;
  if (a_fits != b_fits) return a_fits;
  if (a_fits) return a.step_time_s() < b.step_time_s();
  return a.arena_bytes() < b.arena_bytes();
}

namespace {
template <typename P>
PolicyEntry Entry(std::string summary, bool exact = false) {
  auto make = []() -> std::unique_ptr<Policy> { return std::make_unique<P>(); };
  return PolicyEntry{std::string(P().name()), std::move(summary), make, exact,
                     P().needs_host_link()};
}
}  // namespace

const std::vector<PolicyEntry>& PolicyRegistry() {
  static const std::vector<PolicyEntry>* registry = new std::vector<PolicyEntry>{
      Entry<NonePolicy>("everything kept: the ideal step time and the arena the step needs"),
      Entry<SwapPolicy>("swap-only, by topological distance with a tuned lookahead"),
      Entry<RecomputePolicy>("recomputation only: sqrt(n), segment and chain-optimal checkpoints"),
      Entry<SwapLmsPolicy>("TFLMS v2's graph editor, tuned by its own memory simulator"),
      Entry<HybridSeedPolicy>("the paper's heuristic: recompute units of the tuned swap plan"),
      Entry<HybridSeedLmsPolicy>(
          "the paper's heuristic from TFLMS's own swap plan, as the paper ran it"),
      Entry<HybridPolicy>("Spillway's planner: per-tensor decisions, simulator in the loop"),
      Entry<OptimalPolicy>("the ruler: an integer program (CBC), its proven bound and its plan",
                           /*exact=*/true),
  };
  return *registry;
}

std::vector<std::string> PolicyNames(bool with_exact) {
  std::vector<std::string> names;
  for (const PolicyEntry& entry : PolicyRegistry()) {
    if (with_exact || !entry.exact) names.push_back(entry.name);
  }
  return names;
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name) {
  for (const PolicyEntry& entry : PolicyRegistry()) {
    if (entry.name == name) return entry.make();
  }
  return absl::NotFoundError(fmt::format("unknown policy '{}'; the policies are: {}", name,
                                         fmt::join(PolicyNames(/*with_exact=*/true), ", ")));
}

absl::Status ValidatePlannerOptions(const PlannerOptions& options) {
  RETURN_IF_ERROR(CheckInteger("the budget", options.budget_bytes, 0));
  RETURN_IF_ERROR(CheckNumber("the time limit", options.time_limit_s, kPositiveNumber));
  RETURN_IF_ERROR(CheckInteger("the evaluation cap", options.max_evaluations, 0));
  RETURN_IF_ERROR(CheckInteger("the refinement passes", options.max_refine_passes, 0));
  return CheckInteger("the planner threads", options.threads, 0, 1024);
}

absl::StatusOr<PlanResult> RunPolicy(Policy& policy, PlanningContext& context) {
  RETURN_IF_ERROR(ValidatePlannerOptions(context.options()));
  if (policy.needs_host_link() && !context.options().host_link) {
    return absl::FailedPreconditionError(
        fmt::format("{} spills to host memory, and the device has no host link (--no-link): use "
                    "recompute or optimal",
                    policy.name()));
  }
  const auto start = std::chrono::steady_clock::now();
  const int evaluations_before = context.evaluations();
  const int laid_out_before = context.laid_out();
  const int repeated_before = context.repeated();
  context.StartRun();
  ASSIGN_OR_RETURN(PlanResult result, policy.Run(context));
  SPILLWAY_CHECK(context.smallest().has_value(), "a policy evaluates at least one plan");
  result.smallest_arena_bytes = context.smallest()->arena_bytes();
  if (!context.Fits(result.best) && result.smallest_arena_bytes < result.best.arena_bytes()) {
    result.best = *context.smallest();
  }
  // Candidates were simulated for their timings only (Evaluation).
  result.best.simulation = context.simulator().Run(result.best.program);
  result.policy = std::string(policy.name());
  result.best.plan.set_policy(result.policy);
  result.planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.evaluations = context.evaluations() - evaluations_before;
  result.laid_out = context.laid_out() - laid_out_before;
  result.repeated = context.repeated() - repeated_before;
  result.feasible = context.Fits(result.best);
  result.backward_order = result.best.backward_order;
  // A policy's output always goes through the verifier: a plan the simulator
  // accepted is a plan that can run.
  RETURN_IF_ERROR(Annotate(program::VerifyProgram(result.best.program),
                           fmt::format("policy {}", result.policy)));
  return result;
}

absl::StatusOr<int64_t> ParseBudget(std::string_view text,
                                    const analysis::HardwareProfile& profile) {
  if (text.empty()) return profile.default_budget_bytes();
  if (text.back() == '%') {
    const std::string_view number = text.substr(0, text.size() - 1);
    double percent = 0;
    auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), percent);
    if (error != std::errc() || end != number.data() + number.size() || !(percent > 0) ||
        percent > 100) {
      return absl::InvalidArgumentError(fmt::format(
          "budget '{}': a percentage must be a number in (0, 100] followed by %", text));
    }
    return static_cast<int64_t>(
        std::floor(static_cast<double>(profile.device_memory_bytes) * percent / 100.0));
  }
  absl::StatusOr<int64_t> bytes = ParseBytes(text);
  if (!bytes.ok()) return Annotate(bytes.status(), "budget");
  if (*bytes <= 0)
    return absl::InvalidArgumentError(fmt::format("budget '{}' must be positive", text));
  return *bytes;
}

}  // namespace spillway::planner
