#include <memory>

#include "analysis/summary.h"
#include "autodiff/training_graph.h"
#include "cli/commands.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "nlohmann/json.hpp"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::cli {
namespace {

struct InspectFlags {
  WorkloadFlags workload;
  std::string optimizer = "sgd";
  bool json = false;
};

nlohmann::json SummaryToJson(const InspectFlags& flags, const analysis::GraphSummary& s) {
  nlohmann::json largest = nlohmann::json::array();
  for (const analysis::SavedTensorSummary& t : s.largest_saved) {
    largest.push_back({{"name", t.name},
                       {"producer", t.producer},
                       {"op", t.op},
                       {"type", ir::TypeToString(t.type)},
                       {"bytes", t.bytes}});
  }
  return {
      {"workload", session::DescribeWorkload(flags.workload)},
      {"model", !flags.workload.graph.empty() ? flags.workload.graph
                : flags.workload.onnx.empty() ? flags.workload.model
                                              : flags.workload.onnx},
      {"optimizer", flags.workload.graph.empty() ? nlohmann::json(flags.optimizer) : nullptr},
      {"nodes",
       {{"forward", s.forward_nodes}, {"backward", s.backward_nodes}, {"update", s.update_nodes}}},
      {"parameters", s.parameters},
      {"parameter_bytes", s.parameter_bytes},
      {"buffer_bytes", s.buffer_bytes},
      {"optimizer_state_bytes", s.optimizer_state_bytes},
      {"input_bytes", s.input_bytes},
      {"forward_macs", s.forward_macs},
      {"forward_flops", s.forward_flops},
      {"backward_flops", s.backward_flops},
      {"update_flops", s.update_flops},
      {"saved_tensors", s.saved_tensors},
      {"saved_bytes", s.saved_bytes},
      {"peak_bytes", s.peak_bytes},
      {"peak_node", s.peak_node},
      {"peak_op", s.peak_op},
      {"peak_phase", std::string(ir::PhaseName(s.peak_phase))},
      {"peak_step", s.peak_step},
      {"steps", s.steps},
      {"largest_saved", largest},
  };
}

void PrintSummary(std::ostream& out, const InspectFlags& flags, const analysis::GraphSummary& s) {
  fmt::print(out, "Workload        {}{}\n", session::DescribeWorkload(flags.workload),
             flags.workload.graph.empty() ? fmt::format(" (optimizer {})", flags.optimizer) : "");
  fmt::print(out, "Nodes           {} forward, {} backward, {} update\n", s.forward_nodes,
             s.backward_nodes, s.update_nodes);
  fmt::print(out, "Parameters      {} ({}), optimizer state {}, buffers {}, inputs {}\n",
             FormatCount(static_cast<double>(s.parameters)), FormatBytes(s.parameter_bytes),
             FormatBytes(s.optimizer_state_bytes), FormatBytes(s.buffer_bytes),
             FormatBytes(s.input_bytes));
  fmt::print(out, "Forward         {}MAC, {}FLOP\n",
             FormatCount(static_cast<double>(s.forward_macs)),
             FormatCount(static_cast<double>(s.forward_flops)));
  fmt::print(out, "Backward        {}FLOP\n", FormatCount(static_cast<double>(s.backward_flops)));
  fmt::print(out, "Saved tensors   {} tensors, {}\n", s.saved_tensors, FormatBytes(s.saved_bytes));
  fmt::print(out, "Naive peak      {} at step {} of {}: {} ({}, {})\n", FormatBytes(s.peak_bytes),
             s.peak_step, s.steps, s.peak_node, s.peak_op, ir::PhaseName(s.peak_phase));
  if (s.largest_saved.empty()) return;
  fmt::print(out, "\nLargest saved tensors\n");
  fmt::print(out, "  {:>10}  {:<28} {:<20} {}\n", "size", "type", "op", "tensor");
  for (const analysis::SavedTensorSummary& t : s.largest_saved) {
    fmt::print(out, "  {:>10}  {:<28} {:<20} {}\n", FormatBytes(t.bytes), ir::TypeToString(t.type),
               t.op, t.name);
  }
}

}  // namespace

CommandRunner AddInspectCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "inspect",
      "Build a model's training graph and report its size, work, saved tensors and the "
      "memory peak of the naive schedule");
  auto flags = std::make_shared<InspectFlags>();
  AddWorkloadFlags(*command, flags->workload, GraphFiles::kAccepted);
  command->add_option("--optimizer", flags->optimizer, "Optimizer whose state is counted")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  command->add_flag("--json", flags->json, "Print the report as JSON (sizes in bytes)");
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    if (!flags->workload.graph.empty()) {
      // A graph with its own costs is already a whole step.
      if (command->count("--optimizer") > 0) {
        return absl::InvalidArgumentError(
            "--optimizer does not apply to --graph: the file is the whole step");
      }
      ASSIGN_OR_RETURN(const nodelink::CostedGraph costed, session::LoadGraphFile(flags->workload));
      const analysis::GraphSummary summary = analysis::Summarize(costed.graph);
      if (flags->json) {
        out << SummaryToJson(*flags, summary).dump(2) << "\n";
      } else {
        PrintSummary(out, *flags, summary);
      }
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(session::Workload workload, session::BuildWorkload(flags->workload));
    const ir::Graph& forward = workload.graph;
    autodiff::OptimizerOptions optimizer;
    optimizer.kind = flags->optimizer == "adamw" ? autodiff::OptimizerKind::kAdam
                                                 : autodiff::OptimizerKind::kSgd;
    ASSIGN_OR_RETURN(autodiff::TrainingGraph training,
                     autodiff::BuildTrainingGraph(forward, optimizer));
    const analysis::GraphSummary summary = analysis::Summarize(training.graph);
    if (flags->json) {
      out << SummaryToJson(*flags, summary).dump(2) << "\n";
    } else {
      PrintSummary(out, *flags, summary);
    }
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
