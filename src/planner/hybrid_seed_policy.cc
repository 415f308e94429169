#include <algorithm>

#include "ir/op_registry.h"
#include "planner/policies.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

// A re-computation unit: a checkpoint op (convolution or matrix product) and
// the cheap forward ops after it, up to the next checkpoint op.
struct RecomputationUnit {
  ir::NodeId checkpoint = ir::kNoNode;
  std::vector<ir::ValueId> members;  // first outputs of the non-checkpoint ops
  int64_t swappable_bytes = 0;       // of those, what the swap plan spills
};

bool IsCheckpointOp(const ir::Node& node) {
  const ir::OpClass op_class = ir::GetOpDef(node.op).op_class;
  return op_class == ir::OpClass::kConvolution || op_class == ir::OpClass::kMatMul;
}

std::vector<RecomputationUnit> Units(const PlanningContext& context, const program::Plan& swap) {
  const ir::Graph& graph = context.graph();
  std::vector<RecomputationUnit> units;
  for (ir::NodeId id : context.schedule()) {
    const ir::Node& node = graph.node(id);
    if (node.phase != ir::Phase::kForward) continue;
    if (IsCheckpointOp(node)) {
      units.push_back({id, {}, 0});
      continue;
    }
    // Ops before the first checkpoint have nothing to be recomputed from.
    if (units.empty() || node.outputs.empty()) continue;
    const ir::ValueId output = node.outputs.front();
    if (swap.decision(output) != program::Decision::kSpill) continue;
    if (!program::CanRecompute(graph, output)) continue;
    units.back().members.push_back(output);
    units.back().swappable_bytes += graph.value(output).type.bytes();
  }
  std::erase_if(units, [](const RecomputationUnit& unit) { return unit.members.empty(); });
  // Most swapped bytes first; the schedule order breaks ties.
  std::stable_sort(units.begin(), units.end(),
                   [](const RecomputationUnit& a, const RecomputationUnit& b) {
                     return a.swappable_bytes > b.swappable_bytes;
                   });
  return units;
}

// The swap plan `best` with a unit's members recomputed.
program::Plan Trial(const PlanningContext& context, const program::Plan& best,
                    const RecomputationUnit& unit) {
  program::Plan trial = best;
  // As in TFLMS, a swapped-in tensor is fetched relative to its first
  // consumer; once the members are recomputed, that is their rebuild, which
  // reads the checkpoint: its fetch moves up to the members' earliest.
  const ir::ValueId checkpoint = context.graph().node(unit.checkpoint).outputs.front();
  int fetch = trial.at(checkpoint).fetch_step;
  for (ir::ValueId member : unit.members) {
    const int member_fetch = trial.at(member).fetch_step;
    if (member_fetch >= 0 && (fetch < 0 || member_fetch < fetch)) fetch = member_fetch;
    trial.Recompute(member);
  }
  if (trial.decision(checkpoint) == program::Decision::kSpill) trial.Spill(checkpoint, fetch);
  return trial;
}

}  // namespace

absl::StatusOr<PlanResult> HybridSeedPolicy::Run(PlanningContext& context) {
  SwapPolicy swap;
  ASSIGN_OR_RETURN(PlanResult swapped, swap.Run(context));
  return RecomputeUnits(context, std::move(swapped));
}

absl::StatusOr<PlanResult> HybridSeedPolicy::RecomputeUnits(PlanningContext& context,
                                                            PlanResult result) {
  if (!context.Fits(result.best)) return result;  // the paper starts from a swap plan that fits
  const std::vector<RecomputationUnit> units = Units(context, result.best.plan);
  // A trial per unit, in order, each a whole step, kept when it fits and
  // makes the step faster. FirstBetter runs the trials after the next one
  // on the other planning threads, in case it is not kept (most are not),
  // with the result of trying them one by one. The safety net, which on
  // very deep graphs is what stops this, is checked every few trials.
  constexpr size_t kTrialsBetweenChecks = 16;
  size_t next = 0;
  while (next < units.size()) {
    if (context.PastTimeLimit()) {
      result.hit_time_limit = true;
      break;
    }
    const size_t count = std::min(units.size() - next, kTrialsBetweenChecks);
    const program::Plan& best = result.best.plan;
    auto trial = [&](size_t i) { return Trial(context, best, units[next + i]); };
    ASSIGN_OR_RETURN(auto kept, context.FirstBetter(count, trial, result.best.step_time_s()));
    if (!kept) {
      next += count;
      continue;
    }
    next += kept->first + 1;
    result.best = std::move(kept->second);
  }
  return result;
}

}  // namespace spillway::planner
