// The text form of a Graph: a printer and a parser that round-trip exactly.
// docs/ir.md gives the grammar and an example.
//
//   graph block {
//     input %x: f32[1,8,8,16] nhwc
//     param %w: f32[16,3,3,16]
//     %y: f32[1,8,8,16] nhwc = conv2d(%x, %w) {pads=[1,1,1,1]}
//     node bn: %z: f32[1,8,8,16] nhwc = relu(%y) @backward after(other_node)
//     output %z
//   }
//
// Tests and tools read graphs in this form, run a pass and compare the printed
// result with the expected text, so the printer's output is canonical:
// PrintGraph(ParseGraph(text)) == text for every text PrintGraph wrote, and
// ParseGraph(PrintGraph(g)) rebuilds g with the same ids, names, types,
// attributes, phases, value kinds, control inputs and outputs.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::ir {

// The canonical text of a graph. Never fails: a broken graph (dangling ids)
// prints with placeholders that the parser rejects, so a dump of a graph the
// verifier refused is still readable.
std::string PrintGraph(const Graph& graph);

// Builds a graph from its text with the types the text declares; nothing is
// inferred or checked against the op registry (VerifyGraph does that). Values
// and nodes may be used before the line that defines them, so any graph the
// printer wrote reads back, even one a pass rewired out of creation order.
// Errors are InvalidArgument with "line:column: what was expected".
absl::StatusOr<Graph> ParseGraph(std::string_view text);

// ParseGraph followed by VerifyGraph: the usual way for tests to write a graph.
absl::StatusOr<Graph> ParseAndVerifyGraph(std::string_view text);

}  // namespace spillway::ir
