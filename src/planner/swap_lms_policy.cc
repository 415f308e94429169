// TFLMS v2's graph editor, read from its documentation and code and written
// anew for Spillway's graphs: docs/planner.md gives the reading and where a
// Spillway Plan cannot say what TFLMS's edited graph says.
#include <algorithm>
#include <limits>
#include <optional>

#include "fmt/format.h"
#include "planner/policies.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::planner {

LmsModel::LmsModel(const PlanningContext& context, SwapLmsOptions options)
    : context_(context), options_(options) {
  const ir::Graph& graph = context.graph();
  // TFLMS puts the ops without inputs (placeholders, variables) at level 0;
  // here graph inputs are not nodes, and a node reading only them is at 1.
  level_ = TopologicalLevels(graph, context.schedule());
  levels_ = 1 + *std::max_element(level_.begin(), level_.end());
  users_ = graph.Users();

  // It runs the ops level by level; within a level in an order of its own
  // (a set's), here the schedule's.
  order_ = context.schedule();
  std::stable_sort(order_.begin(), order_.end(),
                   [&](ir::NodeId a, ir::NodeId b) { return level(a) < level(b); });

  // Each node's highest-level data input's producer (the first in the
  // schedule on a tie), and its powers for the trigger search.
  const size_t num_nodes = static_cast<size_t>(graph.num_nodes());
  std::vector<ir::NodeId> parent(num_nodes, ir::kNoNode);
  for (const ir::NodeId id : context.schedule()) {
    ir::NodeId& best = parent[static_cast<size_t>(id)];
    for (ir::ValueId input : graph.node(id).inputs) {
      const ir::NodeId producer = graph.value(input).producer;
      if (producer == ir::kNoNode) continue;
      if (best == ir::kNoNode || level(producer) > level(best) ||
          (level(producer) == level(best) && context.step_of(producer) < context.step_of(best))) {
        best = producer;
      }
    }
  }
  jump_.push_back(std::move(parent));
  for (int reach = 1; reach < levels_; reach *= 2) {
    const std::vector<ir::NodeId>& half = jump_.back();
    std::vector<ir::NodeId> next(num_nodes, ir::kNoNode);
    for (size_t n = 0; n < num_nodes; ++n) {
      if (half[n] != ir::kNoNode) next[n] = half[static_cast<size_t>(half[n])];
    }
    jump_.push_back(std::move(next));
  }

  // Its budget: the device memory less the trainable variables (and the
  // kernels' workspace), times the ratio.
  int64_t trainable = 0;
  for (ir::ValueId parameter : graph.InputsOfKind(ir::ValueKind::kParameter)) {
    trainable += graph.value(parameter).type.bytes();
  }
  budget_bytes_ = static_cast<int64_t>(
      static_cast<double>(context.tensor_budget_bytes() - trainable) * options_.memory_ratio);

  // Swap candidates: tensors of rank 2 or more (TFLMS never swaps scalars and
  // vectors, and has no size threshold) that a Spillway Plan can spill: saved
  // activations, read back in the backward pass.
  candidate_of_value_.assign(static_cast<size_t>(graph.num_values()), -1);
  for (const autodiff::SavedTensor& saved : context.saved()) {
    const ir::Value& value = graph.value(saved.value);
    if (value.type.rank() < 2 || !context.CanSpill(saved.value)) continue;
    if (context.first_backward_read(saved.value) == program::ScheduleReads::kNever) continue;
    Candidate candidate;
    candidate.value = saved.value;
    candidate.producer = value.producer;
    candidate.consumers = users_[static_cast<size_t>(saved.value)];
    std::stable_sort(candidate.consumers.begin(), candidate.consumers.end(),
                     [&](ir::NodeId a, ir::NodeId b) { return level(a) < level(b); });
    candidate_of_value_[static_cast<size_t>(saved.value)] = static_cast<int>(candidates_.size());
    candidates_.push_back(std::move(candidate));
  }
}

std::vector<ir::NodeId> LmsModel::Far(const Candidate& candidate, int threshold) const {
  std::vector<ir::NodeId> far;
  for (ir::NodeId consumer : candidate.consumers) {
    if (level(consumer) - level(candidate.producer) > threshold) far.push_back(consumer);
  }
  return far;
}

std::vector<ir::ValueId> LmsModel::Swapped(int threshold) const {
  std::vector<ir::ValueId> swapped;
  for (const Candidate& candidate : candidates_) {
    if (!Far(candidate, threshold).empty()) swapped.push_back(candidate.value);
  }
  return swapped;
}

// TFLMS's trigger search: from `ahead` + 1 levels before the consumer back
// at most `trigger_search_levels` levels, never down to the producer's level,
// the highest level holding an op from which the consumer can be reached
// along data edges; of that level's such ops TFLMS takes an arbitrary one.
// Every node is one level above its highest input, so walking down the chain
// of highest-level data inputs meets every level until a control edge makes
// a gap: the first chain node at or below the search's first level is such
// an op at the highest level there is one (unless a gap drops it out of the
// window), and it is the one taken here.
ir::NodeId LmsModel::SearchTrigger(const Candidate& candidate, ir::NodeId consumer,
                                   int ahead) const {
  const int top = level(consumer) - ahead - 1;  // the first level searched
  const int bottom =
      std::max(top + 1 - options_.trigger_search_levels, level(candidate.producer) + 1);
  if (top < bottom) return ir::kNoNode;
  const ir::NodeId found = ChainAncestor(consumer, top);
  return found != ir::kNoNode && level(found) >= bottom ? found : ir::kNoNode;
}

ir::NodeId LmsModel::ChainAncestor(ir::NodeId node, int at_or_below) const {
  if (level(node) <= at_or_below) return node;
  // Levels fall along the chain: jump while still above, then one step.
  for (size_t k = jump_.size(); k-- > 0;) {
    const ir::NodeId next = jump_[k][static_cast<size_t>(node)];
    if (next != ir::kNoNode && level(next) > at_or_below) node = next;
  }
  return jump_[0][static_cast<size_t>(node)];
}

ir::NodeId LmsModel::Trigger(ir::ValueId value, const LmsSetting& setting) const {
  const int index = candidate_of_value_[static_cast<size_t>(value)];
  SPILLWAY_CHECK(index >= 0, "only swap candidates have swap-ins");
  const Candidate& candidate = candidates_[static_cast<size_t>(index)];
  const std::vector<ir::NodeId> far = Far(candidate, setting.threshold);
  SPILLWAY_CHECK(!far.empty(), "only swapped tensors have swap-ins");
  return TriggerOf(candidate, far, setting);
}

ir::NodeId LmsModel::TriggerOf(const Candidate& candidate, const std::vector<ir::NodeId>& far,
                               const LmsSetting& setting) const {
  const ir::NodeId reference = far.front();  // the earliest consumer of the swap-in
  const bool synchronous = setting.sync_mode >= 2;
  if (!synchronous) {
    const ir::NodeId found = SearchTrigger(candidate, reference, setting.ahead);
    if (found != ir::kNoNode) return found;
  }
  // Synchronous, or no trigger found: the consumer's highest-level producer
  // other than the swapped tensor's own; failing that, the search one level
  // ahead.
  const ir::Graph& graph = context_.graph();
  ir::NodeId best = ir::kNoNode;
  for (ir::ValueId input : graph.node(reference).inputs) {
    const ir::NodeId producer = graph.value(input).producer;
    if (producer == ir::kNoNode || producer == candidate.producer) continue;
    if (best == ir::kNoNode || level(producer) > level(best)) best = producer;
  }
  if (best == ir::kNoNode && setting.ahead != 1) best = SearchTrigger(candidate, reference, 1);
  return best;
}

bool LmsModel::Fits(const LmsSetting& setting) const {
  const ir::Graph& graph = context_.graph();
  const size_t num_values = static_cast<size_t>(graph.num_values());
  const bool async_swap_out = setting.sync_mode == 0 || setting.sync_mode == 2;

  // Per swapped tensor: its far consumers and the op whose completion
  // allocates its swap-in (kNoNode: just before the first far consumer).
  std::vector<std::vector<ir::NodeId>> far(num_values);
  std::vector<std::vector<ir::ValueId>> swap_ins_after(static_cast<size_t>(graph.num_nodes()));
  std::vector<std::vector<ir::ValueId>> swap_ins_before(static_cast<size_t>(graph.num_nodes()));
  std::vector<ir::NodeId> keeper(num_values, ir::kNoNode);  // the last consumer not swapped in
  for (const Candidate& candidate : candidates_) {
    std::vector<ir::NodeId> far_consumers = Far(candidate, setting.threshold);
    if (far_consumers.empty()) continue;
    const size_t v = static_cast<size_t>(candidate.value);
    keeper[v] = candidate.producer;
    for (ir::NodeId consumer : candidate.consumers) {
      if (std::find(far_consumers.begin(), far_consumers.end(), consumer) == far_consumers.end() &&
          level(consumer) >= level(keeper[v])) {
        keeper[v] = consumer;
      }
    }
    const ir::NodeId trigger = TriggerOf(candidate, far_consumers, setting);
    if (trigger != ir::kNoNode) {
      swap_ins_after[static_cast<size_t>(trigger)].push_back(candidate.value);
    } else {
      swap_ins_before[static_cast<size_t>(far_consumers.front())].push_back(candidate.value);
    }
    far[v] = std::move(far_consumers);
  }

  // The device tensors, with reference counts: a tensor dies when its count
  // reaches zero and is freed at the start of the next level.
  std::vector<int> count(num_values, -1);    // -1: not resident
  std::vector<int> swap_in(num_values, -1);  // the swap-in copy's count; -1: not resident
  std::vector<ir::ValueId> delayed;          // swap-outs holding their device copy one op longer
  std::vector<bool> executed(static_cast<size_t>(graph.num_nodes()), false);
  std::vector<int64_t> dying;  // bytes freed at the next level
  int64_t used = 0;
  bool fits = true;
  auto allocate = [&](int64_t bytes) {
    // TFLMS fails an allocation that is not smaller than what is free.
    if (bytes >= budget_bytes_ - used) fits = false;
    used += bytes;
  };
  auto release = [&](int& counter, ir::ValueId value) {
    if (counter > 0 && --counter == 0) dying.push_back(graph.value(value).type.bytes());
  };
  auto allocate_swap_in = [&](ir::ValueId value) {
    const size_t v = static_cast<size_t>(value);
    allocate(graph.value(value).type.bytes());
    swap_in[v] = static_cast<int>(far[v].size());
  };

  int current_level = -1;
  for (const ir::NodeId id : order_) {
    if (level(id) != current_level) {  // collect what died in the last level
      current_level = level(id);
      for (int64_t bytes : dying) used -= bytes;
      dying.clear();
    }
    const ir::Node& node = graph.node(id);
    for (ir::ValueId value : swap_ins_before[static_cast<size_t>(id)]) allocate_swap_in(value);
    auto reads_swap_in = [&](ir::ValueId input) {
      const std::vector<ir::NodeId>& readers = far[static_cast<size_t>(input)];
      return std::find(readers.begin(), readers.end(), id) != readers.end();
    };
    for (ir::ValueId input : node.inputs) {
      const size_t v = static_cast<size_t>(input);
      if (reads_swap_in(input) || count[v] >= 0) continue;
      // Not resident: a graph input (parameters, the batch) or a tensor
      // already freed is allocated again for all its readers.
      allocate(graph.value(input).type.bytes());
      count[v] = static_cast<int>(users_[v].size());
    }
    for (ir::ValueId output : node.outputs) {
      const size_t v = static_cast<size_t>(output);
      const int readers = static_cast<int>(users_[v].size());
      if (readers == 0) continue;
      allocate(graph.value(output).type.bytes());
      count[v] = readers;
    }
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const ir::ValueId input = node.inputs[k];
      // Each reader counts once, however many of its inputs the tensor is.
      if (std::find(node.inputs.begin(), node.inputs.begin() + static_cast<ptrdiff_t>(k), input) !=
          node.inputs.begin() + static_cast<ptrdiff_t>(k))
        continue;
      release(reads_swap_in(input) ? swap_in[static_cast<size_t>(input)]
                                   : count[static_cast<size_t>(input)],
              input);
    }
    for (ir::ValueId output : node.outputs) {
      const size_t v = static_cast<size_t>(output);
      if (far[v].empty() || count[v] < 0) continue;
      // Swapped out: its far readers read the swap-in instead. An
      // asynchronous swap-out holds the device copy one op longer.
      count[v] -= static_cast<int>(far[v].size());
      if (async_swap_out && count[v] > 0 && levels_ - level(keeper[v]) > 1) {
        ++count[v];
        delayed.push_back(output);
      }
      if (count[v] == 0) dying.push_back(graph.value(output).type.bytes());
    }
    executed[static_cast<size_t>(id)] = true;
    // A delayed swap-out lets go of its hold after the op that follows its
    // last keeper.
    std::erase_if(delayed, [&](ir::ValueId value) {
      const size_t v = static_cast<size_t>(value);
      if (!executed[static_cast<size_t>(keeper[v])] || keeper[v] == id) return false;
      release(count[v], value);
      return true;
    });
    for (ir::ValueId value : swap_ins_after[static_cast<size_t>(id)]) allocate_swap_in(value);
    if (!fits) return false;
  }
  return fits;
}

LmsModel::Tuning LmsModel::Tune() const {
  Tuning tuning;
  // Bisection for the largest passing value in [1, levels], 1 being known to
  // pass: TFLMS's own, which assumes that passing is monotone.
  auto largest = [&](auto&& passes) {
    int best = 1;
    int low = 1;
    int high = levels_;
    while (low <= high) {
      const int middle = low + (high - low) / 2;
      if (passes(middle)) {
        best = middle;
        low = middle + 1;
      } else {
        high = middle - 1;
      }
    }
    return best;
  };
  // Nothing swapped: a threshold of every level.
  if (Fits({.threshold = levels_, .ahead = 1, .sync_mode = 0})) {
    tuning.setting = {.threshold = levels_, .ahead = 1, .sync_mode = 0};
    tuning.fits = true;
    return tuning;
  }
  tuning.swaps = true;
  // The smallest threshold swaps the most; raise sync_mode until it fits.
  LmsSetting setting{.threshold = 1, .ahead = 1, .sync_mode = 0};
  while (!Fits(setting)) {
    if (setting.sync_mode == 3) {
      tuning.setting = setting;  // nothing fits: TFLMS gives up here
      return tuning;
    }
    ++setting.sync_mode;
  }
  tuning.fits = true;
  setting.threshold = largest([&](int threshold) {
    return Fits({.threshold = threshold, .ahead = 1, .sync_mode = setting.sync_mode});
  });
  // With synchronous swap-ins there is no lookahead to tune.
  if (setting.sync_mode < 2) {
    setting.ahead = largest([&](int ahead) {
      return Fits({.threshold = setting.threshold, .ahead = ahead, .sync_mode = setting.sync_mode});
    });
  }
  tuning.setting = setting;
  return tuning;
}

program::Plan LmsModel::PlanFor(const LmsSetting& setting) const {
  program::Plan plan = context_.KeepAll("swap-lms");
  for (const Candidate& candidate : candidates_) {
    const std::vector<ir::NodeId> far = Far(candidate, setting.threshold);
    if (far.empty()) continue;
    // The fetch is issued when the trigger has run; synchronous swap-ins,
    // and swap-ins without a trigger, just in time. Spillway keeps the device
    // copy until its last forward reader, so the fetch comes after that.
    const ir::ValueId value = candidate.value;
    int fetch_step = -1;
    const ir::NodeId trigger = TriggerOf(candidate, far, setting);
    if (setting.sync_mode < 2 && trigger != ir::kNoNode) {
      fetch_step = std::max(context_.step_of(trigger) + 1, context_.last_forward_read(value) + 1);
      if (fetch_step >= context_.first_backward_read(value)) fetch_step = -1;
    }
    plan.Spill(value, fetch_step);
  }
  return plan;
}

namespace {

std::string Describe(const LmsModel& model, const LmsModel::Tuning& tuning) {
  if (!tuning.swaps) return fmt::format("no swapping ({} levels)", model.levels());
  std::string text = fmt::format("threshold {}, ", tuning.setting.threshold);
  if (tuning.setting.sync_mode < 2) text += fmt::format("ahead {}, ", tuning.setting.ahead);
  text += fmt::format("sync_mode {} of {} levels", tuning.setting.sync_mode, model.levels());
  if (!tuning.fits) text += "; TFLMS's simulator found no setting that fits";
  return text;
}

}  // namespace

absl::StatusOr<PlanResult> SwapLmsPolicy::Run(PlanningContext& context) {
  const LmsModel model(context, options_);
  const LmsModel::Tuning tuning = model.Tune();
  PlanResult result;
  ASSIGN_OR_RETURN(result.best, context.Evaluate(tuning.swaps ? model.PlanFor(tuning.setting)
                                                              : context.KeepAll("swap-lms")));
  result.tuning = Describe(model, tuning);
  return result;
}

absl::StatusOr<PlanResult> HybridSeedLmsPolicy::Run(PlanningContext& context) {
  SwapLmsPolicy swap;
  ASSIGN_OR_RETURN(PlanResult swapped, swap.Run(context));
  std::string tuning = swapped.tuning;
  ASSIGN_OR_RETURN(PlanResult seeded,
                   HybridSeedPolicy::RecomputeUnits(context, std::move(swapped)));
  seeded.tuning = std::move(tuning);
  return seeded;
}

}  // namespace spillway::planner
