#include "planner/refetch.h"

#include <algorithm>

namespace spillway::planner {

PeakRefetcher::PeakRefetcher(const ir::Graph& graph, const std::vector<ir::NodeId>& schedule,
                             bool host_link)
    : graph_(graph),
      host_link_(host_link),
      reads_(program::ScheduleReads::Of(graph, schedule)),
      read_steps_(static_cast<size_t>(graph.num_values())) {
  for (int step = 0; step < static_cast<int>(schedule.size()); ++step) {
    for (ir::ValueId input : graph.node(schedule[static_cast<size_t>(step)]).inputs) {
      std::vector<int>& steps = read_steps_[static_cast<size_t>(input)];
      if (steps.empty() || steps.back() != step) steps.push_back(step);
    }
  }
}

std::optional<program::Plan> PeakRefetcher::DropAcrossPeak(const program::Plan& plan,
                                                           const program::Program& program) const {
  if (!host_link_) return std::nullopt;
  const int peak = program::LiveBytesPeakStep(program);
  program::Plan trial = plan;
  bool changed = false;
  for (const ir::Value& value : graph_.values()) {
    if (value.producer == ir::kNoNode) continue;
    const program::TensorPlan& tensor = plan.at(value.id);
    if (tensor.decision == program::Decision::kRecompute || tensor.refetch_after >= 0) continue;
    const size_t v = static_cast<size_t>(value.id);
    const int produced = reads_.step_of_node[static_cast<size_t>(value.producer)];
    const std::vector<int>& steps = read_steps_[v];
    const auto next = std::upper_bound(steps.begin(), steps.end(), peak);
    if (produced >= peak || next == steps.end()) continue;
    const int previous = next == steps.begin() ? produced : *std::prev(next);
    if (previous == peak) continue;  // read at the peak
    // Held at the peak: waiting for a later forward read, or fetched back for
    // the backward pass before the peak (a spilled tensor whose next read is
    // its first backward one is on the host then).
    const bool next_in_forward = *next <= reads_.last_forward_read[v];
    if (!next_in_forward && previous < reads_.first_backward_read[v]) continue;
    // Checked last: it looks through the graph's outputs.
    if (!program::CanSpillBetweenReads(graph_, value.id)) continue;
    trial.Spill(value.id, tensor.decision == program::Decision::kSpill ? tensor.fetch_step : -1,
                previous);
    changed = true;
  }
  if (!changed) return std::nullopt;
  return trial;
}

}  // namespace spillway::planner
