// Small training graphs written in the text format, shared by the tests of the
// program stage and the stages after it. Every tensor is f32[256]: 1 KiB, a
// multiple of the arena's 256-byte alignment, so byte counts read as KiB.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "autodiff/training_graph.h"
#include "fmt/format.h"
#include "ir/graph.h"
#include "ir/text_format.h"
#include "models/models.h"
#include "program/program.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::program::testing {

inline constexpr int64_t kKiB = 1024;

// A chain of three relus and its backward pass. The pins go on the forward
// nodes a, b and c (e.g. "{memory=\"spill\"}"). Schedule and saved tensors:
//   step 0  a = relu(w)
//   step 1  b = relu(a)
//   step 2  c = relu(b)
//   step 3  db = relu_backward(c, c)    reads c (as the incoming gradient too)
//   step 4  da = relu_backward(db, b)   reads b
//   step 5  dw = relu_backward(da, a)   reads a
// w is a parameter (persistent); dw is the graph's output.
inline std::string ChainText(std::string_view pin_a = "", std::string_view pin_b = "",
                             std::string_view pin_c = "") {
  return fmt::format(
      "graph chain {{\n"
      "  param %w: f32[256]\n"
      "  %a: f32[256] = relu(%w){}\n"
      "  %b: f32[256] = relu(%a){}\n"
      "  %c: f32[256] = relu(%b){}\n"
      "  %db: f32[256] = relu_backward(%c, %c) @backward\n"
      "  %da: f32[256] = relu_backward(%db, %b) @backward\n"
      "  %dw: f32[256] = relu_backward(%da, %a) @backward\n"
      "  output %dw\n"
      "}}\n",
      pin_a.empty() ? "" : fmt::format(" {{memory=\"{}\"}}", pin_a),
      pin_b.empty() ? "" : fmt::format(" {{memory=\"{}\"}}", pin_b),
      pin_c.empty() ? "" : fmt::format(" {{memory=\"{}\"}}", pin_c));
}

inline ir::Graph ParseOrDie(std::string_view text) {
  absl::StatusOr<ir::Graph> graph = ir::ParseAndVerifyGraph(text);
  SPILLWAY_CHECK(graph.ok(), "test graphs parse");
  return *std::move(graph);
}

// The training graph of a built-in model built with `options`.
inline autodiff::TrainingGraph TrainingModel(std::string_view name,
                                             const models::ModelOptions& options) {
  absl::StatusOr<ir::Graph> forward = models::BuildModel(name, options);
  EXPECT_TRUE(forward.ok()) << StatusMessage(forward.status());
  SPILLWAY_CHECK(forward.ok(), "built-in models build");
  absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
  SPILLWAY_CHECK(training.ok(), "built-in models train");
  return *std::move(training);
}

// The training graph of a built-in model at a small size: `image` pixels
// square for the image models, `seq_len` tokens and 2 layers for gpt2;
// `batch` samples.
inline autodiff::TrainingGraph TrainingModel(std::string_view name, int64_t image,
                                             int64_t seq_len = 16, int64_t batch = 1) {
  models::ModelOptions options;
  options.batch = batch;
  options.height = options.width = image;
  options.classes = 10;
  options.seq_len = seq_len;
  options.n_layer = 2;
  return TrainingModel(name, options);
}

// Indices of the instructions of one kind, in program order.
inline std::vector<size_t> IndicesOf(const Program& program, InstructionKind kind) {
  std::vector<size_t> found;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    if (program.instructions[i].kind == kind) found.push_back(i);
  }
  return found;
}

// The index of the compute instruction of the node named `node`.
inline size_t ComputeOf(const Program& program, std::string_view node) {
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    if (instruction.kind == InstructionKind::kCompute &&
        program.graph->node(instruction.node).name == node) {
      return i;
    }
  }
  ADD_FAILURE() << "no compute of " << node;
  return 0;
}

}  // namespace spillway::program::testing
