#include "fuzz/file_checks.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "analysis/hardware.h"
#include "fmt/format.h"
#include "nodelink/node_link.h"
#include "support/checked_math.h"
#include "support/npy.h"
#include "support/status_macros.h"
#include "train/checkpoint.h"

namespace spillway::fuzz {
namespace {

absl::Status Broken(std::string_view what) {
  return absl::InternalError(fmt::format("reader contract broken: {}", what));
}

}  // namespace

absl::StatusOr<bool> CheckNpyBytes(std::string_view bytes) {
  const absl::StatusOr<NpyArray> array = ParseNpy(bytes, "fuzz.npy");
  if (!array.ok()) return false;
  std::optional<int64_t> expected = NpyDTypeSize(array->dtype);
  for (int64_t dim : array->shape) {
    if (dim < 0) return Broken(fmt::format("a negative dimension {}", dim));
    if (expected) expected = CheckedMul(*expected, dim);
  }
  if (!expected || *expected != static_cast<int64_t>(array->data.size())) {
    return Broken(fmt::format("{} data bytes for its shape", array->data.size()));
  }
  const std::string again = SerializeNpy(array->dtype, array->shape, array->data);
  const absl::StatusOr<NpyArray> reread = ParseNpy(again, "round trip");
  if (!reread.ok())
    return Broken(fmt::format("its own output does not parse: {}", StatusMessage(reread.status())));
  if (reread->dtype != array->dtype || reread->shape != array->shape ||
      reread->data != array->data) {
    return Broken("a round trip through SerializeNpy changes the array");
  }
  return true;
}

absl::StatusOr<bool> CheckHardwareProfileText(std::string_view text) {
  const absl::StatusOr<analysis::HardwareProfile> profile = analysis::ParseHardwareProfile(text);
  if (!profile.ok()) return false;
  if (absl::Status valid = analysis::ValidateHardwareProfile(*profile); !valid.ok()) {
    return Broken(fmt::format("a parsed profile fails validation: {}", StatusMessage(valid)));
  }
  const absl::StatusOr<analysis::HardwareProfile> reread =
      analysis::ParseHardwareProfile(analysis::HardwareProfileToJson(*profile));
  if (!reread.ok()) {
    return Broken(fmt::format("its own JSON does not parse: {}", StatusMessage(reread.status())));
  }
  if (!(*reread == *profile)) return Broken("a round trip through JSON changes the profile");
  return true;
}

// An accepted graph is a schedule of opaque nodes in node order (the file's
// order, or the stable topological one), each with one output of the file's
// size and a finite, non-negative time; its phases run in order, and a
// graph without phases is cut once, forward up to the cut.
absl::StatusOr<bool> CheckNodeLinkText(std::string_view text) {
  const absl::StatusOr<nodelink::CostedGraph> costed = nodelink::ParseNodeLinkGraph(text, {});
  if (!costed.ok()) return false;
  const ir::Graph& graph = costed->graph;
  if (costed->node_seconds.size() != static_cast<size_t>(graph.num_nodes())) {
    return Broken(
        fmt::format("{} times for {} nodes", costed->node_seconds.size(), graph.num_nodes()));
  }
  const std::vector<ir::NodeId> order = graph.TopologicalOrder();
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<ir::NodeId>(i)) return Broken("the schedule is not the node order");
  }
  if (order.size() != static_cast<size_t>(graph.num_nodes())) return Broken("a cycle was accepted");
  for (const ir::Node& node : graph.nodes()) {
    const double seconds = costed->node_seconds[static_cast<size_t>(node.id)];
    if (!std::isfinite(seconds) || seconds < 0) {
      return Broken(fmt::format("node '{}' takes {} s", node.name, seconds));
    }
    if (node.op != ir::OpKind::kOpaque || node.outputs.size() != 1 ||
        graph.value(node.outputs[0]).type.bytes() != node.attrs.Int("bytes")) {
      return Broken(fmt::format("node '{}' is not one opaque output of its size", node.name));
    }
    if (node.id > 0 && node.phase < graph.node(node.id - 1).phase) {
      return Broken(fmt::format("node '{}' runs a phase out of order", node.name));
    }
    if (!costed->phases_given && (node.phase == ir::Phase::kForward) != (node.id <= costed->cut)) {
      return Broken(fmt::format("node '{}' is on the wrong side of the cut", node.name));
    }
  }
  if (graph.outputs().empty()) return Broken("a graph with no outputs");
  return true;
}

absl::StatusOr<bool> CheckCheckpointBytes(std::string_view bytes) {
  const absl::StatusOr<train::Checkpoint> checkpoint = train::ParseCheckpoint(bytes, "fuzz.ckpt");
  if (!checkpoint.ok()) return false;
  for (const train::CheckpointTensor& tensor : checkpoint->tensors) {
    const std::optional<int64_t> size = tensor.type.Bytes();
    if (!size || *size != static_cast<int64_t>(tensor.bytes.size())) {
      return Broken(
          fmt::format("tensor '{}' holds {} bytes for its type", tensor.name, tensor.bytes.size()));
    }
  }
  return true;
}

int AbortIfBroken(const absl::StatusOr<bool>& checked) {
  if (checked.ok()) return 0;
  std::fprintf(stderr, "%s\n", checked.status().ToString().c_str());
  std::abort();
}

}  // namespace spillway::fuzz
