#include "ir/verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ir/text_format.h"
#include "support/status_macros.h"

// Each rejection test breaks one rule on purpose, through the text format or
// by editing a node (mutable_node is how passes rewrite graphs, so it is how a
// buggy pass would break one). Values cannot be edited through the Graph API,
// so the value-side rules (graph inputs are never intermediate, produced values
// always are, value names are unique) cannot be broken in a test; the verifier
// checks them anyway, for whatever edits graphs in the future.

namespace spillway::ir {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Graph Parse(std::string_view text) {
  absl::StatusOr<Graph> graph = ParseGraph(text);
  EXPECT_TRUE(graph.ok()) << StatusMessage(graph.status());
  return graph.ok() ? *std::move(graph) : Graph("parse_failed");
}

std::string Problems(const Graph& graph) {
  absl::Status status = VerifyGraph(graph);
  EXPECT_FALSE(status.ok()) << "verified:\n" << PrintGraph(graph);
  return std::string(StatusMessage(status));
}

// x -> a -> b, both relu.
Graph TwoRelus() {
  return Parse(
      "graph g {\n"
      "  input %x: f32[2,3]\n"
      "  %a: f32[2,3] = relu(%x)\n"
      "  %b: f32[2,3] = relu(%a)\n"
      "  output %b\n"
      "}\n");
}

TEST(VerifierTest, AcceptsAnEmptyGraph) { EXPECT_TRUE(VerifyGraph(Graph()).ok()); }

TEST(VerifierTest, AcceptsATrainingBlock) {
  // Conv 3x3 with padding 1 keeps 8x8; batch norm in training mode has five
  // outputs; the update writes w and its momentum in place.
  Graph graph = Parse(
      "graph block {\n"
      "  input %x: f32[1,8,8,16] nhwc\n"
      "  param %w: f32[16,3,3,16]\n"
      "  param %gamma: f32[16]\n"
      "  param %beta: f32[16]\n"
      "  buffer %rm: f32[16]\n"
      "  buffer %rv: f32[16]\n"
      "  state %mom: f32[16,3,3,16]\n"
      "  input %dy: f32[1,8,8,16] nhwc\n"
      "  %conv: f32[1,8,8,16] nhwc = conv2d(%x, %w) {pads=[1,1,1,1], strides=[1,1]}\n"
      "  %bn: f32[1,8,8,16] nhwc, %bn.saved_mean: f32[16], %bn.saved_inv_std: f32[16], "
      "%bn.running_mean: f32[16], %bn.running_var: f32[16] = "
      "batch_norm(%conv, %gamma, %beta, %rm, %rv) {epsilon=1e-05, momentum=0.1, training=true}\n"
      "  %y: f32[1,8,8,16] nhwc = relu(%bn)\n"
      "  %dconv: f32[1,8,8,16] nhwc = relu_backward(%dy, %y) @backward\n"
      "  %dw: f32[16,3,3,16] = conv2d_backward_weight(%dconv, %x) "
      "{kernel=[3,3], pads=[1,1,1,1], strides=[1,1]} @backward\n"
      "  %w.new: f32[16,3,3,16], %mom.new: f32[16,3,3,16] = sgd_update(%w, %dw, %mom) "
      "{lr=0.1, momentum=0.9} @update after(dconv)\n"
      "  output %y\n"
      "}\n");
  absl::Status status = VerifyGraph(graph);
  EXPECT_TRUE(status.ok()) << StatusMessage(status);
}

TEST(VerifierTest, AcceptsAGraphBuiltWithInference) {
  Graph graph("mlp");
  ValueId x = graph.AddInput("x", F32({8, 4}));
  ValueId w = graph.AddInput("w", F32({3, 4}), ValueKind::kParameter);
  absl::StatusOr<NodeId> fc = graph.AddNode(OpKind::kLinear, {x, w}, {}, "fc");
  ASSERT_TRUE(fc.ok()) << StatusMessage(fc.status());
  graph.AddOutput(graph.node(*fc).outputs[0]);
  absl::Status status = VerifyGraph(graph);
  EXPECT_TRUE(status.ok()) << StatusMessage(status);
}

TEST(VerifierTest, RejectsMissingInputValue) {
  Graph graph = TwoRelus();
  graph.mutable_node(1).inputs.push_back(42);
  std::string problems = Problems(graph);
  EXPECT_THAT(problems, HasSubstr("node 'b' (relu): input 1 refers to value 42, which does not "
                                  "exist"));
  // Inference is skipped for that node: no follow-on input-count complaint.
  EXPECT_THAT(problems, Not(HasSubstr("expects")));
}

TEST(VerifierTest, RejectsMissingControlInput) {
  Graph graph = TwoRelus();
  graph.mutable_node(0).control_inputs.push_back(7);
  EXPECT_THAT(Problems(graph),
              HasSubstr("node 'a' (relu): control input refers to node 7, which does not exist"));
}

TEST(VerifierTest, RejectsMissingGraphOutput) {
  Graph graph = TwoRelus();
  graph.AddOutput(99);
  // Output 0 is %b; the broken one is output 1.
  EXPECT_THAT(Problems(graph),
              HasSubstr("graph output 1 refers to value 99, which does not exist"));
}

TEST(VerifierTest, RejectsValueProducedByTwoNodes) {
  Graph graph = TwoRelus();
  ValueId a = graph.node(0).outputs[0];
  graph.mutable_node(1).outputs.push_back(a);
  std::string problems = Problems(graph);
  EXPECT_THAT(problems,
              HasSubstr("node 'b' (relu): lists %a as output 1, but %a is output 0 of node 'a' "
                        "(relu)"));
  EXPECT_THAT(problems, HasSubstr("node 'b' (relu): declares 2 outputs, but the op has 1"));
}

TEST(VerifierTest, RejectsGraphInputListedAsANodeOutput) {
  Graph graph = TwoRelus();
  graph.mutable_node(0).outputs = {graph.inputs()[0]};
  std::string problems = Problems(graph);
  EXPECT_THAT(problems, HasSubstr("node 'a' (relu): lists %x as output 0, but %x is a graph "
                                  "input"));
  // %a is left claiming a producer that no longer lists it.
  EXPECT_THAT(problems, HasSubstr("value %a claims to be output 0 of node 'a' (relu), which does "
                                  "not list it there"));
}

TEST(VerifierTest, RejectsDuplicateNodeNames) {
  Graph graph = TwoRelus();
  graph.mutable_node(1).name = "a";
  EXPECT_THAT(Problems(graph), HasSubstr("node name 'a' is used by nodes 0 and 1"));
}

TEST(VerifierTest, RejectsADataCycleAndNamesItsNodes) {
  // Forward references let the text close a loop: a reads b, b reads a.
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %a: f32[2] = add(%x, %b)\n"
      "  %b: f32[2] = relu(%a)\n"
      "  %c: f32[2] = relu(%x)\n"
      "}\n");
  std::string problems = Problems(graph);
  EXPECT_EQ(problems, "cycle through nodes 'a' -> 'b' -> 'a'");
}

TEST(VerifierTest, RejectsAControlCycle) {
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %a: f32[2] = relu(%x) after(b)\n"
      "  %b: f32[2] = relu(%a)\n"
      "}\n");
  EXPECT_EQ(Problems(graph), "cycle through nodes 'a' -> 'b' -> 'a'");
}

TEST(VerifierTest, RejectsANodeThatMustRunAfterItself) {
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %a: f32[2] = relu(%x) after(a)\n"
      "}\n");
  EXPECT_EQ(Problems(graph), "cycle through nodes 'a' -> 'a'");
}

TEST(VerifierTest, RejectsWrongInputCount) {
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %y: f32[2] = relu(%x, %x)\n"
      "}\n");
  EXPECT_EQ(Problems(graph), "node 'y' (relu): expects 1 inputs, got 2");
}

TEST(VerifierTest, RejectsMissingRequiredAttribute) {
  // max_pool's kernel has no default.
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[1,4,4,2] nhwc\n"
      "  %p: f32[1,2,2,2] nhwc = max_pool(%x)\n"
      "}\n");
  std::string problems = Problems(graph);
  EXPECT_THAT(problems, HasSubstr("node 'p' (max_pool): "));
  EXPECT_THAT(problems, HasSubstr("kernel"));
}

TEST(VerifierTest, RejectsAttributeOfWrongLength) {
  // strides is a list over [h, w]; one entry is not enough.
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[1,8,8,4] nhwc\n"
      "  param %w: f32[4,3,3,4]\n"
      "  %c: f32[1,6,6,4] nhwc = conv2d(%x, %w) {strides=[1]}\n"
      "}\n");
  std::string problems = Problems(graph);
  EXPECT_THAT(problems, HasSubstr("node 'c' (conv2d): "));
  EXPECT_THAT(problems, HasSubstr("strides"));
}

TEST(VerifierTest, RejectsWrongDeclaredShape) {
  // A 3x3 window without padding turns 8x8 into 6x6, not 8x8.
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[1,8,8,16] nhwc\n"
      "  param %w: f32[16,3,3,16]\n"
      "  %y: f32[1,8,8,16] nhwc = conv2d(%x, %w)\n"
      "}\n");
  EXPECT_EQ(Problems(graph),
            "node 'y' (conv2d): output 0 %y is declared f32[1,8,8,16] nhwc but the op infers "
            "f32[1,6,6,16] nhwc");
}

TEST(VerifierTest, RejectsWrongDeclaredLayout) {
  // relu keeps its input's layout; the declaration drops "nhwc".
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[1,2,2,3] nhwc\n"
      "  %y: f32[1,2,2,3] = relu(%x)\n"
      "}\n");
  EXPECT_EQ(Problems(graph),
            "node 'y' (relu): output 0 %y is declared f32[1,2,2,3] but the op infers "
            "f32[1,2,2,3] nhwc");
}

TEST(VerifierTest, RejectsWrongOutputCount) {
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %y: f32[2], %extra: f32[2] = relu(%x)\n"
      "}\n");
  EXPECT_EQ(Problems(graph), "node 'y' (relu): declares 2 outputs, but the op has 1");
}

TEST(VerifierTest, ReportsEveryProblemOnItsOwnLine) {
  // Two independent mistakes: a wrong type on a and a missing graph output.
  Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %a: f32[3] = relu(%x)\n"
      "  %b: f32[2] = relu(%x)\n"
      "}\n");
  graph.AddOutput(17);
  EXPECT_EQ(Problems(graph),
            "node 'a' (relu): output 0 %a is declared f32[3] but the op infers f32[2]\n"
            "graph output 0 refers to value 17, which does not exist");
}

}  // namespace
}  // namespace spillway::ir
