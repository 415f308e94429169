// Structural and type checks of a Graph, run after parsing and after every pass.
#pragma once

#include "absl/status/status.h"
#include "ir/graph.h"

namespace spillway::ir {

// Checks that
//  - every data input, control input and graph output refers to an existing
//    value or node;
//  - values are in SSA form: each is a graph input (kind other than
//    intermediate, no producer) or the output of exactly one node (kind
//    intermediate, producer and output index matching the node's outputs);
//  - value names and node names are unique;
//  - data and control edges have no cycle;
//  - each node has the input count and attributes its op requires, and the
//    output types it declares are the ones the op registry infers.
// Returns OK or InvalidArgument listing every problem found, one per line, in
// a fixed order (graph inputs, values, nodes by id, cycles, graph outputs).
// Type inference is skipped for a node whose inputs do not exist, so one
// dangling id does not bury the report in follow-on errors.
absl::Status VerifyGraph(const Graph& graph);

}  // namespace spillway::ir
