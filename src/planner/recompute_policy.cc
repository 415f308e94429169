#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "ir/op_registry.h"
#include "planner/chain_checkpointing.h"
#include "planner/policies.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

std::vector<const autodiff::SavedTensor*> Recomputable(const PlanningContext& context) {
  std::vector<const autodiff::SavedTensor*> tensors;
  for (const autodiff::SavedTensor& saved : context.saved()) {
    if (program::CanRecompute(context.graph(), saved.value)) tensors.push_back(&saved);
  }
  return tensors;
}

// Chen et al.'s greedy over the recomputable tensors in forward order: a
// tensor that may be a checkpoint and would take the running segment past
// the limit becomes one and starts the next segment; the others are rebuilt.
template <typename MayCheckpoint>
program::Plan GreedySegments(const PlanningContext& context, int64_t segment_bytes,
                             MayCheckpoint may_checkpoint) {
  program::Plan plan = context.KeepAll("recompute");
  int64_t running = 0;
  for (const autodiff::SavedTensor* tensor : Recomputable(context)) {
    if (may_checkpoint(*tensor) && running + tensor->bytes > segment_bytes) {
      running = 0;
    } else {
      running += tensor->bytes;
      plan.Recompute(tensor->value);
    }
  }
  return plan;
}

}  // namespace

program::Plan RecomputePolicy::SqrtCheckpoints(const PlanningContext& context) {
  program::Plan plan = context.KeepAll("recompute");
  const std::vector<const autodiff::SavedTensor*> tensors = Recomputable(context);
  const size_t every =
      static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(tensors.size()))));
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Every `every`-th tensor is a checkpoint and stays; the rest are rebuilt
    // from the checkpoint before them, one segment at a time.
    if ((i + 1) % every != 0) plan.Recompute(tensors[i]->value);
  }
  return plan;
}

program::Plan RecomputePolicy::SegmentCheckpoints(const PlanningContext& context,
                                                  int64_t segment_bytes) {
  // Any tensor may be a checkpoint.
  return GreedySegments(context, segment_bytes, [](const autodiff::SavedTensor&) { return true; });
}

namespace {

// Per value: whether it cuts the forward pass. A forward value made at step s
// cuts it when it is the only activation made at or before s that a forward
// step after s still reads: everything downstream is then rebuilt from it
// alone. Graph inputs (parameters, the batch) are always there and do not
// count; values nothing reads in the forward pass (saved statistics, the
// loss) cross no step.
std::vector<bool> ForwardCuts(const PlanningContext& context) {
  const ir::Graph& graph = context.graph();
  const size_t steps = context.schedule().size();
  std::vector<int> crossing(steps + 1, 0);  // difference array over step boundaries
  for (const ir::Value& value : graph.values()) {
    if (value.producer == ir::kNoNode) continue;
    if (graph.node(value.producer).phase != ir::Phase::kForward) continue;
    const int made = context.step_of(value.producer);
    const int last = context.last_forward_read(value.id);
    if (last <= made) continue;
    // Live across the boundaries after steps made, ..., last - 1.
    ++crossing[static_cast<size_t>(made)];
    --crossing[static_cast<size_t>(last)];
  }
  for (size_t step = 1; step < crossing.size(); ++step) crossing[step] += crossing[step - 1];
  std::vector<bool> cut(static_cast<size_t>(graph.num_values()), false);
  for (const ir::Value& value : graph.values()) {
    if (value.producer == ir::kNoNode) continue;
    if (graph.node(value.producer).phase != ir::Phase::kForward) continue;
    const int made = context.step_of(value.producer);
    cut[static_cast<size_t>(value.id)] =
        context.last_forward_read(value.id) > made && crossing[static_cast<size_t>(made)] == 1;
  }
  return cut;
}

}  // namespace

program::Plan RecomputePolicy::CutCheckpoints(const PlanningContext& context,
                                              int64_t segment_bytes) {
  const std::vector<bool> cut = ForwardCuts(context);
  return GreedySegments(context, segment_bytes, [&](const autodiff::SavedTensor& tensor) {
    return cut[static_cast<size_t>(tensor.value)];
  });
}

namespace {

// A tensor made by a memory-bound op (batch norm, activation, add, pooling,
// layer norm, ...): rebuilding it costs a pass over memory, not a
// convolution or matrix product.
bool CheapToRebuild(const PlanningContext& context, const autodiff::SavedTensor& tensor) {
  const ir::OpClass op_class = ir::GetOpDef(context.graph().node(tensor.producer).op).op_class;
  return op_class != ir::OpClass::kConvolution && op_class != ir::OpClass::kMatMul;
}

}  // namespace

program::Plan RecomputePolicy::CheapCheckpoints(const PlanningContext& context,
                                                int64_t segment_bytes, double cheap_share) {
  // The cheap tensors, most bytes per second of rebuild first: a rebuild
  // runs the producer and any unsaved memory-bound input it needs again.
  const ir::Graph& graph = context.graph();
  std::vector<bool> saved(static_cast<size_t>(graph.num_values()), false);
  for (const autodiff::SavedTensor& tensor : context.saved())
    saved[static_cast<size_t>(tensor.value)] = true;
  std::vector<std::pair<double, ir::ValueId>> cheap;
  for (const autodiff::SavedTensor* tensor : Recomputable(context)) {
    if (!CheapToRebuild(context, *tensor)) continue;
    double seconds = context.simulator().node_seconds(tensor->producer);
    for (ir::ValueId input : graph.node(tensor->producer).inputs) {
      const ir::Value& value = graph.value(input);
      if (value.producer != ir::kNoNode && !saved[static_cast<size_t>(input)])
        seconds += context.simulator().node_seconds(value.producer);
    }
    cheap.emplace_back(static_cast<double>(tensor->bytes) / std::max(seconds, 1e-12),
                       tensor->value);
  }
  std::stable_sort(cheap.begin(), cheap.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  cheap.resize(static_cast<size_t>(std::llround(cheap_share * static_cast<double>(cheap.size()))));
  std::vector<bool> rebuilt(static_cast<size_t>(graph.num_values()), false);
  for (const auto& [ratio, value] : cheap) rebuilt[static_cast<size_t>(value)] = true;

  // The rest: the segment greedy among the convolution and matrix-product
  // tensors (a limit of 0 keeps them all); cheap tensors not rebuilt stay.
  program::Plan plan = context.KeepAll("recompute");
  int64_t running = 0;
  for (const autodiff::SavedTensor* tensor : Recomputable(context)) {
    if (rebuilt[static_cast<size_t>(tensor->value)]) {
      plan.Recompute(tensor->value);
    } else if (CheapToRebuild(context, *tensor)) {
      continue;
    } else if (running + tensor->bytes > segment_bytes) {
      running = 0;
    } else {
      running += tensor->bytes;
      plan.Recompute(tensor->value);
    }
  }
  return plan;
}

program::Plan RecomputePolicy::BlockCheckpoints(const PlanningContext& context,
                                                double block_share) {
  // Blocks in forward order: the recomputable tensors between two cuts (the
  // first block starts at the graph's inputs). The cuts themselves stay.
  const std::vector<bool> cut = ForwardCuts(context);
  struct Block {
    std::vector<const autodiff::SavedTensor*> tensors;
    int64_t bytes = 0;     // what rebuilding the whole block frees
    double seconds = 0.0;  // what it costs: its producers run again
  };
  std::vector<Block> blocks(1);
  for (const autodiff::SavedTensor* tensor : Recomputable(context)) {
    if (cut[static_cast<size_t>(tensor->value)]) {
      blocks.emplace_back();
      continue;  // the checkpoint: kept
    }
    Block& block = blocks.back();
    block.tensors.push_back(tensor);
    block.bytes += tensor->bytes;
    block.seconds += context.simulator().node_seconds(tensor->producer);
  }
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return static_cast<double>(blocks[a].bytes) * blocks[b].seconds >
           static_cast<double>(blocks[b].bytes) * blocks[a].seconds;
  });
  const auto whole =
      static_cast<size_t>(std::llround(block_share * static_cast<double>(blocks.size())));
  std::vector<bool> rebuilt(blocks.size(), false);
  for (size_t i = 0; i < std::min(whole, order.size()); ++i) rebuilt[order[i]] = true;

  program::Plan plan = context.KeepAll("recompute");
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (const autodiff::SavedTensor* tensor : blocks[b].tensors) {
      if (rebuilt[b] || CheapToRebuild(context, *tensor)) plan.Recompute(tensor->value);
    }
  }
  return plan;
}

program::Plan RecomputePolicy::ChainCheckpoints(const PlanningContext& context,
                                                int64_t chain_limit_bytes, const Options& options) {
  // The recomputable saved tensors in forward order, read as a chain: each
  // costs its producer's time to rebuild. Exact on a chain; on a general
  // graph (branches, fan-out) the model is an approximation that the
  // simulator then checks.
  const std::vector<const autodiff::SavedTensor*> tensors = Recomputable(context);
  std::vector<ChainTensor> chain;
  chain.reserve(tensors.size());
  for (const autodiff::SavedTensor* tensor : tensors) {
    chain.push_back({tensor->bytes, context.simulator().node_seconds(tensor->producer)});
  }
  ChainOptions chain_options =
      chain.size() > options.exact_chain_length ? options.long_chain : ChainOptions{};
  chain_options.stop = [&context] { return context.PastTimeLimit(); };
  const ChainSolution solution = SolveChain(chain, chain_limit_bytes, chain_options);
  program::Plan plan = context.KeepAll("recompute");
  if (!solution.feasible) return plan;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!solution.checkpoint[i]) plan.Recompute(tensors[i]->value);
  }
  return plan;
}

absl::StatusOr<PlanResult> RecomputePolicy::Run(PlanningContext& context) {
  PlanResult result;
  std::optional<Evaluation> best;
  // Until a plan fits, every candidate is evaluated in full (the smallest
  // arena is the answer then); after, only one that fits and is faster can
  // replace it, and the context's bounds reject the others cheaply.
  auto consider = [&](program::Plan plan) -> absl::Status {
    if (best && context.Fits(*best)) {
      ASSIGN_OR_RETURN(std::optional<Evaluation> faster,
                       context.EvaluateIfBetter(std::move(plan), best->step_time_s()));
      if (faster) best = *std::move(faster);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(Evaluation evaluation, context.Evaluate(std::move(plan)));
    if (!best || Better(evaluation, *best, context.budget_bytes())) best = std::move(evaluation);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(consider(context.KeepAll("recompute")));
  if (!context.Fits(*best)) {
    RETURN_IF_ERROR(consider(SqrtCheckpoints(context)));
    // Cheap tensors alone, a growing share of them: the fine end of the
    // trade-off, where a little memory costs a little time.
    for (int k = 1; k <= options_.cheap_shares; ++k) {
      RETURN_IF_ERROR(
          consider(CheapCheckpoints(context, 0, static_cast<double>(k) / options_.cheap_shares)));
    }
    // Whole blocks between forward cuts, a growing share of them: from
    // there down to the least memory recomputation reaches.
    for (int k = 1; k <= options_.block_shares; ++k) {
      RETURN_IF_ERROR(
          consider(BlockCheckpoints(context, static_cast<double>(k) / options_.block_shares)));
    }
    // Segment limits on a geometric grid from the smallest tensor's size to
    // all of them: memory is U-shaped in the limit (many checkpoints at one
    // end, one huge segment at the other), so it is scanned, not bisected.
    int64_t total = 0;
    int64_t smallest_tensor = INT64_MAX;
    for (const autodiff::SavedTensor* tensor : Recomputable(context)) {
      total += tensor->bytes;
      smallest_tensor = std::min(smallest_tensor, std::max<int64_t>(tensor->bytes, 1));
    }
    const int points = options_.segment_grid_points;
    if (total > 0 && points > 0) {
      const double ratio =
          points == 1 ? 1.0
                      : std::pow(static_cast<double>(total) / static_cast<double>(smallest_tensor),
                                 1.0 / (points - 1));
      double limit = static_cast<double>(smallest_tensor);
      for (int i = 0; i < points; ++i, limit *= ratio) {
        // Each grid point lays out whole steps, and the chain's dynamic
        // program grows with the square of a deep graph's length: the
        // wall-clock safety net stops the scan (and the program) here.
        if (context.PastTimeLimit()) {
          result.hit_time_limit = true;
          break;
        }
        RETURN_IF_ERROR(consider(SegmentCheckpoints(context, static_cast<int64_t>(limit))));
        RETURN_IF_ERROR(consider(CheapCheckpoints(context, static_cast<int64_t>(limit), 1.0)));
        RETURN_IF_ERROR(consider(CutCheckpoints(context, static_cast<int64_t>(limit))));
        // The chain's optimum when the chain model's peak (checkpoints and
        // the largest segment) may be a multiple of that limit.
        if (options_.chain_every <= 0 || i % options_.chain_every != 0) continue;
        const auto chain_limit = static_cast<int64_t>(options_.chain_peak_factor * limit);
        RETURN_IF_ERROR(consider(ChainCheckpoints(context, chain_limit, options_)));
        if (context.PastTimeLimit()) {  // the solve may have stopped short
          result.hit_time_limit = true;
          break;
        }
      }
    }
  }
  if (context.Fits(*best)) {
    ASSIGN_OR_RETURN(const bool stopped, ImproveByKeepingBack(context, *best));
    result.hit_time_limit = result.hit_time_limit || stopped;
  }
  result.best = *std::move(best);
  return result;
}

absl::StatusOr<bool> RecomputePolicy::ImproveByKeepingBack(PlanningContext& context,
                                                           Evaluation& best) const {
  if (options_.keep_back_passes <= 0) return false;
  // Kept back from the plan that rebuilds every block where it fits: it
  // has the most memory to spare, and from it the tensors come back in the
  // same order whatever the budget, so that more budget keeps more back
  // (from the fastest plan that fits, the start would change with the
  // budget, and so would where the greedy ends). Where it does not fit,
  // from the fastest plan that does. The result replaces `best` only if it
  // is faster.
  ASSIGN_OR_RETURN(Evaluation start, context.Evaluate(BlockCheckpoints(context, 1.0)));
  if (!context.Fits(start)) start = best;
  ASSIGN_OR_RETURN(const bool stopped, KeepBack(context, start));
  if (Better(start, best, context.budget_bytes())) best = std::move(start);
  return stopped;
}

absl::StatusOr<bool> RecomputePolicy::KeepBack(PlanningContext& context, Evaluation& best) const {
  // The rebuilt tensors, the most rebuild time per byte first: keeping
  // those back saves the most time for the memory it costs.
  std::vector<std::pair<double, ir::ValueId>> rebuilt;
  for (const autodiff::SavedTensor& tensor : context.saved()) {
    if (best.plan.decision(tensor.value) != program::Decision::kRecompute) continue;
    const double seconds = context.simulator().node_seconds(tensor.producer);
    rebuilt.emplace_back(seconds / static_cast<double>(std::max<int64_t>(tensor.bytes, 1)),
                         tensor.value);
  }
  std::stable_sort(rebuilt.begin(), rebuilt.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // In that order, the next `width` tensors still rebuilt are tried kept
  // together: kept if the plan still fits and is faster, the width then
  // doubling; else tried again half as many, and a single tensor that fails
  // is passed over. Most tries succeed (on the small GPT-2s at half their
  // `none` arena, two in three, one at a time), so a run of tensors that all
  // fit costs a logarithm of its length in whole-step evaluations, not one
  // each, and a deep model's pass no longer grows with the square of its
  // depth.
  for (int pass = 0; pass < options_.keep_back_passes; ++pass) {
    bool improved = false;
    size_t next = 0;  // into `rebuilt`
    size_t width = 1;
    while (true) {
      if (context.PastTimeLimit()) return true;
      program::Plan trial = best.plan;
      size_t end = next;
      size_t kept = 0;
      for (; end < rebuilt.size() && kept < width; ++end) {
        const ir::ValueId value = rebuilt[end].second;
        if (best.plan.decision(value) != program::Decision::kRecompute) continue;
        trial.Keep(value);
        ++kept;
      }
      if (kept == 0) break;  // none left to try in this pass
      ASSIGN_OR_RETURN(std::optional<Evaluation> faster,
                       context.EvaluateIfBetter(std::move(trial), best.step_time_s()));
      if (faster) {
        best = *std::move(faster);
        improved = true;
        next = end;
        width *= 2;
      } else if (width > 1) {
        width /= 2;
      } else {
        next = end;
      }
    }
    if (!improved) break;
  }
  return false;
}

}  // namespace spillway::planner
