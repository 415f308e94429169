#include "nodelink/node_link.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fmt/format.h"
#include "support/status_macros.h"

namespace spillway::nodelink {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> ScheduleNames(const ir::Graph& graph) {
  std::vector<std::string> names;
  for (ir::NodeId id : graph.TopologicalOrder()) names.push_back(graph.node(id).name);
  return names;
}

// The parsed graph; a parse error fails the test and gives an empty graph
// (which the callers' size checks then stop at).
CostedGraph Parse(std::string_view text, const NodeLinkOptions& options = {}) {
  absl::StatusOr<CostedGraph> graph = ParseNodeLinkGraph(text, options);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : CostedGraph{};
}

std::string Error(std::string_view text, const NodeLinkOptions& options = {}) {
  absl::StatusOr<CostedGraph> graph = ParseNodeLinkGraph(text, options);
  if (graph.ok()) return "<parsed>";
  return std::string(StatusMessage(graph.status()));
}

// A training graph: two forward nodes, two backward ones reading them.
constexpr std::string_view kTraining = R"({
  "directed": true, "multigraph": false, "graph": {},
  "nodes": [
    {"id": "f1", "duration": 0.002, "size": 4000, "phase": "forward"},
    {"id": "f2", "duration": 0.003, "size": 8000, "phase": "forward"},
    {"id": "b2", "duration": 0.006, "size": 8000, "phase": "backward"},
    {"id": "b1", "duration": 0.004, "size": 4000, "phase": "backward"}
  ],
  "links": [
    {"source": "f1", "target": "f2"}, {"source": "f2", "target": "b2"},
    {"source": "b2", "target": "b1"}, {"source": "f1", "target": "b1"}
  ]
})";

TEST(NodeLink, ATrainingGraphKeepsItsPhasesOrderAndCosts) {
  const CostedGraph costed = Parse(kTraining);
  ASSERT_GT(costed.graph.num_nodes(), 0);
  const ir::Graph& graph = costed.graph;
  EXPECT_TRUE(costed.phases_given);
  EXPECT_EQ(costed.cut, ir::kNoNode);
  EXPECT_THAT(ScheduleNames(graph), ElementsAre("f1", "f2", "b2", "b1"));
  EXPECT_THAT(costed.node_seconds, ElementsAre(0.002, 0.003, 0.006, 0.004));
  const ir::Node& b1 = graph.node(*graph.FindNode("b1"));
  EXPECT_EQ(b1.op, ir::OpKind::kOpaque);
  EXPECT_EQ(b1.phase, ir::Phase::kBackward);
  ASSERT_EQ(b1.inputs.size(), 2u);
  EXPECT_EQ(graph.value(b1.inputs[0]).name, "b2");
  EXPECT_EQ(graph.value(b1.inputs[1]).name, "f1");
  EXPECT_EQ(graph.value(graph.node(*graph.FindNode("f2")).outputs[0]).type.bytes(), 8000);
  // Only b1 is read by nothing: it is the output.
  ASSERT_EQ(graph.outputs().size(), 1u);
  EXPECT_EQ(graph.value(graph.outputs()[0]).name, "b1");
}

TEST(NodeLink, AGeneralDagIsCutAfterItsKeepEverythingPeak) {
  // a -> b -> c -> d -> e, and a -> d. A value is live from its producer's
  // step through its last reader's: step 0 holds a (100), step 1 a, b (110),
  // step 2 a, b, c (1110: b is read there), step 3 a, c, d (1101), step 4
  // d, e (2; e is the output). The peak is step 2: a and c, produced up to
  // it and read by d after it, are the candidates.
  constexpr std::string_view kDag = R"({
    "nodes": [{"id": 0, "duration": 1, "size": 100}, {"id": 1, "duration": 1, "size": 10},
              {"id": 2, "duration": 1, "size": 1000}, {"id": 3, "duration": 1, "size": 1},
              {"id": 4, "duration": 1, "size": 1}],
    "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2},
              {"source": 2, "target": 3}, {"source": 0, "target": 3},
              {"source": 3, "target": 4}]
  })";
  const CostedGraph costed = Parse(kDag);
  ASSERT_GT(costed.graph.num_nodes(), 0);
  EXPECT_FALSE(costed.phases_given);
  ASSERT_NE(costed.cut, ir::kNoNode);
  EXPECT_EQ(costed.graph.node(costed.cut).name, "2");
  std::vector<std::string> phases;
  for (const ir::Node& node : costed.graph.nodes()) {
    phases.push_back(std::string(ir::PhaseName(node.phase)));
  }
  EXPECT_THAT(phases, ElementsAre("forward", "forward", "forward", "backward", "backward"));
}

TEST(NodeLink, AttributeNamesAndUnitsComeFromOptionsOrTheFile) {
  constexpr std::string_view kRenamed = R"({
    "graph": {"duration_attr": "cost_cpu", "size_attr": "cost_ram", "time_unit": "ms"},
    "nodes": [{"id": "a", "cost_cpu": 2.5, "cost_ram": 64}],
    "edges": []
  })";
  const CostedGraph from_file = Parse(kRenamed);
  ASSERT_GT(from_file.graph.num_nodes(), 0);
  EXPECT_DOUBLE_EQ(from_file.node_seconds[0], 2.5e-3);
  NodeLinkOptions options;
  options.time_unit = "us";
  const CostedGraph overridden = Parse(kRenamed, options);
  ASSERT_GT(overridden.graph.num_nodes(), 0);
  EXPECT_DOUBLE_EQ(overridden.node_seconds[0], 2.5e-6);
  options.duration_attr = "duration";
  EXPECT_THAT(Error(kRenamed, options), HasSubstr("node 'a': missing attribute 'duration'"));
}

TEST(NodeLink, AGivenOrderIsHonouredAndAnUngivenOneFollowsTheFile) {
  // b and c are independent: the file lists c first, the order puts b first.
  constexpr std::string_view kListed = R"({
    "nodes": [{"id": "a", "duration": 1, "size": 1}, {"id": "c", "duration": 1, "size": 1},
              {"id": "b", "duration": 1, "size": 1}],
    "links": [{"source": "a", "target": "b"}, {"source": "a", "target": "c"}]})";
  const CostedGraph listed = Parse(kListed);
  ASSERT_GT(listed.graph.num_nodes(), 0);
  EXPECT_THAT(ScheduleNames(listed.graph), ElementsAre("a", "c", "b"));
  std::string ordered(kListed);
  ordered.insert(1, R"("graph": {"order": ["a", "b", "c"]},)");
  const CostedGraph given = Parse(ordered);
  ASSERT_GT(given.graph.num_nodes(), 0);
  EXPECT_THAT(ScheduleNames(given.graph), ElementsAre("a", "b", "c"));
}

TEST(NodeLink, ExplicitOutputsReplaceTheSinks) {
  std::string text(kTraining);
  text.replace(text.find(R"("graph": {})"), 11, R"("graph": {"outputs": ["f1", "b1"]})");
  const CostedGraph costed = Parse(text);
  ASSERT_GT(costed.graph.num_nodes(), 0);
  std::vector<std::string> outputs;
  for (ir::ValueId v : costed.graph.outputs()) outputs.push_back(costed.graph.value(v).name);
  EXPECT_THAT(outputs, ElementsAre("f1", "b1"));
}

TEST(NodeLink, BadInputGetsAOneLineErrorNamingTheCulprit) {
  const auto node = [](std::string_view id, std::string_view extra = "") {
    return fmt::format(R"({{"id": "{}", "duration": 1, "size": 8{}}})", id, extra);
  };
  const auto graph = [](std::string nodes, std::string links, std::string attrs = "{}") {
    return fmt::format(R"({{"graph": {}, "nodes": [{}], "links": [{}]}})", attrs, nodes, links);
  };
  const std::string ab = node("a") + "," + node("b");
  EXPECT_THAT(Error("{"), HasSubstr("JSON"));
  EXPECT_THAT(Error("[]"), HasSubstr("JSON object"));
  EXPECT_THAT(Error(R"({"links": []})"), HasSubstr("missing 'nodes'"));
  EXPECT_THAT(Error(R"({"nodes": [], "links": []})"), HasSubstr("no nodes"));
  EXPECT_THAT(Error(R"({"nodes": [{"id": "a", "duration": 1, "size": 1}]})"),
              HasSubstr("missing 'links' (or 'edges')"));
  EXPECT_THAT(Error(graph(node("a") + "," + node("a"), "")), HasSubstr("node 'a' appears twice"));
  EXPECT_THAT(
      Error(graph(R"({"id": 7, "duration": 1, "size": 1}, {"id": "7", "duration": 1, "size": 1})",
                  "")),
      HasSubstr("node '7' appears twice"));
  EXPECT_THAT(Error(graph(R"({"id": "a", "size": 1})", "")),
              HasSubstr("node 'a': missing attribute 'duration'"));
  EXPECT_THAT(Error(graph(R"({"id": "a", "duration": 1})", "")),
              HasSubstr("node 'a': missing attribute 'size'"));
  EXPECT_THAT(Error(graph(R"({"id": "a", "duration": 1, "size": -5})", "")),
              HasSubstr("node 'a': size 'size' must be a whole number of bytes >= 0, got -5"));
  EXPECT_THAT(Error(graph(R"({"id": "a", "duration": 1, "size": 1.5})", "")), HasSubstr("got 1.5"));
  EXPECT_THAT(Error(graph(R"({"id": "a", "duration": -1, "size": 1})", "")),
              HasSubstr("node 'a': duration 'duration' must be a non-negative number, got -1"));
  EXPECT_THAT(Error(graph(R"({"id": "a", "duration": "fast", "size": 1})", "")),
              HasSubstr("got \"fast\""));
  EXPECT_THAT(Error(graph(ab, R"({"source": "a", "target": "z"})")),
              HasSubstr("link 0: target 'z' is not a node"));
  EXPECT_THAT(Error(graph(ab, R"({"source": "y", "target": "a"})")),
              HasSubstr("link 0: source 'y' is not a node"));
  EXPECT_THAT(Error(graph(ab, R"({"source": "a"})")), HasSubstr("link 0: must be an object"));
  EXPECT_THAT(Error(graph(ab, R"({"source": "a", "target": "a"})")), HasSubstr("reads itself"));
  EXPECT_THAT(Error(graph(ab + "," + node("c"),
                          R"({"source": "a", "target": "b"}, {"source": "b", "target": "c"},
                             {"source": "c", "target": "b"})")),
              HasSubstr("the graph has a cycle through node '"));
  EXPECT_THAT(Error(graph(node("a", R"(, "phase": "forward")") + "," + node("b"), "")),
              HasSubstr("node 'b' has no phase, but other nodes do"));
  EXPECT_THAT(Error(graph(node("a", R"(, "phase": "sideways")"), "")),
              HasSubstr("phase must be \"forward\", \"backward\" or \"update\""));
  EXPECT_THAT(Error(graph(node("a", R"(, "phase": "backward")") + "," +
                              node("b", R"(, "phase": "forward")"),
                          R"({"source": "a", "target": "b"})")),
              HasSubstr("node 'b' (forward) runs after 'a' (backward)"));
  EXPECT_THAT(Error(graph(ab, R"({"source": "a", "target": "b"})", R"({"order": ["b", "a"]})")),
              HasSubstr("'order' runs 'b' before 'a', which it reads"));
  EXPECT_THAT(Error(graph(ab, "", R"({"order": ["a"]})")),
              HasSubstr("'order' leaves out node 'b'"));
  EXPECT_THAT(Error(graph(ab, "", R"({"order": ["a", "a", "b"]})")),
              HasSubstr("'order' names 'a' twice"));
  EXPECT_THAT(Error(graph(ab, "", R"({"outputs": ["q"]})")),
              HasSubstr("'outputs' names 'q', which is not a node"));
  EXPECT_THAT(Error(graph(ab, "", R"({"time_unit": "h"})")), HasSubstr("time unit \"h\""));
  EXPECT_THAT(Error(R"({"directed": false, "nodes": [], "links": []})"), HasSubstr("not directed"));
  for (std::string_view text : {std::string_view("{"), std::string_view(R"({"nodes": 3})")}) {
    EXPECT_EQ(Error(text).find('\n'), std::string::npos) << Error(text);
  }
}

TEST(NodeLink, LoadingNamesTheFile) {
  absl::StatusOr<CostedGraph> missing = LoadNodeLinkGraph("/nonexistent/graph.json", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(StatusMessage(missing.status())), HasSubstr("/nonexistent/graph.json"));
}

}  // namespace
}  // namespace spillway::nodelink
