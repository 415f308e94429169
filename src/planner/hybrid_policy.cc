#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "planner/policies.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

using program::Decision;

struct Candidate {
  ir::ValueId value = 0;
  int64_t bytes = 0;
  int produced = 0;        // step of the producer
  int first_backward = 0;  // first step that reads it back
  int last_read = 0;
  bool can_recompute = false;
  double d2h_s = 0;
  double h2d_s = 0;
  double window_s = 0;                     // ideal time between production and the first read back
  double recompute_s = 0;                  // producer and the lost intermediates it needs
  std::vector<ir::ValueId> rebuild_reads;  // saved tensors a rebuild reads

  // The part of its own two copies that its window cannot hide.
  double UnhiddenTransferSeconds() const { return std::max(0.0, d2h_s + h2d_s - window_s); }
};

// A starting plan of the portfolio and the policy it came from.
struct Start {
  std::string name;
  Evaluation evaluation;
};

class HybridPlanner {
 public:
  HybridPlanner(PlanningContext& context, const HybridPolicy::Options& options)
      : context_(context),
        options_(options),
        start_(std::chrono::steady_clock::now()),
        evaluations_at_start_(context.evaluations()) {}

  // The portfolio: the plans of the heuristic policies (each as its own
  // policy makes it, with its default options) and hybrid's own eviction
  // plan. Each of them that fits is refined from the nearest per-tensor
  // decisions, and the result is the best plan seen, so it is never worse
  // than any of the heuristics.
  absl::StatusOr<PlanResult> Run() {
    Collect();
    PlanResult result;
    std::vector<Decision> decisions(candidates_.size(), Decision::kKeep);
    ASSIGN_OR_RETURN(Evaluation keep_all, Evaluate(decisions));
    if (context_.Fits(keep_all)) {  // the ideal step: nothing to improve
      result.best = std::move(keep_all);
      result.start = "keep";
      return result;
    }
    std::vector<Start> starts;
    ASSIGN_OR_RETURN(Evaluation evicted, EvictUntilFits(decisions, std::move(keep_all)));
    starts.push_back({"evict", std::move(evicted)});
    SwapPolicy swap;
    ASSIGN_OR_RETURN(PlanResult swapped, swap.Run(context_));
    starts.push_back({"swap", swapped.best});
    ASSIGN_OR_RETURN(PlanResult seeded,
                     HybridSeedPolicy::RecomputeUnits(context_, std::move(swapped)));
    starts.push_back({"hybrid-seed", std::move(seeded.best)});
    RecomputePolicy recompute;
    ASSIGN_OR_RETURN(PlanResult recomputed, recompute.Run(context_));
    starts.push_back({"recompute", std::move(recomputed.best)});

    // Best first (stable: on a tie the earlier, evict first). Every start
    // that fits is refined (Refine says until when): which start refines
    // best differs between workloads (a tight budget on a slow link favours
    // recomputation's plan, a roomy one eviction's).
    std::stable_sort(starts.begin(), starts.end(), [&](const Start& a, const Start& b) {
      return Better(a.evaluation, b.evaluation, context_.budget_bytes());
    });
    result.best = starts.front().evaluation;
    result.start = starts.front().name;
    for (const Start& start : starts) {
      if (!context_.Fits(start.evaluation) || hit_time_limit_) break;
      ASSIGN_OR_RETURN(std::optional<Evaluation> loaded, Load(start.evaluation.plan, decisions));
      if (!loaded) continue;  // per-tensor decisions do not express it in the budget
      evaluations_at_start_ = context_.evaluations();
      ASSIGN_OR_RETURN(Evaluation refined, Refine(decisions, *std::move(loaded)));
      if (Better(refined, result.best, context_.budget_bytes())) {
        result.best = std::move(refined);
        result.start = start.name;
      }
    }
    result.hit_time_limit = hit_time_limit_;
    return result;
  }

  // Sets the decisions (and fetch steps) to a plan's, as far as per-tensor
  // decisions express it, and evaluates them; nullopt if that does not fit.
  absl::StatusOr<std::optional<Evaluation>> Load(const program::Plan& plan,
                                                 std::vector<Decision>& decisions) {
    for (size_t i = 0; i < candidates_.size(); ++i) Apply(i, Decision::kKeep, decisions);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      Apply(i, plan.at(candidates_[i].value).decision, decisions);
    }
    // Just in time, then this many steps earlier: the plan's own fetch step.
    const std::vector<int> needed = NeededSteps(decisions);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const program::TensorPlan& tensor = plan.at(candidates_[i].value);
      const int fetch = tensor.fetch_step < 0 ? needed[i] : tensor.fetch_step;
      fetch_advance_[i] = decisions[i] == Decision::kSpill ? std::max(0, needed[i] - fetch) : 0;
    }
    lead_cap_s_ = -1;
    ASSIGN_OR_RETURN(Evaluation loaded, Evaluate(decisions));
    if (!context_.Fits(loaded)) return std::nullopt;
    return loaded;
  }

 private:
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  // The refinement's stopping rule besides convergence: the evaluation cap
  // (part of the algorithm, the same on every machine) and the wall-clock
  // safety net (which is not, and is recorded when it fires).
  bool OutOfTime() {
    const int limit = context_.options().max_evaluations;
    if (limit > 0 && context_.evaluations() - evaluations_at_start_ >= limit) return true;
    if (Elapsed() > context_.options().time_limit_s) hit_time_limit_ = true;
    return hit_time_limit_;
  }

  void Collect() {
    const ir::Graph& graph = context_.graph();
    std::vector<bool> saved(static_cast<size_t>(graph.num_values()), false);
    for (const autodiff::SavedTensor& tensor : context_.saved())
      saved[static_cast<size_t>(tensor.value)] = true;
    std::vector<double> rebuild(static_cast<size_t>(graph.num_values()), -1.0);
    // Time to rebuild a value: its producer, plus the intermediates it reads
    // that nothing keeps (saved tensors are assumed resident or fetched).
    auto rebuild_seconds = [&](auto&& self, ir::ValueId value) -> double {
      double& memo = rebuild[static_cast<size_t>(value)];
      if (memo >= 0) return memo;
      const ir::Node& node = graph.node(graph.value(value).producer);
      double seconds = context_.simulator().node_seconds(node.id);
      for (ir::ValueId input : node.inputs) {
        const ir::Value& in = graph.value(input);
        if (in.producer == ir::kNoNode || saved[static_cast<size_t>(input)]) continue;
        if (!program::CanRecompute(graph, input)) continue;
        seconds += self(self, input);
      }
      return memo = seconds;
    };
    // The saved tensors a rebuild reads: through the intermediates it rebuilds
    // too, and a batch norm's saved statistics.
    auto rebuild_reads = [&](auto&& self, ir::ValueId value,
                             std::vector<ir::ValueId>& reads) -> void {
      const ir::Node& node = graph.node(graph.value(value).producer);
      std::vector<ir::ValueId> inputs = node.inputs;
      if (node.op == ir::OpKind::kBatchNorm && node.outputs.size() > 2) {
        inputs.push_back(node.outputs[1]);
        inputs.push_back(node.outputs[2]);
      }
      for (ir::ValueId input : inputs) {
        const ir::Value& in = graph.value(input);
        if (in.producer == ir::kNoNode) continue;
        if (saved[static_cast<size_t>(input)]) {
          reads.push_back(input);
        } else if (program::CanRecompute(graph, input)) {
          self(self, input, reads);
        }
      }
    };
    for (const autodiff::SavedTensor& tensor : context_.saved()) {
      if (!program::CanSpill(graph, tensor.value)) continue;
      const int read = context_.first_backward_read(tensor.value);
      if (read == program::ScheduleReads::kNever) continue;
      Candidate candidate;
      candidate.value = tensor.value;
      candidate.bytes = tensor.bytes;
      candidate.produced = context_.step_of(tensor.producer);
      candidate.first_backward = read;
      candidate.last_read = read;
      for (ir::NodeId reader : tensor.backward_readers) {
        candidate.last_read = std::max(candidate.last_read, context_.step_of(reader));
      }
      candidate.can_recompute = program::CanRecompute(graph, tensor.value);
      candidate.d2h_s =
          context_.simulator().copy_seconds(tensor.bytes, analysis::CopyDirection::kDeviceToHost);
      candidate.h2d_s =
          context_.simulator().copy_seconds(tensor.bytes, analysis::CopyDirection::kHostToDevice);
      candidate.window_s =
          context_.ideal_start_s(read) - context_.ideal_start_s(candidate.produced + 1);
      candidate.recompute_s = candidate.can_recompute
                                  ? rebuild_seconds(rebuild_seconds, tensor.value)
                                  : std::numeric_limits<double>::infinity();
      if (candidate.can_recompute)
        rebuild_reads(rebuild_reads, tensor.value, candidate.rebuild_reads);
      candidates_.push_back(candidate);
    }
    fetch_advance_.assign(candidates_.size(), 0);
    recomputed_readers_.assign(candidates_.size(), 0);
    tried_rebuild_.assign(candidates_.size(), false);
    tried_keep_.assign(candidates_.size(), false);
    tried_spill_.assign(candidates_.size(), false);
    tried_advance_.assign(candidates_.size(), 0);
    index_of_value_.assign(static_cast<size_t>(graph.num_values()), -1);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      index_of_value_[static_cast<size_t>(candidates_[i].value)] = static_cast<int>(i);
    }
    forward_s_ = context_.ideal_start_s(FirstBackwardStep());
    backward_s_ = context_.ideal_step_time_s() - forward_s_;
  }

  int FirstBackwardStep() const {
    const ir::Graph& graph = context_.graph();
    for (size_t step = 0; step < context_.schedule().size(); ++step) {
      if (graph.node(context_.schedule()[step]).phase != ir::Phase::kForward)
        return static_cast<int>(step);
    }
    return static_cast<int>(context_.schedule().size());
  }

  // What spilling a candidate would cost in step time, given the copy time the
  // spills chosen so far already take on each link: the part of its own
  // transfer that its window cannot hide, plus whatever overflows the
  // forward pass (for d2h) or the backward pass (for h2d).
  double SpillCost(const Candidate& c) const {
    const double own = c.UnhiddenTransferSeconds();
    const double d2h_over = std::clamp(d2h_load_ + c.d2h_s - forward_s_, 0.0, c.d2h_s);
    const double h2d_over = std::clamp(h2d_load_ + c.h2d_s - backward_s_, 0.0, c.h2d_s);
    return std::max(own, d2h_over + h2d_over);
  }

  // A tensor is rebuilt only from tensors that are kept or fetched, never
  // from other rebuilt ones: chains of recomputation would hold a whole
  // segment at once and save nothing (the recompute policy's trade-off).
  bool RecomputeAllowed(size_t index, const std::vector<Decision>& decisions) const {
    const Candidate& c = candidates_[index];
    if (!c.can_recompute || recomputed_readers_[index] > 0) return false;
    for (ir::ValueId read : c.rebuild_reads) {
      const int j = index_of_value_[static_cast<size_t>(read)];
      if (j >= 0 && decisions[static_cast<size_t>(j)] == Decision::kRecompute) return false;
    }
    return true;
  }

  Decision Cheaper(size_t index, const std::vector<Decision>& decisions, double* cost) const {
    const Candidate& c = candidates_[index];
    const double spill = SpillCost(c);
    if (RecomputeAllowed(index, decisions) && c.recompute_s < spill) {
      *cost = c.recompute_s;
      return Decision::kRecompute;
    }
    *cost = spill;
    return Decision::kSpill;
  }

  void Apply(size_t index, Decision decision, std::vector<Decision>& decisions) {
    const Decision before = decisions[index];
    if (before == Decision::kSpill) {
      d2h_load_ -= candidates_[index].d2h_s;
      h2d_load_ -= candidates_[index].h2d_s;
    }
    if (decision == Decision::kSpill) {
      d2h_load_ += candidates_[index].d2h_s;
      h2d_load_ += candidates_[index].h2d_s;
    }
    if ((before == Decision::kRecompute) != (decision == Decision::kRecompute)) {
      const int delta = decision == Decision::kRecompute ? 1 : -1;
      for (ir::ValueId read : candidates_[index].rebuild_reads) {
        const int j = index_of_value_[static_cast<size_t>(read)];
        if (j >= 0) recomputed_readers_[static_cast<size_t>(j)] += delta;
      }
    }
    decisions[index] = decision;
  }

  // The step by which each candidate must be back on the device: its first
  // backward reader, or earlier the rebuild of a recomputed tensor that reads it.
  std::vector<int> NeededSteps(const std::vector<Decision>& decisions) const {
    std::vector<int> needed(candidates_.size());
    for (size_t i = 0; i < candidates_.size(); ++i) needed[i] = candidates_[i].first_backward;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] != Decision::kRecompute) continue;
      for (ir::ValueId read : candidates_[i].rebuild_reads) {
        const int j = index_of_value_[static_cast<size_t>(read)];
        if (j < 0) continue;
        int& need = needed[static_cast<size_t>(j)];
        need = std::min(need, candidates_[i].first_backward);
      }
    }
    return needed;
  }

  // The plan for a set of decisions, with every fetch issued as late as the
  // h2d queue allows on the ideal timeline: walking back from the last
  // deadline, each copy ends by its reader's start and before the next copy
  // in the queue begins. A copy starts at most `lead_cap_s_` earlier than its
  // own deadline needs: a saturated queue would otherwise pull fetches far
  // ahead and hold their bytes (the cap is searched once the plan fits).
  program::Plan MakePlan(const std::vector<Decision>& decisions,
                         const std::vector<int>& fetch_advance) const {
    program::Plan plan = context_.KeepAll("hybrid");
    const std::vector<int> needed = NeededSteps(decisions);
    std::vector<size_t> spilled;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kRecompute) plan.Recompute(candidates_[i].value);
      if (decisions[i] == Decision::kSpill) spilled.push_back(i);
    }
    std::sort(spilled.begin(), spilled.end(),
              [&](size_t a, size_t b) { return needed[a] > needed[b]; });
    double next_start = std::numeric_limits<double>::infinity();
    for (size_t i : spilled) {
      const Candidate& c = candidates_[i];
      const double deadline = context_.ideal_start_s(needed[i]);
      const double finish = std::min(deadline, next_start);
      const double start = std::max(finish - c.h2d_s, deadline - c.h2d_s - lead_cap_s_);
      next_start = start;
      int step = needed[i];
      // A negative cap: just in time, before the step that needs it.
      while (lead_cap_s_ >= 0 && step > c.produced + 1 && context_.ideal_start_s(step) > start) {
        --step;
      }
      step = std::max(c.produced + 1, step - fetch_advance[i]);
      plan.Spill(c.value, step);
    }
    return plan;
  }

  absl::StatusOr<Evaluation> Evaluate(const std::vector<Decision>& decisions) {
    ASSIGN_OR_RETURN(Evaluation evaluation, context_.Evaluate(MakePlan(decisions, fetch_advance_)));
    return evaluation;
  }

  // The step at which the most device bytes are allocated, in program order.
  static int PeakStep(const program::Program& program) {
    int64_t live = 0;
    int64_t peak = -1;
    int step = 0;
    for (const program::Instruction& instruction : program.instructions) {
      if (instruction.kind == program::InstructionKind::kAlloc) {
        live += program.buffer(instruction.buffer).bytes;
        if (live > peak) {
          peak = live;
          step = instruction.step;
        }
      } else if (instruction.kind == program::InstructionKind::kFree) {
        live -= program.buffer(instruction.buffer).bytes;
      }
    }
    return step;
  }

  // Evicts, round after round, the tensors resident at the memory peak with
  // the most bytes per second of cost, until the arena fits or nothing is left.
  absl::StatusOr<Evaluation> EvictUntilFits(std::vector<Decision>& decisions, Evaluation current) {
    while (!context_.Fits(current)) {
      const int peak = PeakStep(current.program);
      const int64_t excess = current.arena_bytes() - context_.budget_bytes();
      std::vector<size_t> order;
      for (size_t i = 0; i < candidates_.size(); ++i) {
        if (decisions[i] != Decision::kKeep) continue;
        const Candidate& c = candidates_[i];
        if (c.produced <= peak && peak <= c.last_read) order.push_back(i);
      }
      if (order.empty()) {
        for (size_t i = 0; i < candidates_.size(); ++i) {
          if (decisions[i] == Decision::kKeep) order.push_back(i);
        }
      }
      if (order.empty()) {
        // Everything is off the device and it still does not fit: rebuilds
        // hold their inputs and temporaries, so trade the largest for spills.
        ASSIGN_OR_RETURN(current, SpillRecomputed(decisions, std::move(current)));
        break;
      }
      std::vector<double> score(candidates_.size(), 0);
      for (size_t i : order) {
        double cost = 0;
        Cheaper(i, decisions, &cost);
        score[i] = static_cast<double>(candidates_[i].bytes) / (cost + 1e-7);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return score[a] > score[b]; });
      int64_t freed = 0;
      for (size_t i : order) {
        if (freed >= excess) break;
        double cost = 0;
        Apply(i, Cheaper(i, decisions, &cost), decisions);
        freed += candidates_[i].bytes;
      }
      ASSIGN_OR_RETURN(current, Evaluate(decisions));
    }
    return current;
  }

  absl::StatusOr<Evaluation> SpillRecomputed(std::vector<Decision>& decisions, Evaluation current) {
    std::vector<size_t> recomputed;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kRecompute) recomputed.push_back(i);
    }
    std::stable_sort(recomputed.begin(), recomputed.end(), [&](size_t a, size_t b) {
      return candidates_[a].bytes > candidates_[b].bytes;
    });
    size_t next = 0;
    while (!context_.Fits(current) && next < recomputed.size()) {
      // Halve what is left each round: few evaluations, and no more spills
      // than needed once it fits.
      const size_t batch = std::max<size_t>(1, (recomputed.size() - next + 1) / 2);
      for (size_t k = 0; k < batch && next < recomputed.size(); ++k) {
        Apply(recomputed[next++], Decision::kSpill, decisions);
      }
      ASSIGN_OR_RETURN(current, Evaluate(decisions));
    }
    return current;
  }

  // The compute stream's stalls, largest first, each with the candidate whose
  // fetch it waited for.
  std::vector<std::pair<double, size_t>> FetchStalls(const Evaluation& evaluation) const {
    const program::Program& program = evaluation.program;
    std::vector<int> fetch_of_event(static_cast<size_t>(program.num_events), -1);
    for (const program::Instruction& instruction : program.instructions) {
      if (instruction.kind == program::InstructionKind::kCopyToDevice && instruction.record >= 0) {
        fetch_of_event[static_cast<size_t>(instruction.record)] =
            program.buffer(instruction.writes[0]).value;
      }
    }
    std::vector<int> candidate_of_value(static_cast<size_t>(context_.graph().num_values()), -1);
    for (size_t i = 0; i < candidates_.size(); ++i)
      candidate_of_value[static_cast<size_t>(candidates_[i].value)] = static_cast<int>(i);
    std::vector<std::pair<double, size_t>> stalls;
    double compute_ready = 0;
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const program::Instruction& instruction = program.instructions[i];
      if (instruction.stream != program::Stream::kCompute ||
          instruction.kind == program::InstructionKind::kFree)
        continue;
      const sim::InstructionTiming& timing = evaluation.simulation.timings[i];
      const double stall = timing.start_s - compute_ready;
      compute_ready = timing.end_s;
      if (stall <= 0) continue;
      for (program::EventId event : instruction.waits) {
        const int value = fetch_of_event[static_cast<size_t>(event)];
        if (value < 0) continue;
        const int candidate = candidate_of_value[static_cast<size_t>(value)];
        if (candidate >= 0) stalls.emplace_back(stall, static_cast<size_t>(candidate));
      }
    }
    std::stable_sort(stalls.begin(), stalls.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    return stalls;
  }

  // The largest fetch lead that still fits, by bisection on a log scale from
  // no lead to the whole backward pass; kept only if it is faster.
  absl::StatusOr<Evaluation> SearchLeadCap(const std::vector<Decision>& decisions,
                                           Evaluation current) {
    const double no_lead = lead_cap_s_;
    lead_cap_s_ = backward_s_;
    ASSIGN_OR_RETURN(Evaluation full, Evaluate(decisions));
    if (context_.Fits(full)) {
      if (full.step_time_s() < current.step_time_s()) return full;
      lead_cap_s_ = no_lead;
      return current;
    }
    double fits = 0;
    double fails = backward_s_;
    Evaluation best = std::move(current);
    double best_cap = no_lead;
    for (int i = 0; i < options_.lead_cap_bisections && fails > 1e-6; ++i) {
      const double middle =
          fits > 0 ? std::sqrt(fits * fails) : fails * options_.lead_cap_first_fraction;
      lead_cap_s_ = middle;
      ASSIGN_OR_RETURN(Evaluation trial, Evaluate(decisions));
      if (context_.Fits(trial)) {
        fits = middle;
        if (trial.step_time_s() < best.step_time_s()) {
          best = std::move(trial);
          best_cap = middle;
        }
      } else {
        fails = middle;
      }
    }
    lead_cap_s_ = best_cap;
    return best;
  }

  // Passes of the moves below, each move tried at most once per tensor in a
  // pass, until a pass improves nothing or the pass limit is reached.
  absl::StatusOr<Evaluation> Refine(std::vector<Decision>& decisions, Evaluation current) {
    ASSIGN_OR_RETURN(current, SearchLeadCap(decisions, std::move(current)));
    const int passes = context_.options().max_refine_passes;
    for (int pass = 0; passes <= 0 || pass < passes; ++pass) {
      const double before = current.step_time_s();
      std::fill(tried_rebuild_.begin(), tried_rebuild_.end(), false);
      std::fill(tried_keep_.begin(), tried_keep_.end(), false);
      std::fill(tried_spill_.begin(), tried_spill_.end(), false);
      std::fill(tried_advance_.begin(), tried_advance_.end(), 0);
      ASSIGN_OR_RETURN(current, RefinePass(decisions, std::move(current)));
      if (!(current.step_time_s() < before) || OutOfTime()) break;
    }
    return current;
  }

  // One refinement move: a candidate's new decision (and fetch advance), and
  // the flag that records it was tried.
  enum class Tried { kRebuild, kAdvance, kSpill, kKeep };
  struct Move {
    size_t index = 0;
    Decision decision = Decision::kKeep;
    int advance = 0;
    Tried tried = Tried::kRebuild;
  };

  void MarkTried(const Move& move) {
    switch (move.tried) {
      case Tried::kRebuild:
        tried_rebuild_[move.index] = true;
        break;
      case Tried::kAdvance:
        tried_advance_[move.index] = std::max(tried_advance_[move.index], move.advance);
        break;
      case Tried::kSpill:
        tried_spill_[move.index] = true;
        break;
      case Tried::kKeep:
        tried_keep_[move.index] = true;
        break;
    }
  }

  // Tries the moves in order and keeps the first that leaves a plan that
  // fits and is faster by the minimum gain. The moves are evaluated several
  // at a time (PlanningContext::FirstBetter) with the result of trying them
  // one by one: the moves up to the kept one are marked tried, the rest are
  // not. The evaluation cap counts the same way.
  absl::StatusOr<bool> TryMoves(std::vector<Decision>& decisions, Evaluation& current,
                                std::vector<Move> moves) {
    const int limit = context_.options().max_evaluations;
    if (limit > 0) {
      const int left = std::max(0, limit - (context_.evaluations() - evaluations_at_start_));
      if (moves.size() > static_cast<size_t>(left)) moves.resize(static_cast<size_t>(left));
    }
    auto plan_for = [&](size_t i) {
      const Move& move = moves[i];
      std::vector<Decision> trial = decisions;
      std::vector<int> advance = fetch_advance_;
      trial[move.index] = move.decision;
      advance[move.index] = move.advance;
      return MakePlan(trial, advance);
    };
    ASSIGN_OR_RETURN(auto accepted,
                     context_.FirstBetter(moves.size(), plan_for,
                                          current.step_time_s() * (1 - options_.min_gain)));
    const size_t tried = accepted ? accepted->first + 1 : moves.size();
    for (size_t i = 0; i < tried; ++i) MarkTried(moves[i]);
    if (!accepted) return false;
    const Move& move = moves[accepted->first];
    Apply(move.index, move.decision, decisions);
    fetch_advance_[move.index] = move.advance;
    current = std::move(accepted->second);
    return true;
  }

  // The moves of one kind, in the order they are tried; each is tried at
  // most once per tensor in a pass.
  std::vector<Move> StallMoves(const Evaluation& current, const std::vector<Decision>& decisions) {
    // A fetch that stalls the compute stream: rebuild the tensor instead if
    // that is cheaper than the wait, else fetch it earlier (doubling its
    // lead). A tensor behind several stalls is listed once.
    std::vector<Move> moves;
    std::vector<bool> listed(candidates_.size(), false);
    for (const auto& [stall, index] : FetchStalls(current)) {
      if (decisions[index] != Decision::kSpill || listed[index]) continue;
      listed[index] = true;
      if (candidates_[index].can_recompute && candidates_[index].recompute_s < stall &&
          !tried_rebuild_[index] && RecomputeAllowed(index, decisions)) {
        moves.push_back({index, Decision::kRecompute, 0, Tried::kRebuild});
      }
      const int advance = 2 * fetch_advance_[index] + 2;
      if (tried_advance_[index] < advance) {
        moves.push_back({index, Decision::kSpill, advance, Tried::kAdvance});
      }
    }
    return moves;
  }

  std::vector<Move> RebuildMoves(const std::vector<Decision>& decisions) {
    // Trade transfers for rebuilds, most bytes per rebuild-second first: the
    // link is shared, so a spill that hides its own copies can still delay
    // the fetches behind it.
    std::vector<size_t> spilled;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kSpill && !tried_rebuild_[i] && RecomputeAllowed(i, decisions))
        spilled.push_back(i);
    }
    std::stable_sort(spilled.begin(), spilled.end(), [&](size_t a, size_t b) {
      return static_cast<double>(candidates_[a].bytes) / candidates_[a].recompute_s >
             static_cast<double>(candidates_[b].bytes) / candidates_[b].recompute_s;
    });
    std::vector<Move> moves;
    for (size_t i : spilled) moves.push_back({i, Decision::kRecompute, 0, Tried::kRebuild});
    return moves;
  }

  std::vector<Move> SpillMoves(const std::vector<Decision>& decisions) {
    // And the other way: a rebuild whose transfer the link can hide now,
    // fetched early enough to hide the copy on the ideal timeline.
    std::vector<size_t> rebuilt;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kRecompute && !tried_spill_[i]) rebuilt.push_back(i);
    }
    std::stable_sort(rebuilt.begin(), rebuilt.end(), [&](size_t a, size_t b) {
      return candidates_[a].recompute_s > candidates_[b].recompute_s;
    });
    std::vector<Move> moves;
    for (size_t i : rebuilt) {
      const Candidate& c = candidates_[i];
      int lead = 0;
      while (c.first_backward - lead > c.produced + 1 &&
             context_.ideal_start_s(c.first_backward) -
                     context_.ideal_start_s(c.first_backward - lead) <
                 c.h2d_s) {
        ++lead;
      }
      moves.push_back({i, Decision::kSpill, lead, Tried::kSpill});
    }
    return moves;
  }

  std::vector<Move> KeepMoves(const std::vector<Decision>& decisions) {
    // Bring back what costs most, if there is room for it now.
    std::vector<size_t> evicted;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] != Decision::kKeep && !tried_keep_[i]) evicted.push_back(i);
    }
    std::stable_sort(evicted.begin(), evicted.end(),
                     [&](size_t a, size_t b) { return Cost(a, decisions) > Cost(b, decisions); });
    std::vector<Move> moves;
    for (size_t i : evicted) moves.push_back({i, Decision::kKeep, 0, Tried::kKeep});
    return moves;
  }

  // Tries the kinds of move in turn; after a kept move it starts again from
  // the stalls, which that move has shifted. Ends when no move of any kind
  // improves the plan.
  absl::StatusOr<Evaluation> RefinePass(std::vector<Decision>& decisions, Evaluation current) {
    bool improved = true;
    while (improved && !OutOfTime()) {
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, StallMoves(current, decisions)));
      if (improved || OutOfTime()) continue;
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, RebuildMoves(decisions)));
      if (improved || OutOfTime()) continue;
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, SpillMoves(decisions)));
      if (improved || OutOfTime()) continue;
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, KeepMoves(decisions)));
    }
    return current;
  }

  double Cost(size_t index, const std::vector<Decision>& decisions) const {
    const Candidate& c = candidates_[index];
    return decisions[index] == Decision::kRecompute ? c.recompute_s : c.UnhiddenTransferSeconds();
  }

  PlanningContext& context_;
  const HybridPolicy::Options options_;
  std::chrono::steady_clock::time_point start_;
  int evaluations_at_start_ = 0;
  std::vector<Candidate> candidates_;
  std::vector<int> index_of_value_;      // candidate index of each value, -1 if none
  std::vector<int> recomputed_readers_;  // per candidate: recomputed tensors that read it
  std::vector<bool> tried_rebuild_;      // per candidate: refinement tried rebuilding it
  std::vector<bool> tried_keep_;         // per candidate: refinement tried keeping it
  std::vector<bool> tried_spill_;        // per candidate: refinement tried spilling it
  std::vector<int> tried_advance_;       // per candidate: the largest fetch advance tried
  std::vector<int> fetch_advance_;       // extra steps of lead for a fetch that stalled
  double forward_s_ = 0;
  double backward_s_ = 0;
  double d2h_load_ = 0;
  double h2d_load_ = 0;
  double lead_cap_s_ = -1;  // < 0: every fetch just in time
  bool hit_time_limit_ = false;
};

}  // namespace

absl::StatusOr<PlanResult> HybridPolicy::Run(PlanningContext& context) {
  return HybridPlanner(context, options_).Run();
}

}  // namespace spillway::planner
