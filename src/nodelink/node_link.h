// Graphs that come with their own costs: a node-link JSON file (the form
// networkx's node_link_data writes, and in which rematerialization benchmarks
// publish their graphs) whose nodes carry a duration and an output size and
// whose links say who reads whom. Each node becomes one `opaque` node of the
// IR, named by the file's id, so the planner and the simulator work on it as
// on any training graph; nothing runs it.
//
// The file:
//   {"graph": {...}, "nodes": [{"id": ..., "duration": 0.002, "size": 1048576,
//                               "phase": "forward"}, ...],
//    "links": [{"source": ..., "target": ...}, ...]}     ("edges" also read)
// - duration: seconds (or the graph's time unit) the node takes; size: bytes
//   of its one output. Other attribute names can be given on the command line
//   or in the graph attributes `duration_attr` and `size_attr`; `time_unit`
//   ("s", "ms", "us") scales durations.
// - phase (optional, all nodes or none): "forward", "backward" or "update". A
//   file with phases is a training graph and is planned as it is: its saved
//   tensors are the forward values that backward nodes read. A file without
//   phases is a general DAG: it is cut once, after the step where keeping
//   everything needs the most memory, and the nodes up to the cut are its
//   forward pass. Its candidates are then the values live across that step.
// - order (optional graph attribute, a list of every id once): the schedule,
//   honoured as given; without it, a topological order that keeps the file's
//   node order where dependencies allow (forward nodes before backward ones).
// - outputs (optional graph attribute, a list of ids): values that leave the
//   step and so stay to its end; default: every node nothing reads.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::nodelink {

struct NodeLinkOptions {
  // Unset: the file's graph attribute of that name, else the default.
  std::optional<std::string> duration_attr;  // default "duration"
  std::optional<std::string> size_attr;      // default "size"
  std::optional<std::string> time_unit;      // "s" (default), "ms" or "us"
};

struct CostedGraph {
  ir::Graph graph{"graph"};
  // Seconds each node takes, by node id: the file's durations.
  std::vector<double> node_seconds;
  // Whether the file gave phases; if not, the forward pass ends at `cut`.
  bool phases_given = false;
  ir::NodeId cut = ir::kNoNode;
};

// Parses a node-link graph. Errors are one line and name the node or link at
// fault: malformed JSON, a missing or non-numeric attribute, a negative or
// non-finite duration or size, a duplicate id, a link to a missing node, a
// cycle, an order that is not a permutation of the nodes or breaks a
// dependency, phases on some nodes only or out of order.
absl::StatusOr<CostedGraph> ParseNodeLinkGraph(std::string_view json_text,
                                               const NodeLinkOptions& options,
                                               std::string name = "graph");

// Reads and parses a file (at most 1 GiB); errors start with the path.
absl::StatusOr<CostedGraph> LoadNodeLinkGraph(const std::string& path,
                                              const NodeLinkOptions& options);

}  // namespace spillway::nodelink
