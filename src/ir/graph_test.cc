#include "ir/graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/status_macros.h"

namespace spillway::ir {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

NodeId AddRelu(Graph& graph, ValueId input, std::string name) {
  absl::StatusOr<NodeId> node = graph.AddNode(OpKind::kRelu, {input}, {}, std::move(name));
  EXPECT_TRUE(node.ok()) << StatusMessage(node.status());
  return node.ok() ? *node : kNoNode;
}

// A shape as a matrix: every axis but the last are rows, the last the
// columns; a vector is one row, a scalar one element.
TEST(TypesTest, AShapeAsAMatrixHasItsLastAxisForColumns) {
  EXPECT_EQ(AsMatrix({8, 32, 32, 64}).rows, 8 * 32 * 32);
  EXPECT_EQ(AsMatrix({8, 32, 32, 64}).columns, 64);
  EXPECT_EQ(AsMatrix({1000}).rows, 1);
  EXPECT_EQ(AsMatrix({1000}).columns, 1000);
  EXPECT_EQ(AsMatrix({}).rows, 1);
  EXPECT_EQ(AsMatrix({}).columns, 1);
}

TEST(GraphTest, TakenInputNamesGetNumericSuffixes) {
  Graph graph;
  ValueId first = graph.AddInput("x", F32({2}));
  ValueId second = graph.AddInput("x", F32({2}));
  ValueId third = graph.AddInput("x", F32({2}));
  EXPECT_EQ(graph.value(first).name, "x");
  EXPECT_EQ(graph.value(second).name, "x_1");
  EXPECT_EQ(graph.value(third).name, "x_2");
  EXPECT_EQ(graph.FindValue("x_1"), second);
  EXPECT_EQ(graph.FindValue("x_3"), std::nullopt);
}

TEST(GraphTest, NodeAndValueNamesAreSuffixedIndependently) {
  Graph graph;
  ValueId x = graph.AddInput("r", F32({2}));
  NodeId first = AddRelu(graph, x, "r");
  NodeId second = AddRelu(graph, x, "r");
  // The input took the value name "r", so the first relu's output is "r_1"
  // while the node itself is still "r"; node names are a separate namespace.
  EXPECT_EQ(graph.node(first).name, "r");
  EXPECT_EQ(graph.value(graph.node(first).outputs[0]).name, "r_1");
  EXPECT_EQ(graph.node(second).name, "r_1");
  EXPECT_EQ(graph.value(graph.node(second).outputs[0]).name, "r_2");
  EXPECT_EQ(graph.FindNode("r_1"), second);
}

TEST(GraphTest, ReferencesToValuesAndNodesStayValidAsTheGraphGrows) {
  // Gradient rules hold a forward node and its operand types while they emit
  // backward nodes; a vector-backed graph would move them on reallocation.
  Graph graph;
  ValueId x = graph.AddInput("x", F32({2, 3}));
  NodeId first = AddRelu(graph, x, "r");
  const Value& input = graph.value(x);
  const Node& node = graph.node(first);
  const TensorType& type = input.type;
  ValueId last = node.outputs[0];
  for (int i = 0; i < 4096; ++i) last = graph.node(AddRelu(graph, last, "r")).outputs[0];
  EXPECT_EQ(&graph.value(x), &input);
  EXPECT_EQ(&graph.node(first), &node);
  EXPECT_EQ(type.shape, (Shape{2, 3}));
  EXPECT_EQ(node.name, "r");
}

TEST(GraphTest, OutputsOfAMultiOutputOpAreNamedAfterTheNode) {
  Graph graph;
  ValueId param = graph.AddInput("w", F32({4}), ValueKind::kParameter);
  ValueId grad = graph.AddInput("dw", F32({4}));
  ValueId momentum = graph.AddInput("w.momentum", F32({4}), ValueKind::kOptimizerState);
  absl::StatusOr<NodeId> node =
      graph.AddNode(OpKind::kSgdUpdate, {param, grad, momentum}, {{"lr", 0.1}, {"momentum", 0.9}},
                    "step", Phase::kUpdate);
  ASSERT_TRUE(node.ok()) << StatusMessage(node.status());
  const Node& update = graph.node(*node);
  ASSERT_EQ(update.outputs.size(), 2u);
  EXPECT_EQ(graph.value(update.outputs[0]).name, "step");
  EXPECT_EQ(graph.value(update.outputs[1]).name, "step.momentum_buf");
  EXPECT_EQ(graph.value(update.outputs[1]).output_index, 1);
  EXPECT_EQ(graph.value(update.outputs[1]).producer, *node);
  EXPECT_EQ(update.phase, Phase::kUpdate);
}

TEST(GraphTest, UsersListsEachReaderOnceInNodeOrder) {
  Graph graph;
  ValueId x = graph.AddInput("x", F32({2}));
  absl::StatusOr<NodeId> square = graph.AddNode(OpKind::kMul, {x, x}, {}, "square");
  ASSERT_TRUE(square.ok());
  NodeId relu = AddRelu(graph, x, "relu");
  std::vector<std::vector<NodeId>> users = graph.Users();
  ASSERT_EQ(users.size(), 3u);  // x, square, relu
  // "square" reads x twice but is listed once.
  EXPECT_THAT(users[static_cast<size_t>(x)], ElementsAre(*square, relu));
  EXPECT_THAT(users[static_cast<size_t>(graph.node(relu).outputs[0])], IsEmpty());
}

TEST(GraphTest, TopologicalOrderBreaksTiesByNodeId) {
  Graph graph;
  ValueId x = graph.AddInput("x", F32({2}));
  NodeId a = AddRelu(graph, x, "a");
  NodeId b = AddRelu(graph, x, "b");
  NodeId c = AddRelu(graph, graph.node(a).outputs[0], "c");
  // a and b are both ready at the start; a has the smaller id. c waits for a
  // but has a larger id than b, so it comes last.
  EXPECT_THAT(graph.TopologicalOrder(), ElementsAre(a, b, c));
  EXPECT_EQ(graph.TopologicalOrder(), graph.TopologicalOrder());
}

TEST(GraphTest, TopologicalOrderFollowsControlInputs) {
  Graph graph;
  ValueId x = graph.AddInput("x", F32({2}));
  NodeId a = AddRelu(graph, x, "a");
  NodeId b = AddRelu(graph, x, "b");
  NodeId c = AddRelu(graph, x, "c");
  graph.AddControlInput(a, c);
  graph.AddControlInput(a, c);  // a repeated edge is stored once
  EXPECT_THAT(graph.node(a).control_inputs, ElementsAre(c));
  // Without the control edge the order would be a, b, c.
  EXPECT_THAT(graph.TopologicalOrder(), ElementsAre(b, c, a));
}

TEST(GraphTest, TopologicalOrderIsEmptyOnACycle) {
  Graph graph;
  ValueId x = graph.AddInput("x", F32({2}));
  NodeId a = AddRelu(graph, x, "a");
  NodeId b = AddRelu(graph, graph.node(a).outputs[0], "b");
  graph.AddControlInput(a, b);
  EXPECT_THAT(graph.TopologicalOrder(), IsEmpty());
}

TEST(GraphTest, InputsOfKindKeepsInputOrder) {
  Graph graph;
  ValueId image = graph.AddInput("image", Activation({1, 4, 4, 3}));
  ValueId w1 = graph.AddInput("w1", F32({3}), ValueKind::kParameter);
  ValueId mean = graph.AddInput("mean", F32({3}), ValueKind::kBuffer);
  ValueId w2 = graph.AddInput("w2", F32({3}), ValueKind::kParameter);
  ValueId labels = graph.AddInput("labels", I64({1}));
  EXPECT_THAT(graph.InputsOfKind(ValueKind::kParameter), ElementsAre(w1, w2));
  EXPECT_THAT(graph.InputsOfKind(ValueKind::kInput), ElementsAre(image, labels));
  EXPECT_THAT(graph.InputsOfKind(ValueKind::kBuffer), ElementsAre(mean));
  EXPECT_THAT(graph.InputsOfKind(ValueKind::kOptimizerState), IsEmpty());
}

TEST(GraphTest, AddNodeErrorNamesTheNodeAndOp) {
  Graph graph;
  ValueId a = graph.AddInput("a", F32({2, 3}));
  ValueId b = graph.AddInput("b", F32({4}));
  // [2,3] and [4] do not broadcast: the trailing dims 3 and 4 differ.
  absl::StatusOr<NodeId> sum = graph.AddNode(OpKind::kAdd, {a, b}, {}, "sum");
  ASSERT_FALSE(sum.ok());
  EXPECT_THAT(StatusMessage(sum.status()), HasSubstr("node 'sum' (add)"));
  EXPECT_EQ(graph.num_nodes(), 0);  // a failed node leaves the graph unchanged
  EXPECT_EQ(graph.num_values(), 2);
}

TEST(GraphTest, AddNodeRejectsMissingInputValue) {
  Graph graph;
  graph.AddInput("a", F32({2}));
  absl::StatusOr<NodeId> relu = graph.AddNode(OpKind::kRelu, {7}, {}, "r");
  ASSERT_FALSE(relu.ok());
  EXPECT_THAT(StatusMessage(relu.status()),
              HasSubstr("node 'r' (relu): input value 7 does not exist"));
}

TEST(GraphTest, AddNodeWithOutputsKeepsDeclaredTypes) {
  Graph graph;
  ValueId x = graph.AddInput("x", F32({2}));
  // The declared type is deliberately wrong for relu: nothing is inferred.
  NodeId node =
      graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "r", Phase::kBackward, {{"y", I64({5})}});
  const Value& y = graph.value(graph.node(node).outputs[0]);
  EXPECT_EQ(y.name, "y");
  EXPECT_EQ(y.type, I64({5}));
  EXPECT_EQ(y.kind, ValueKind::kIntermediate);
  EXPECT_EQ(graph.node(node).phase, Phase::kBackward);
}

}  // namespace
}  // namespace spillway::ir
