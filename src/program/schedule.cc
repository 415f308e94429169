#include "program/schedule.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "ir/op_registry.h"
#include "program/plan.h"
#include "support/check.h"

namespace spillway::program {

std::string_view BackwardOrderName(BackwardOrder order) {
  switch (order) {
    case BackwardOrder::kTopological:
      return "topological";
    case BackwardOrder::kMemoryAware:
      return "memory-aware";
    case BackwardOrder::kLookahead:
      return "lookahead";
  }
  return "?";
}

std::optional<BackwardOrder> ParseBackwardOrder(std::string_view name) {
  for (BackwardOrder order :
       {BackwardOrder::kTopological, BackwardOrder::kMemoryAware, BackwardOrder::kLookahead}) {
    if (name == BackwardOrderName(order)) return order;
  }
  return std::nullopt;
}

namespace {

constexpr ir::ValueId kNoDonor = -1;

// The list schedule's view of the step's memory as backward nodes run.
class BackwardWorkingSet {
 public:
  BackwardWorkingSet(const ir::Graph& graph, const std::vector<ir::NodeId>& block,
                     bool fetch_per_read)
      : graph_(graph),
        fetch_per_read_(fetch_per_read),
        readers_left_(static_cast<size_t>(graph.num_values()), 0),
        read_after_(static_cast<size_t>(graph.num_values()), false),
        resident_(static_cast<size_t>(graph.num_values()), false) {
    std::vector<bool> in_block(static_cast<size_t>(graph.num_nodes()), false);
    for (ir::NodeId id : block) in_block[static_cast<size_t>(id)] = true;
    for (const ir::Node& node : graph.nodes()) {
      const bool inside = in_block[static_cast<size_t>(node.id)];
      ForEachDistinctInput(node, [&](ir::ValueId input) {
        if (inside) {
          ++readers_left_[static_cast<size_t>(input)];
        } else if (node.phase != ir::Phase::kForward) {
          read_after_[static_cast<size_t>(input)] = true;  // an update reads it
        }
      });
    }
    for (ir::ValueId output : graph.outputs()) read_after_[static_cast<size_t>(output)] = true;
  }

  struct Effect {
    int64_t needs = 0;    // the bytes it adds while it runs: outputs and fetches
    int64_t growth = 0;   // the bytes it adds once it has run (negative: frees)
    int64_t fetched = 0;  // saved tensors it is the first to read
  };

  Effect EffectOf(const ir::Node& node) const {
    Effect effect;
    const ir::ValueId donor = Donor(node);
    ForEachDistinctInput(node, [&](ir::ValueId input) {
      if (!Counted(input)) return;
      const size_t v = static_cast<size_t>(input);
      if (!resident_[v]) effect.fetched += Bytes(input);
      const bool dropped = fetch_per_read_ && CanSpill(graph_, input);
      if ((dropped || (readers_left_[v] == 1 && !read_after_[v])) && input != donor) {
        effect.growth -= Bytes(input);
      }
    });
    effect.needs = effect.fetched;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (i == 0 && donor != kNoDonor) continue;
      effect.needs += Bytes(node.outputs[i]);
    }
    effect.growth += effect.needs;
    return effect;
  }

  void Run(const ir::Node& node) {
    ForEachDistinctInput(node, [&](ir::ValueId input) {
      const size_t v = static_cast<size_t>(input);
      resident_[v] =
          (readers_left_[v] > 1 || read_after_[v]) && !(fetch_per_read_ && CanSpill(graph_, input));
      --readers_left_[v];
    });
    for (ir::ValueId output : node.outputs) resident_[static_cast<size_t>(output)] = true;
  }

  // What Run(node) changes, so that Undo can take it back: a trial run.
  using Snapshot = std::vector<std::pair<ir::ValueId, bool>>;
  Snapshot Save(const ir::Node& node) const {
    Snapshot snapshot;
    for (ir::ValueId input : node.inputs) {
      snapshot.emplace_back(input, resident_[static_cast<size_t>(input)]);
    }
    for (ir::ValueId output : node.outputs) {
      snapshot.emplace_back(output, resident_[static_cast<size_t>(output)]);
    }
    return snapshot;
  }
  void Undo(const ir::Node& node, const Snapshot& snapshot) {
    ForEachDistinctInput(node,
                         [&](ir::ValueId input) { ++readers_left_[static_cast<size_t>(input)]; });
    for (auto it = snapshot.rbegin(); it != snapshot.rend(); ++it) {
      resident_[static_cast<size_t>(it->first)] = it->second;
    }
  }

 private:
  template <typename Fn>
  static void ForEachDistinctInput(const ir::Node& node, Fn&& fn) {
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const ir::ValueId input = node.inputs[k];
      if (std::find(node.inputs.begin(), node.inputs.begin() + static_cast<ptrdiff_t>(k), input) ==
          node.inputs.begin() + static_cast<ptrdiff_t>(k)) {
        fn(input);
      }
    }
  }

  // Only values the step allocates and frees: graph inputs (parameters,
  // state, the batch) stay for the whole step.
  bool Counted(ir::ValueId value) const {
    return graph_.value(value).kind == ir::ValueKind::kIntermediate;
  }

  int64_t Bytes(ir::ValueId value) const { return graph_.value(value).type.bytes(); }

  // The input whose buffer the node's first output would take, as the
  // rewriter's donation does: same type, read here for the last time.
  ir::ValueId Donor(const ir::Node& node) const {
    const ir::OpDef& def = ir::GetOpDef(node.op);
    if (node.outputs.empty() || !def.may_overwrite_inputs) return kNoDonor;
    const ir::TensorType& type = graph_.value(node.outputs[0]).type;
    const auto read_elsewhere = [&](ir::ValueId value) {
      for (size_t j = 0; j < node.inputs.size(); ++j) {
        if (node.inputs[j] == value && !def.MayOverwrite(j)) return true;
      }
      return false;
    };
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      if (!def.MayOverwrite(k)) continue;
      const ir::ValueId input = node.inputs[k];
      if (read_elsewhere(input)) continue;
      const size_t v = static_cast<size_t>(input);
      if (Counted(input) && resident_[v] && readers_left_[v] == 1 && !read_after_[v] &&
          graph_.value(input).type == type) {
        return input;
      }
    }
    return kNoDonor;
  }

  const ir::Graph& graph_;
  const bool fetch_per_read_;      // a saved tensor is fetched for each read, dropped after it
  std::vector<int> readers_left_;  // distinct backward readers not yet run
  std::vector<bool> read_after_;   // read by an update node or a graph output
  std::vector<bool> resident_;     // on the device now, in this model
};

}  // namespace

std::vector<ir::NodeId> MemoryAwareBackwardOrder(const ir::Graph& graph,
                                                 const std::vector<ir::NodeId>& block,
                                                 bool look_ahead) {
  const size_t n = block.size();
  std::vector<int> position(static_cast<size_t>(graph.num_nodes()), -1);
  for (size_t i = 0; i < n; ++i) position[static_cast<size_t>(block[i])] = static_cast<int>(i);

  // Dependencies inside the block, data and control, as positions.
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> successors(n);
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = graph.node(block[i]);
    std::vector<int> predecessors;
    for (ir::ValueId input : node.inputs) {
      const ir::NodeId producer = graph.value(input).producer;
      if (producer != ir::kNoNode) predecessors.push_back(position[static_cast<size_t>(producer)]);
    }
    for (ir::NodeId control : node.control_inputs) {
      predecessors.push_back(position[static_cast<size_t>(control)]);
    }
    std::sort(predecessors.begin(), predecessors.end());
    predecessors.erase(std::unique(predecessors.begin(), predecessors.end()), predecessors.end());
    for (int predecessor : predecessors) {
      if (predecessor < 0) continue;  // outside the block: already run
      successors[static_cast<size_t>(predecessor)].push_back(static_cast<int>(i));
      ++pending[i];
    }
  }

  BackwardWorkingSet working_set(graph, block, /*fetch_per_read=*/look_ahead);
  const int steps = look_ahead ? 2 : 1;
  std::vector<int> ready;  // positions, kept sorted so ties go to the earliest
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(static_cast<int>(i));
  }
  std::vector<ir::NodeId> order;
  order.reserve(n);
  // The key a node is chosen by (the least first): the node, then up to
  // `steps - 1` more, each the ready node that grows least (then needs
  // least), run on trial. The most bytes the run adds at once, then its
  // growth, then the node's own growth, new bytes and saved bytes brought
  // back. One step is the fewest new bytes, then the least growth, then the
  // fewest saved bytes.
  using Key = std::array<int64_t, 5>;
  struct TrialStep {
    int at;
    BackwardWorkingSet::Snapshot snapshot;
  };
  std::vector<TrialStep> trial;
  std::vector<int> trial_ready;
  auto key_of = [&](size_t r) -> Key {
    const BackwardWorkingSet::Effect first =
        working_set.EffectOf(graph.node(block[static_cast<size_t>(ready[r])]));
    if (steps <= 1) return {first.needs, first.growth, first.fetched, 0, 0};
    int64_t added = 0;
    int64_t peak = 0;
    auto run = [&](int at, const BackwardWorkingSet::Effect& effect) {
      const ir::Node& node = graph.node(block[static_cast<size_t>(at)]);
      peak = std::max(peak, added + effect.needs);
      added += effect.growth;
      trial.push_back({at, working_set.Save(node)});
      working_set.Run(node);
      for (int successor : successors[static_cast<size_t>(at)]) {
        if (--pending[static_cast<size_t>(successor)] == 0) trial_ready.push_back(successor);
      }
    };
    trial_ready = ready;
    trial_ready.erase(trial_ready.begin() + static_cast<ptrdiff_t>(r));
    run(ready[r], first);
    for (int step = 1; step < steps && !trial_ready.empty(); ++step) {
      size_t pick = 0;
      BackwardWorkingSet::Effect best;
      for (size_t k = 0; k < trial_ready.size(); ++k) {
        const BackwardWorkingSet::Effect e =
            working_set.EffectOf(graph.node(block[static_cast<size_t>(trial_ready[k])]));
        if (k == 0 || std::pair(e.growth, e.needs) < std::pair(best.growth, best.needs)) {
          pick = k;
          best = e;
        }
      }
      const int at = trial_ready[pick];
      trial_ready.erase(trial_ready.begin() + static_cast<ptrdiff_t>(pick));
      run(at, best);
    }
    for (auto it = trial.rbegin(); it != trial.rend(); ++it) {
      for (int successor : successors[static_cast<size_t>(it->at)]) {
        ++pending[static_cast<size_t>(successor)];
      }
      working_set.Undo(graph.node(block[static_cast<size_t>(it->at)]), it->snapshot);
    }
    trial.clear();
    return {peak, added, first.growth, first.needs, first.fetched};
  };
  // Keys in order. Looking ahead, byte counts that differ by less than 1/1024
  // of the larger count as equal: the few bytes of a weight gradient made a
  // run that frees a whole activation lose to one that holds it.
  auto before = [&](const Key& a, const Key& b) {
    if (steps <= 1) return a < b;
    for (size_t i = 0; i < a.size(); ++i) {
      const int64_t tolerance = std::max(std::abs(a[i]), std::abs(b[i])) >> 10;
      if (a[i] < b[i] - tolerance) return true;
      if (b[i] < a[i] - tolerance) return false;
    }
    return false;
  };
  while (!ready.empty()) {
    // Among equal keys, the earliest in the topological order.
    size_t best = 0;
    Key best_key{};
    for (size_t r = 0; r < ready.size(); ++r) {
      const Key key = key_of(r);
      if (r == 0 || before(key, best_key)) {
        best = r;
        best_key = key;
      }
    }
    const int chosen = ready[best];
    ready.erase(ready.begin() + static_cast<ptrdiff_t>(best));
    working_set.Run(graph.node(block[static_cast<size_t>(chosen)]));
    order.push_back(block[static_cast<size_t>(chosen)]);
    for (int successor : successors[static_cast<size_t>(chosen)]) {
      if (--pending[static_cast<size_t>(successor)] == 0) {
        ready.insert(std::upper_bound(ready.begin(), ready.end(), successor), successor);
      }
    }
  }
  SPILLWAY_CHECK(order.size() == n, "the backward block has no cycles");
  return order;
}

std::vector<ir::NodeId> TrainingSchedule(const ir::Graph& graph, BackwardOrder order) {
  std::vector<ir::NodeId> schedule = graph.TopologicalOrder();
  SPILLWAY_CHECK(static_cast<int64_t>(schedule.size()) == graph.num_nodes(),
                 "a training graph has no cycles");
  if (order == BackwardOrder::kTopological) return schedule;

  auto is_backward = [&](ir::NodeId id) { return graph.node(id).phase == ir::Phase::kBackward; };
  const auto first = std::find_if(schedule.begin(), schedule.end(), is_backward);
  const auto last = std::find_if_not(first, schedule.end(), is_backward);
  if (first == schedule.end() ||
      std::find_if(last, schedule.end(), is_backward) != schedule.end()) {
    return schedule;  // no backward pass, or not one block
  }
  const std::vector<ir::NodeId> block(first, last);
  const std::vector<ir::NodeId> reordered =
      MemoryAwareBackwardOrder(graph, block, order == BackwardOrder::kLookahead);
  std::copy(reordered.begin(), reordered.end(), first);
  return schedule;
}

}  // namespace spillway::program
