#include "planner/step_relaxation.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "program/rewriter.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

constexpr double kMicroseconds = 1e6;  // per second
constexpr double kKiB = 1024;          // bytes

// Device bytes allocated while each step's node runs when every tensor is
// kept: the rewriter's allocs and frees in list order. Every plan holds at
// least these at the start of a step's node, less the saved tensors it has
// moved out of the device by then (docs/planner.md argues why).
absl::StatusOr<std::vector<int64_t>> KeptBytesPerStep(const PlanningContext& context) {
  const ir::Graph& graph = context.graph();
  ASSIGN_OR_RETURN(program::Program kept,
                   program::Rewrite(graph, context.rewrite_setup(), program::Plan("none", graph)));
  std::vector<int64_t> bytes(context.schedule().size(), 0);
  int64_t live = 0;
  for (const program::Instruction& instruction : kept.instructions) {
    switch (instruction.kind) {
      case program::InstructionKind::kAlloc:
        if (kept.buffer(instruction.buffer).memory == program::Memory::kDevice) {
          live += kept.buffer(instruction.buffer).bytes;
        }
        break;
      case program::InstructionKind::kFree:
        if (kept.buffer(instruction.buffer).memory == program::Memory::kDevice) {
          live -= kept.buffer(instruction.buffer).bytes;
        }
        break;
      case program::InstructionKind::kCompute:
        bytes[static_cast<size_t>(context.step_of(instruction.node))] = live;
        break;
      default:
        break;
    }
  }
  return bytes;
}

// `count` of `items` (sorted), evenly spaced, the first and the last
// included; all of them when `count` is 0 or not smaller.
std::set<int> Spread(const std::set<int>& items, int count) {
  if (count <= 0 || static_cast<int>(items.size()) <= count) return items;
  const std::vector<int> all(items.begin(), items.end());
  if (count == 1) return {all.back()};
  std::set<int> chosen;
  for (int k = 0; k < count; ++k) {
    chosen.insert(all[(all.size() - 1) * static_cast<size_t>(k) / static_cast<size_t>(count - 1)]);
  }
  return chosen;
}

// The steps whose kept bytes exceed the budget, in order. A reduced program
// keeps some of them, as many as its cap on `absent` columns allows:
// dropping a step's rows only loosens the relaxation. Three rankings take
// turns choosing them, each step kept once:
// - the furthest over the budget first;
// - the largest share of the bytes that may leave first (the excess over
//   the bytes spilled or recomputed tensors could free there): where no
//   plan frees enough, that row alone proves that nothing fits;
// - where the link falls shortest first: the bytes over the budget taking
//   the longest to copy out beyond the time the ideal step has run by then.
//   Early in the forward pass a wide model makes bytes faster than a link
//   moves them out, and there only recomputation or a longer step makes
//   room; ranked by bytes alone, those steps (well below the peak) were left
//   out, and the bound on ResNet-152 at 7500x7500 on the V100 was the ideal
//   step.
std::vector<int> OverBudgetSteps(const PlanningContext& context,
                                 const std::vector<int64_t>& kept_bytes,
                                 const RelaxationOptions& options) {
  const int steps = static_cast<int>(kept_bytes.size());
  const int64_t budget = context.tensor_budget_bytes();
  std::vector<int> over;
  for (int s = 0; s < steps; ++s) {
    if (kept_bytes[static_cast<size_t>(s)] > budget) over.push_back(s);
  }
  if (options.max_absent_columns <= 0) return over;

  // Per step, from difference arrays: how many spillable tensors' gaps
  // cover it (its absent columns), and the bytes that may be off the device
  // there, spilled or recomputed (what its memory row can count).
  std::vector<int> spillable_at(static_cast<size_t>(steps) + 1, 0);
  std::vector<int64_t> evictable_at(static_cast<size_t>(steps) + 1, 0);
  const ir::Graph& graph = context.graph();
  for (const autodiff::SavedTensor& tensor : context.saved()) {
    const bool spill = context.CanSpill(tensor.value);
    const bool recompute = program::CanRecompute(graph, tensor.value);
    const int last_forward = context.last_forward_read(tensor.value);
    const int to = std::min(context.first_backward_read(tensor.value), steps);
    if (spill && last_forward + 1 < to) {
      ++spillable_at[static_cast<size_t>(last_forward + 1)];
      --spillable_at[static_cast<size_t>(to)];
    }
    const int from = recompute ? last_forward : last_forward + 1;
    if ((spill || recompute) && from < to) {
      evictable_at[static_cast<size_t>(std::max(from, 0))] += tensor.bytes;
      evictable_at[static_cast<size_t>(to)] -= tensor.bytes;
    }
  }
  for (int s = 1; s <= steps; ++s) {
    spillable_at[static_cast<size_t>(s)] += spillable_at[static_cast<size_t>(s - 1)];
    evictable_at[static_cast<size_t>(s)] += evictable_at[static_cast<size_t>(s - 1)];
  }
  // Each ranking as (score, step), the highest score first.
  std::vector<std::pair<double, int>> by_bytes;
  std::vector<std::pair<double, int>> by_share;
  std::vector<std::pair<double, int>> by_link;
  for (const int s : over) {
    const int64_t excess = kept_bytes[static_cast<size_t>(s)] - budget;
    const int64_t evictable = evictable_at[static_cast<size_t>(s)];
    by_bytes.emplace_back(static_cast<double>(excess), s);
    by_share.emplace_back(
        evictable > 0 ? static_cast<double>(excess) / static_cast<double>(evictable) : kInfinity,
        s);
    by_link.emplace_back(
        context.simulator().copy_seconds(excess, analysis::CopyDirection::kDeviceToHost) -
            context.ideal_start_s(s),
        s);
  }
  std::vector<std::pair<double, int>>* const rankings[] = {&by_bytes, &by_share, &by_link};
  for (auto* ranking : rankings) {
    std::stable_sort(ranking->begin(), ranking->end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
  }
  std::vector<bool> taken(static_cast<size_t>(steps), false);
  std::vector<int> chosen;
  int64_t columns = 0;
  for (size_t k = 0; k < 3 * over.size(); ++k) {
    const int s = (*rankings[k % 3])[k / 3].second;
    if (taken[static_cast<size_t>(s)]) continue;
    columns += spillable_at[static_cast<size_t>(s)];
    if (columns > options.max_absent_columns) break;
    taken[static_cast<size_t>(s)] = true;
    chosen.push_back(s);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

// The forward nodes that recomputing the value each of `producers` makes
// must re-run besides the producer itself: those of every input no plan keeps
// past the forward pass (a value only forward nodes read is freed after its
// last reader), back to saved tensors, graph inputs and graph outputs. Each
// node with the indices of the producers that need it.
std::map<ir::NodeId, std::vector<size_t>> UnkeptInputs(const PlanningContext& context,
                                                       const std::vector<ir::NodeId>& producers) {
  const ir::Graph& graph = context.graph();
  std::vector<char> resident(static_cast<size_t>(graph.num_values()), 0);
  for (ir::ValueId value : graph.inputs()) resident[static_cast<size_t>(value)] = 1;
  for (ir::ValueId value : graph.outputs()) resident[static_cast<size_t>(value)] = 1;
  for (const autodiff::SavedTensor& tensor : context.saved()) {
    resident[static_cast<size_t>(tensor.value)] = 1;
  }
  std::map<ir::NodeId, std::vector<size_t>> needed_by;
  for (size_t i = 0; i < producers.size(); ++i) {
    std::set<ir::NodeId> seen;
    std::vector<ir::ValueId> stack(graph.node(producers[i]).inputs);
    while (!stack.empty()) {
      const ir::ValueId value = stack.back();
      stack.pop_back();
      const ir::NodeId node = graph.value(value).producer;
      if (resident[static_cast<size_t>(value)] || node == ir::kNoNode ||
          graph.node(node).phase != ir::Phase::kForward || !seen.insert(node).second) {
        continue;
      }
      needed_by[node].push_back(i);
      for (ir::ValueId input : graph.node(node).inputs) stack.push_back(input);
    }
  }
  return needed_by;
}

}  // namespace

absl::StatusOr<StepRelaxation> StepRelaxation::Build(const PlanningContext& context,
                                                     const RelaxationOptions& options) {
  const ir::Graph& graph = context.graph();
  const std::vector<ir::NodeId>& schedule = context.schedule();
  const int steps = static_cast<int>(schedule.size());
  const int saved = static_cast<int>(context.saved().size());
  if (options.exact_limits && (saved > kMaxRelaxationSavedTensors || steps > kMaxRelaxationSteps)) {
    return absl::InvalidArgumentError(fmt::format(
        "the graph is too large for the exact policy: {} saved tensors and {} schedule steps, "
        "where it takes at most {} and {}",
        saved, steps, kMaxRelaxationSavedTensors, kMaxRelaxationSteps));
  }
  StepRelaxation relaxation(context);
  LinearProgram& lp = relaxation.program_;

  std::vector<double> duration(static_cast<size_t>(steps));  // microseconds
  int first_backward = steps;
  for (int s = 0; s < steps; ++s) {
    const ir::NodeId node = schedule[static_cast<size_t>(s)];
    duration[static_cast<size_t>(s)] = context.simulator().node_seconds(node) * kMicroseconds;
    if (first_backward == steps && graph.node(node).phase != ir::Phase::kForward) {
      first_backward = s;
    }
  }
  if (first_backward == 0 || first_backward == steps) {
    return absl::InvalidArgumentError(
        "the exact policy needs a training graph: forward steps, then backward ones");
  }

  // Columns: when each node starts, when the step ends, and the decisions.
  for (int s = 0; s < steps; ++s) {
    relaxation.start_column_.push_back(lp.AddColumn({.name = fmt::format("start_{}", s)}));
  }
  relaxation.end_column_ = lp.AddColumn({.name = "step", .objective = 1});

  ASSIGN_OR_RETURN(const std::vector<int64_t> kept_bytes, KeptBytesPerStep(context));
  const int64_t budget = context.tensor_budget_bytes();
  relaxation.over_budget_ = OverBudgetSteps(context, kept_bytes, options);

  program::Plan pins = context.KeepAll("pins");
  for (const autodiff::SavedTensor& tensor : context.saved()) {
    const ir::ValueId value = tensor.value;
    Tensor t;
    t.value = value;
    t.bytes = tensor.bytes;
    t.producer_step = context.step_of(tensor.producer);
    t.last_forward_step = context.last_forward_read(value);
    t.first_backward_step = context.first_backward_read(value);
    const std::string name = graph.value(value).name;
    const program::Decision pinned = pins.decision(value);
    const ir::Node& producer = graph.node(tensor.producer);
    const bool pinned_by_graph =
        producer.attrs.Has(program::kMemoryAttr) && producer.outputs.front() == value;
    auto decision_column = [&](std::string_view what, program::Decision decision) {
      const double fixed = pinned_by_graph ? (pinned == decision ? 1 : 0) : -1;
      return lp.AddColumn({.name = fmt::format("{}_{}", what, name),
                           .lower = fixed < 0 ? 0 : fixed,
                           .upper = fixed < 0 ? 1 : fixed,
                           .integer = options.integer_decisions});
    };
    if (context.CanSpill(value)) {
      t.spill = decision_column("spill", program::Decision::kSpill);
    }
    if (program::CanRecompute(graph, value)) {
      t.recompute = decision_column("recompute", program::Decision::kRecompute);
    }
    if (t.spill < 0 && t.recompute < 0) continue;
    if (t.spill >= 0 && t.recompute >= 0) {
      lp.AddRow({.name = fmt::format("one_decision_{}", name),
                 .terms = {{t.spill, 1}, {t.recompute, 1}},
                 .upper = 1});
    }
    if (t.spill >= 0) {
      for (int q : relaxation.over_budget_) {
        if (q <= t.last_forward_step || q >= t.first_backward_step) continue;
        const int column = lp.AddColumn({.name = fmt::format("absent_{}_{}", name, q), .upper = 1});
        t.absent.emplace_back(q, column);
        // Absent through a spill only if spilled.
        lp.AddRow({.name = fmt::format("absent_if_spilled_{}_{}", name, q),
                   .terms = {{column, 1}, {t.spill, -1}},
                   .upper = 0});
      }
    }
    relaxation.tensors_.push_back(std::move(t));
  }
  const std::vector<Tensor>& tensors = relaxation.tensors_;
  const std::vector<int>& start = relaxation.start_column_;

  // The compute stream runs the schedule in order: each node after the last.
  for (int s = 0; s + 1 < steps; ++s) {
    lp.AddRow(
        {.name = fmt::format("order_{}", s),
         .terms = {{start[static_cast<size_t>(s + 1)], 1}, {start[static_cast<size_t>(s)], -1}},
         .lower = duration[static_cast<size_t>(s)]});
  }
  lp.AddRow({.name = "order_end",
             .terms = {{relaxation.end_column_, 1}, {start.back(), -1}},
             .lower = duration.back()});

  // What recomputing a tensor re-runs at least: its producer, and the
  // forward nodes of every input it needs that no plan keeps past the
  // forward pass (a value read by forward nodes only is freed after its last
  // reader), back to saved tensors and graph inputs. A node that only one
  // recomputable tensor needs is charged to it; one that several need is
  // re-run at least once if any of them is recomputed (a `rebuilt` column).
  std::vector<double> recompute_us(tensors.size(), 0);
  std::vector<std::pair<int, double>> shared_rebuilds;  // (column, microseconds)
  {
    std::vector<size_t> recomputable;  // indices into tensors
    std::vector<ir::NodeId> producers;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].recompute < 0) continue;
      const ir::NodeId producer = schedule[static_cast<size_t>(tensors[i].producer_step)];
      recomputable.push_back(i);
      producers.push_back(producer);
      recompute_us[i] = context.simulator().node_seconds(producer) * kMicroseconds;
    }
    for (const auto& [node, needers] : UnkeptInputs(context, producers)) {
      const double us = context.simulator().node_seconds(node) * kMicroseconds;
      std::vector<size_t> users;
      for (size_t k : needers) users.push_back(recomputable[k]);
      if (users.size() == 1) {
        recompute_us[users.front()] += us;
        continue;
      }
      const int rebuilt =
          lp.AddColumn({.name = fmt::format("rebuilt_{}", graph.node(node).name), .upper = 1});
      for (size_t i : users) {
        lp.AddRow({.name = fmt::format("rebuilt_{}_for_{}", graph.node(node).name,
                                       graph.value(tensors[i].value).name),
                   .terms = {{rebuilt, 1}, {tensors[i].recompute, -1}},
                   .lower = 0});
      }
      shared_rebuilds.emplace_back(rebuilt, us);
      relaxation.rebuilt_.push_back({rebuilt, std::move(users)});
    }
  }

  // Recomputation runs on the compute stream after the forward pass and
  // before the first backward reader of what it rebuilds: a node starts no
  // earlier than the forward pass's end, the backward nodes before it and
  // every recomputation its own and earlier readers needed.
  {
    const int last_forward = first_backward - 1;
    double backward_before = duration[static_cast<size_t>(last_forward)];
    std::map<int, std::vector<size_t>> by_reader;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].recompute >= 0) by_reader[tensors[i].first_backward_step].push_back(i);
    }
    std::vector<std::pair<int, double>> recomputed;
    int s = first_backward;
    for (const auto& [reader, readers] : by_reader) {
      for (; s < reader; ++s) backward_before += duration[static_cast<size_t>(s)];
      for (size_t i : readers) recomputed.emplace_back(tensors[i].recompute, -recompute_us[i]);
      LinearProgram::Row row{.name = fmt::format("recompute_before_{}", reader),
                             .terms = recomputed,
                             .lower = backward_before};
      row.terms.emplace_back(start[static_cast<size_t>(reader)], 1);
      row.terms.emplace_back(start[static_cast<size_t>(last_forward)], -1);
      lp.AddRow(std::move(row));
    }
    for (; s < steps; ++s) backward_before += duration[static_cast<size_t>(s)];
    LinearProgram::Row row{
        .name = "recompute_before_end", .terms = recomputed, .lower = backward_before};
    for (const auto& [column, us] : shared_rebuilds) row.terms.emplace_back(column, -us);
    row.terms.emplace_back(relaxation.end_column_, 1);
    row.terms.emplace_back(start[static_cast<size_t>(last_forward)], -1);
    lp.AddRow(std::move(row));
  }

  // The spilled tensors that may be absent at each over-budget step.
  struct Absent {
    const Tensor* tensor;
    int column;
  };
  std::map<int, std::vector<Absent>> absent_at;
  for (const Tensor& t : tensors) {
    for (const auto& [step, column] : t.absent) absent_at[step].push_back({&t, column});
  }

  // Memory: at the start of each over-budget step's node, what is absent,
  // spilled or recomputed, must bring the kept bytes within the budget. A
  // recomputed tensor counts as absent from its last forward reader's step
  // on: that node may write its output over the tensor, so a plan need not
  // hold both at the step's start, as the kept bytes do.
  for (int q : relaxation.over_budget_) {
    LinearProgram::Row row{
        .name = fmt::format("memory_{}", q),
        .terms = {},
        .lower = static_cast<double>(kept_bytes[static_cast<size_t>(q)] - budget) / kKiB};
    for (const Tensor& t : tensors) {
      if (t.recompute < 0 || q < t.last_forward_step || q >= t.first_backward_step) continue;
      row.terms.emplace_back(t.recompute, static_cast<double>(t.bytes) / kKiB);
    }
    for (const Absent& absent : absent_at[q])
      row.terms.emplace_back(absent.column, static_cast<double>(absent.tensor->bytes) / kKiB);
    lp.AddRow(std::move(row));
  }

  // The copy streams. A tensor absent at step q's start was copied out, on
  // the d2h stream, between its producer's end and then; it is fetched back,
  // on the h2d stream, between then and its first backward reader. Each
  // stream runs one copy at a time, so the copies that must fit into one
  // window take at least their summed time.
  std::set<int> producer_steps;
  std::set<int> reader_steps;
  for (const Tensor& t : tensors) {
    if (t.absent.empty()) continue;
    producer_steps.insert(t.producer_step);
    reader_steps.insert(t.first_backward_step);
  }
  // A reduced program keeps some of the windows: each one alone is valid.
  producer_steps = Spread(producer_steps, options.max_window_steps);
  reader_steps = Spread(reader_steps, options.max_window_steps);
  auto copy_us = [&](const Tensor& t, analysis::CopyDirection direction) {
    return context.simulator().copy_seconds(t.bytes, direction) * kMicroseconds;
  };
  for (int q : relaxation.over_budget_) {
    for (int p : producer_steps) {
      if (p >= q) break;
      LinearProgram::Row row{.name = fmt::format("d2h_{}_{}", p, q),
                             .terms = {},
                             .lower = duration[static_cast<size_t>(p)]};
      for (const Absent& absent : absent_at[q]) {
        if (absent.tensor->producer_step < p) continue;
        row.terms.emplace_back(absent.column,
                               -copy_us(*absent.tensor, analysis::CopyDirection::kDeviceToHost));
      }
      if (row.terms.empty()) continue;
      row.terms.emplace_back(start[static_cast<size_t>(q)], 1);
      row.terms.emplace_back(start[static_cast<size_t>(p)], -1);
      lp.AddRow(std::move(row));
    }
    for (int s : reader_steps) {
      if (s <= q) continue;
      LinearProgram::Row row{.name = fmt::format("h2d_{}_{}", q, s), .terms = {}, .lower = 0};
      for (const Absent& absent : absent_at[q]) {
        if (absent.tensor->first_backward_step > s) continue;
        row.terms.emplace_back(absent.column,
                               -copy_us(*absent.tensor, analysis::CopyDirection::kHostToDevice));
      }
      if (row.terms.empty()) continue;
      row.terms.emplace_back(start[static_cast<size_t>(s)], 1);
      row.terms.emplace_back(start[static_cast<size_t>(q)], -1);
      lp.AddRow(std::move(row));
    }
  }
  return relaxation;
}

std::vector<double> StepRelaxation::PointOf(const Evaluation& evaluation) const {
  const program::Program& program = evaluation.program;
  const sim::SimulationResult& simulation = evaluation.simulation;
  SPILLWAY_CHECK(simulation.timings.size() == program.instructions.size(),
                 "the evaluation was simulated with timings");
  std::vector<double> point(program_.columns().size(), 0);
  point[static_cast<size_t>(end_column_)] = simulation.step_time_s * kMicroseconds;

  // Where each value first lived on the device (its producer's output
  // buffer), when it left the device (that buffer freed or written over),
  // and when a copy of it came back (fetched or recomputed).
  constexpr double kNever = kInfinity;
  std::map<ir::ValueId, program::BufferId> original;
  std::map<program::BufferId, ir::ValueId> holder;  // what each buffer holds now
  std::map<ir::ValueId, double> gone_at;            // first freed or written over
  std::map<ir::ValueId, double> back_at;
  for (size_t k = 0; k < program.instructions.size(); ++k) {
    const program::Instruction& instruction = program.instructions[k];
    const double time_us = simulation.timings[k].start_s * kMicroseconds;
    switch (instruction.kind) {
      case program::InstructionKind::kCompute: {
        const int step = context_->step_of(instruction.node);
        point[static_cast<size_t>(start_column_[static_cast<size_t>(step)])] = time_us;
        const ir::Node& node = context_->graph().node(instruction.node);
        for (size_t o = 0; o < node.outputs.size() && o < instruction.writes.size(); ++o) {
          const program::BufferId buffer = instruction.writes[o];
          if (buffer == program::kNoBuffer) continue;
          original.emplace(node.outputs[o], buffer);
          // Written over a dead input (donation): the value it held is gone
          // from the device from now on, as if freed.
          auto held = holder.find(buffer);
          if (held != holder.end() && held->second != node.outputs[o]) {
            gone_at.emplace(held->second, time_us);
          }
          holder[buffer] = node.outputs[o];
        }
        break;
      }
      case program::InstructionKind::kFree: {
        auto held = holder.find(instruction.buffer);
        if (held != holder.end()) gone_at.emplace(held->second, time_us);
        holder.erase(instruction.buffer);
        break;
      }
      case program::InstructionKind::kAlloc: {
        const program::Buffer& buffer = program.buffer(instruction.buffer);
        if (buffer.memory != program::Memory::kDevice || buffer.persistent) break;
        auto it = original.find(buffer.value);
        if (it != original.end() && it->second != buffer.id && !back_at.contains(buffer.value)) {
          back_at[buffer.value] = time_us;
        }
        break;
      }
      default:
        break;
    }
  }
  for (const Rebuilt& rebuilt : rebuilt_) {
    for (size_t i : rebuilt.users) {
      if (evaluation.plan.decision(tensors_[i].value) == program::Decision::kRecompute) {
        point[static_cast<size_t>(rebuilt.column)] = 1;
      }
    }
  }
  for (const Tensor& t : tensors_) {
    const program::Decision decision = evaluation.plan.decision(t.value);
    if (decision == program::Decision::kRecompute && t.recompute >= 0) {
      point[static_cast<size_t>(t.recompute)] = 1;
    }
    if (decision != program::Decision::kSpill || t.spill < 0) continue;
    point[static_cast<size_t>(t.spill)] = 1;
    const auto freed = gone_at.find(t.value);
    const double gone = freed == gone_at.end() ? kNever : freed->second;
    const auto back = back_at.find(t.value);
    const double returned = back == back_at.end() ? kNever : back->second;
    for (const auto& [step, column] : t.absent) {
      const double at = point[static_cast<size_t>(start_column_[static_cast<size_t>(step)])];
      point[static_cast<size_t>(column)] = gone <= at && at < returned ? 1 : 0;
    }
  }
  return point;
}

double StepRelaxation::RelativeViolation(const std::vector<double>& point,
                                         std::string* worst) const {
  return program_.MaxViolation(point, worst) / (1 + point.at(static_cast<size_t>(end_column_)));
}

program::Plan StepRelaxation::PlanOf(const std::vector<double>& point) const {
  program::Plan plan = context_->KeepAll("optimal");
  for (const Tensor& t : tensors_) {
    if (t.recompute >= 0 && point[static_cast<size_t>(t.recompute)] > 0.5) {
      plan.Recompute(t.value);
    } else if (t.spill >= 0 && point[static_cast<size_t>(t.spill)] > 0.5) {
      int last_absent = -1;
      for (const auto& [step, column] : t.absent) {
        if (point[static_cast<size_t>(column)] > 0.5) last_absent = step;
      }
      plan.Spill(t.value, last_absent < 0 ? -1 : last_absent + 1);
    }
  }
  return plan;
}

PlanResult::Bound StepRelaxation::BoundOf(const SolverResult& solved) const {
  PlanResult::Bound bound;
  bound.solved = solved.status == SolverResult::Status::kOptimal ||
                 solved.status == SolverResult::Status::kInfeasible;
  // Every plan runs every node: none's step is a bound too, and the only one
  // when the solver stopped before proving anything better.
  bound.step_s = solved.status == SolverResult::Status::kInfeasible
                     ? kInfinity
                     : std::max(Seconds(solved.bound), context_->ideal_step_time_s());
  bound.solve_s = solved.seconds;
  bound.columns = static_cast<int>(program_.columns().size());
  bound.rows = static_cast<int>(program_.rows().size());
  return bound;
}

absl::StatusOr<PlanResult::Bound> LowerBoundOnStep(const PlanningContext& context,
                                                   const StepBoundOptions& options) {
  ASSIGN_OR_RETURN(const StepRelaxation relaxation,
                   StepRelaxation::Build(context, options.relaxation));
  ASSIGN_OR_RETURN(
      const SolverResult solved,
      SolveMilp(relaxation.program(), {.time_limit_s = options.time_limit_s, .start = {}}));
  return relaxation.BoundOf(solved);
}

}  // namespace spillway::planner
