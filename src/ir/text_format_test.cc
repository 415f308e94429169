#include "ir/text_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "fmt/format.h"
#include "support/status_macros.h"

namespace spillway::ir {
namespace {

using ::testing::HasSubstr;

// Field-by-field equality, so a failure says which part differs.
void ExpectSameGraph(const Graph& expected, const Graph& actual) {
  EXPECT_EQ(expected.name(), actual.name());
  ASSERT_EQ(expected.num_values(), actual.num_values());
  for (const Value& value : expected.values()) {
    const Value& other = actual.value(value.id);
    SCOPED_TRACE("value " + value.name);
    EXPECT_EQ(value.id, other.id);
    EXPECT_EQ(value.name, other.name);
    EXPECT_EQ(value.type, other.type);
    EXPECT_EQ(value.kind, other.kind);
    EXPECT_EQ(value.producer, other.producer);
    EXPECT_EQ(value.output_index, other.output_index);
  }
  ASSERT_EQ(expected.num_nodes(), actual.num_nodes());
  for (const Node& node : expected.nodes()) {
    const Node& other = actual.node(node.id);
    SCOPED_TRACE("node " + node.name);
    EXPECT_EQ(node.name, other.name);
    EXPECT_EQ(node.op, other.op);
    EXPECT_EQ(node.attrs, other.attrs);
    EXPECT_EQ(node.inputs, other.inputs);
    EXPECT_EQ(node.control_inputs, other.control_inputs);
    EXPECT_EQ(node.outputs, other.outputs);
    EXPECT_EQ(node.phase, other.phase);
  }
  EXPECT_EQ(expected.inputs(), actual.inputs());
  EXPECT_EQ(expected.outputs(), actual.outputs());
}

Graph ParseOrDie(std::string_view text) {
  absl::StatusOr<Graph> graph = ParseGraph(text);
  EXPECT_TRUE(graph.ok()) << StatusMessage(graph.status());
  return graph.ok() ? *std::move(graph) : Graph("parse_failed");
}

// Printer output must read back and print to the same text.
void ExpectTextRoundTrips(std::string_view text) {
  Graph graph = ParseOrDie(text);
  EXPECT_EQ(PrintGraph(graph), text);
}

// A graph must print, read back identical, and print the same again.
void ExpectGraphRoundTrips(const Graph& graph) {
  std::string text = PrintGraph(graph);
  absl::StatusOr<Graph> parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << StatusMessage(parsed.status()) << "\n" << text;
  ExpectSameGraph(graph, *parsed);
  EXPECT_EQ(PrintGraph(*parsed), text);
}

std::string ParseError(std::string_view text) {
  absl::StatusOr<Graph> graph = ParseGraph(text);
  EXPECT_FALSE(graph.ok()) << "parsed:\n" << text;
  return graph.ok() ? "" : std::string(StatusMessage(graph.status()));
}

TEST(TextFormatTest, ConvolutionBlockRoundTrips) {
  ExpectTextRoundTrips(
      "graph block {\n"
      "  input %x: f32[1,8,8,16] nhwc\n"
      "  param %w: f32[16,3,3,16]\n"
      "  param %gamma: f32[16]\n"
      "  param %beta: f32[16]\n"
      "  buffer %rm: f32[16]\n"
      "  buffer %rv: f32[16]\n"
      "  %conv: f32[1,8,8,16] nhwc = conv2d(%x, %w) {pads=[1,1,1,1], strides=[1,1]}\n"
      "  %bn: f32[1,8,8,16] nhwc, %bn.saved_mean: f32[16], %bn.saved_inv_std: f32[16], "
      "%bn.running_mean: f32[16], %bn.running_var: f32[16] = "
      "batch_norm(%conv, %gamma, %beta, %rm, %rv) {epsilon=1e-05, momentum=0.1, training=true}\n"
      "  %y: f32[1,8,8,16] nhwc = relu(%bn)\n"
      "  output %y\n"
      "  output %bn.running_mean\n"
      "}\n");
}

TEST(TextFormatTest, NodeNamePrintedOnlyWhenItDiffersFromFirstOutput) {
  Graph graph("g");
  ValueId x = graph.AddInput("x", F32({2}));
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "same", Phase::kForward, {{"same", F32({2})}});
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "conv1", Phase::kForward, {{"y", F32({2})}});
  std::string text = PrintGraph(graph);
  EXPECT_THAT(text, HasSubstr("\n  %same: f32[2] = relu(%x)\n"));
  EXPECT_THAT(text, HasSubstr("\n  node conv1: %y: f32[2] = relu(%x)\n"));
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, PhasesAndControlInputsRoundTrip) {
  ExpectTextRoundTrips(
      "graph train {\n"
      "  param %w: f32[4]\n"
      "  input %dy: f32[4]\n"
      "  state %mom: f32[4]\n"
      "  %a: f32[4] = relu(%w)\n"
      "  %dx: f32[4] = relu_backward(%dy, %a) @backward\n"
      "  %w.new: f32[4], %mom.new: f32[4] = sgd_update(%w, %dx, %mom) "
      "{lr=0.1, momentum=0.9} @update after(a, dx)\n"
      "  output %w.new\n"
      "}\n");
}

TEST(TextFormatTest, ControlInputsMayNameLaterNodes) {
  // A pass may order an early node after a later one; the text keeps the edge.
  Graph graph = ParseOrDie(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %a: f32[2] = relu(%x) after(b)\n"
      "  %b: f32[2] = relu(%x)\n"
      "}\n");
  ASSERT_EQ(graph.num_nodes(), 2);
  EXPECT_EQ(graph.node(0).control_inputs, std::vector<NodeId>{1});
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, InputsMayReadValuesDefinedLater) {
  // A rewrite that rewires node 0 to a value created after it (a recomputed
  // copy, say) must still print and read back with the same ids.
  Graph graph("rewired");
  ValueId x = graph.AddInput("x", F32({2}));
  NodeId reader = graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "reader", Phase::kBackward,
                                           {{"reader", F32({2})}});
  NodeId copy = graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "copy", Phase::kBackward,
                                         {{"copy", F32({2})}});
  graph.mutable_node(reader).inputs = {graph.node(copy).outputs[0]};
  EXPECT_THAT(PrintGraph(graph), HasSubstr("%reader: f32[2] = relu(%copy) @backward\n"));
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, InputsAddedBetweenNodesKeepTheirIds) {
  Graph graph("interleaved");
  ValueId x = graph.AddInput("x", F32({2}));
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "a", Phase::kForward, {{"a", F32({2})}});
  ValueId late = graph.AddInput("late", F32({2}), ValueKind::kBuffer);
  graph.AddNodeWithOutputs(OpKind::kAdd, {x, late}, {}, "b", Phase::kForward, {{"b", F32({2})}});
  graph.AddOutput(graph.node(1).outputs[0]);
  // Value ids: x=0, a=1, late=2, b=3; the text lists them in that order.
  EXPECT_EQ(PrintGraph(graph),
            "graph interleaved {\n"
            "  input %x: f32[2]\n"
            "  %a: f32[2] = relu(%x)\n"
            "  buffer %late: f32[2]\n"
            "  %b: f32[2] = add(%x, %late)\n"
            "  output %b\n"
            "}\n");
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, NodeWithoutOutputsRoundTrips) {
  Graph graph("g");
  ValueId x = graph.AddInput("x", F32({2}));
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "sink", Phase::kForward, {});
  EXPECT_THAT(PrintGraph(graph), HasSubstr("  node sink: relu(%x)\n"));
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, EveryAttributeTypeRoundTrips) {
  Graph graph("attrs");
  ValueId x = graph.AddInput("x", F32({2}));
  AttrMap attrs = {
      {"flag", true},
      {"off", false},
      {"count", int64_t{3}},
      {"negative", int64_t{-100}},
      {"largest", std::numeric_limits<int64_t>::max()},
      {"smallest", std::numeric_limits<int64_t>::min()},
      {"rate", 0.5},
      {"whole", 2.0},  // prints as "2.0" so it reads back as a float, not an int
      {"mode", std::string("tanh")},
      {"quoted", std::string("say \"hi\"\\ \n\ttab")},
      {"empty_text", std::string()},
      {"shape", IntList{1, -1, 0}},
      {"no_ints", IntList{}},
      {"scales", FloatList{0.25, -3.0, 1e-7}},
      {"no_floats", FloatList{}},
  };
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, attrs, "r", Phase::kForward, {{"r", F32({2})}});
  std::string text = PrintGraph(graph);
  EXPECT_THAT(text, HasSubstr("no_floats=f[]"));
  EXPECT_THAT(text, HasSubstr("no_ints=[]"));
  EXPECT_THAT(text, HasSubstr("whole=2.0"));
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, OddFloatsRoundTripExactly) {
  const std::vector<double> odd = {
      0.1,  // not exact in binary: needs 17 significant digits to come back
      -0.0,
      std::numeric_limits<double>::denorm_min(),
      std::numeric_limits<double>::min(),
      std::numeric_limits<double>::max(),
      std::numeric_limits<double>::lowest(),
      1e-300,
      1.0 / 3.0,
      std::numeric_limits<double>::infinity(),
      -std::numeric_limits<double>::infinity(),
  };
  Graph graph("floats");
  ValueId x = graph.AddInput("x", F32({2}));
  AttrMap attrs;
  for (size_t i = 0; i < odd.size(); ++i) attrs.Set(fmt::format("f{}", i), odd[i]);
  attrs.Set("list", FloatList(odd.begin(), odd.end()));
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, attrs, "r", Phase::kForward, {{"r", F32({2})}});
  ExpectGraphRoundTrips(graph);

  // -0.0 == 0.0, so check the sign bit survived separately.
  Graph parsed = ParseOrDie(PrintGraph(graph));
  EXPECT_TRUE(std::signbit(parsed.node(0).attrs.Float("f1")));
}

TEST(TextFormatTest, NanReadsBackAsNan) {
  // NaN != NaN, so the graph comparison cannot check it.
  Graph graph = ParseOrDie(
      "graph g {\n"
      "  input %x: f32[2]\n"
      "  %r: f32[2] = relu(%x) {a=nan, b=[nan,-inf]}\n"
      "}\n");
  EXPECT_TRUE(std::isnan(graph.node(0).attrs.Float("a")));
  absl::StatusOr<FloatList> list = graph.node(0).attrs.GetFloats("b");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_TRUE(std::isnan((*list)[0]));
  EXPECT_EQ((*list)[1], -std::numeric_limits<double>::infinity());
  EXPECT_THAT(PrintGraph(graph), HasSubstr("{a=nan, b=[nan,-inf]}"));
}

TEST(TextFormatTest, NamesThatNeedQuotesRoundTrip) {
  Graph graph("my graph");
  ValueId x = graph.AddInput("input:0", F32({2}));
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {{"odd key", int64_t{1}}}, "/layer1/relu \"a\"",
                           Phase::kForward, {{"relu out", F32({2})}});
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "second", Phase::kForward,
                           {{"second", F32({2})}});
  graph.AddControlInput(1, 0);
  graph.AddOutput(1);
  std::string text = PrintGraph(graph);
  EXPECT_THAT(text, HasSubstr("graph \"my graph\" {"));
  EXPECT_THAT(text, HasSubstr("node \"/layer1/relu \\\"a\\\"\": %\"relu out\": f32[2] = "
                              "relu(%\"input:0\") {\"odd key\"=1}"));
  EXPECT_THAT(text, HasSubstr("after(\"/layer1/relu \\\"a\\\"\")"));
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, GraphBuiltWithInferenceRoundTrips) {
  Graph graph("mlp");
  ValueId x = graph.AddInput("x", F32({8, 4}));
  ValueId w = graph.AddInput("w", F32({3, 4}), ValueKind::kParameter);
  absl::StatusOr<NodeId> linear = graph.AddNode(OpKind::kLinear, {x, w}, {}, "fc");
  ASSERT_TRUE(linear.ok()) << StatusMessage(linear.status());
  absl::StatusOr<NodeId> relu =
      graph.AddNode(OpKind::kRelu, {graph.node(*linear).outputs[0]}, {}, "act");
  ASSERT_TRUE(relu.ok()) << StatusMessage(relu.status());
  graph.AddOutput(graph.node(*relu).outputs[0]);
  EXPECT_EQ(PrintGraph(graph),
            "graph mlp {\n"
            "  input %x: f32[8,4]\n"
            "  param %w: f32[3,4]\n"
            "  %fc: f32[8,3] = linear(%x, %w)\n"
            "  %act: f32[8,3] = relu(%fc)\n"
            "  output %act\n"
            "}\n");
  ExpectGraphRoundTrips(graph);
}

TEST(TextFormatTest, LooseTextReadsAndPrintsCanonically) {
  // Comments, free spacing, statements over several lines, an explicit
  // row_major layout, "+3", "1e3", a mixed list and "{}" are all accepted.
  Graph graph = ParseOrDie(
      "# a comment before the graph\n"
      "graph   g{\n"
      "  input %x :f32[ 2 , 3 ] row_major   # trailing comment\n"
      "  %y : f32[2,3]\n"
      "     = relu( %x ) {b=+3,a=1e3, c=[1, 0.5], d=f[1]} @forward\n"
      "  %z: f32[2,3] = relu(%y) {}\n"
      "  output %y, %z\n"
      "}\n");
  EXPECT_EQ(PrintGraph(graph),
            "graph g {\n"
            "  input %x: f32[2,3]\n"
            "  %y: f32[2,3] = relu(%x) {a=1e+03, b=3, c=[1.0,0.5], d=[1.0]}\n"
            "  %z: f32[2,3] = relu(%y)\n"
            "  output %y\n"
            "  output %z\n"
            "}\n");
}

TEST(TextFormatTest, ScalarAndIntegerTypesRoundTrip) {
  ExpectTextRoundTrips(
      "graph g {\n"
      "  input %logits: f32[4,10]\n"
      "  input %labels: i64[4]\n"
      "  input %mask: bool[4]\n"
      "  input %half: bf16[4] nhwc\n"
      "  %loss: f32[] = cross_entropy_loss(%logits, %labels)\n"
      "  output %loss\n"
      "}\n");
}

TEST(TextFormatTest, ParseAndVerifyAcceptsAConsistentGraph) {
  absl::StatusOr<Graph> graph = ParseAndVerifyGraph(
      "graph g {\n"
      "  input %x: f32[2,3]\n"
      "  %y: f32[2,3] = relu(%x)\n"
      "  output %y\n"
      "}\n");
  EXPECT_TRUE(graph.ok()) << StatusMessage(graph.status());
}

TEST(TextFormatTest, ParseAndVerifyRejectsAWrongDeclaredType) {
  absl::StatusOr<Graph> graph = ParseAndVerifyGraph(
      "graph g {\n"
      "  input %x: f32[2,3]\n"
      "  %y: f32[3,2] = relu(%x)\n"
      "}\n");
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(StatusMessage(graph.status()),
              HasSubstr("node 'y' (relu): output 0 %y is declared f32[3,2] but the op infers "
                        "f32[2,3]"));
}

TEST(TextFormatTest, BrokenGraphPrintsButDoesNotReadBack) {
  Graph graph("broken");
  ValueId x = graph.AddInput("x", F32({2}));
  graph.AddNodeWithOutputs(OpKind::kRelu, {x}, {}, "r", Phase::kForward, {{"r", F32({2})}});
  graph.mutable_node(0).inputs = {42};
  graph.mutable_node(0).control_inputs = {9};
  std::string text = PrintGraph(graph);
  EXPECT_THAT(text, HasSubstr("%r: f32[2] = relu(%\"<missing value 42>\") "
                              "after(\"<missing node 9>\")"));
  EXPECT_THAT(ParseError(text), HasSubstr("undefined value %\"<missing value 42>\""));
}

TEST(TextFormatTest, EveryPrefixOfAGraphFailsCleanly) {
  // A truncated file must give an error, never a crash or a partial graph.
  const std::string text =
      "graph g {\n"
      "  input %x: f32[1,2,2,3] nhwc\n"
      "  node n: %y: f32[1,2,2,3] nhwc, %\"z w\": f32[] = relu(%x) "
      "{a=-1.5e-3, b=\"s\\\"\", c=f[], d=[1,2]} @backward after(n)\n"
      "  output %y\n"
      "}\n";
  ASSERT_TRUE(ParseGraph(text).ok()) << StatusMessage(ParseGraph(text).status());
  for (size_t length = 0; length + 1 < text.size(); ++length) {
    absl::StatusOr<Graph> graph = ParseGraph(std::string_view(text).substr(0, length));
    EXPECT_FALSE(graph.ok()) << "prefix of length " << length << " parsed";
  }
}

// --- Parse errors: each names line:column and what was expected. ---

TEST(TextFormatErrorTest, MissingColonAfterValueName) {
  // Line 3 is "  %y f32[2] = relu(%x)": the type starts at column 6.
  EXPECT_EQ(ParseError("graph g {\n"
                       "  input %x: f32[2]\n"
                       "  %y f32[2] = relu(%x)\n"
                       "}\n"),
            "3:6: expected ':' after value name %y");
}

TEST(TextFormatErrorTest, MissingGraphKeyword) {
  EXPECT_EQ(ParseError("  grph g {}"), "1:3: expected 'graph' at the start of the text");
}

TEST(TextFormatErrorTest, UnknownOp) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relux(%x)\n}"),
            "3:16: unknown op 'relux'");
}

TEST(TextFormatErrorTest, UndefinedValue) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%z)\n}"),
            "3:21: undefined value %z");
}

TEST(TextFormatErrorTest, UndefinedGraphOutput) {
  EXPECT_EQ(ParseError("graph g {\n  output %nothing\n}"), "2:10: undefined value %nothing");
}

TEST(TextFormatErrorTest, UndefinedControlInput) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x) after(ghost)\n}"),
            "3:31: undefined node ghost in after(...)");
}

TEST(TextFormatErrorTest, ValueDefinedTwice) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  param %x: f32[2]\n}"),
            "3:9: value %x is already defined at 2:9");
}

TEST(TextFormatErrorTest, NodeDefinedTwice) {
  EXPECT_EQ(ParseError("graph g {\n"
                       "  input %x: f32[2]\n"
                       "  node r: %a: f32[2] = relu(%x)\n"
                       "  node r: %b: f32[2] = relu(%x)\n"
                       "}"),
            "4:3: node r is already defined at 3:3");
}

TEST(TextFormatErrorTest, UnknownElementType) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: float[2]\n}"),
            "2:13: expected a type such as f32[1,8] for value %x");
}

TEST(TextFormatErrorTest, NegativeDimension) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2,-1]\n}"), "2:19: dimension -1 is negative");
}

TEST(TextFormatErrorTest, UnterminatedString) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x) {mode=\"tanh}\n}"),
            "3:31: unterminated string");
}

TEST(TextFormatErrorTest, UnknownEscape) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x) {m=\"a\\qb\"}\n}"),
            "3:30: unknown escape '\\q' in string");
}

TEST(TextFormatErrorTest, IntegerTooLarge) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n"
                       "  %y: f32[2] = relu(%x) {n=9223372036854775808}\n}"),
            "3:28: integer 9223372036854775808 does not fit in 64 bits");
}

TEST(TextFormatErrorTest, MalformedNumber) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x) {n=12abc}\n}"),
            "3:28: expected a number, got '12abc'");
}

TEST(TextFormatErrorTest, AttributeGivenTwice) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x) {a=1, a=2}\n}"),
            "3:31: attribute 'a' is given twice");
}

TEST(TextFormatErrorTest, MissingAttributeValue) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x) {a=}\n}"),
            "3:28: expected a value for attribute 'a' (a bool, number, string or list)");
}

TEST(TextFormatErrorTest, UnknownPhase) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = relu(%x) @sideways\n}"),
            "3:26: expected forward, backward or update after '@'");
}

TEST(TextFormatErrorTest, UnknownStatement) {
  EXPECT_EQ(ParseError("graph g {\n  weight %x: f32[2]\n}"),
            "2:3: expected a statement (input, param, buffer, state, node, output or %value) or "
            "'}'");
}

TEST(TextFormatErrorTest, MissingClosingBrace) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n"),
            "3:1: expected '}' at the end of the graph");
}

TEST(TextFormatErrorTest, TextAfterTheGraph) {
  EXPECT_EQ(ParseError("graph g {\n}\nextra"),
            "3:1: expected end of text after the graph's closing '}'");
}

TEST(TextFormatErrorTest, MissingCommaBetweenInputs) {
  EXPECT_EQ(ParseError("graph g {\n  input %x: f32[2]\n  %y: f32[2] = add(%x %x)\n}"),
            "3:23: expected ',' or ')' in the inputs of add");
}

}  // namespace
}  // namespace spillway::ir
