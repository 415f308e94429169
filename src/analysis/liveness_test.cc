#include "analysis/liveness.h"

#include <gtest/gtest.h>

#include "ir/graph.h"

namespace spillway::analysis {
namespace {

using ir::F32;
using ir::OpKind;
using ir::ValueKind;

// x and w are 256 floats, 1 KiB each; every intermediate is 1 KiB too.
//   step 0  a  = mul(x, w)
//   step 1  b  = relu(a)
//   step 2  c  = add(a, b)          a and b die here; c is a graph output
//   step 3  w2 = sgd_update(w, c)   written in place over w: no new buffer
struct SmallGraph {
  ir::Graph graph{"small"};
  ir::ValueId x, w, a, b, c, w2;

  SmallGraph() {
    x = graph.AddInput("x", F32({256}));
    w = graph.AddInput("w", F32({256}), ValueKind::kParameter);
    a = Output(graph.AddNode(OpKind::kMul, {x, w}, {}, "a"));
    b = Output(graph.AddNode(OpKind::kRelu, {a}, {}, "b"));
    c = Output(graph.AddNode(OpKind::kAdd, {a, b}, {}, "c"));
    w2 = Output(graph.AddNode(OpKind::kSgdUpdate, {w, c}, {{"lr", 0.1}}, "w2", ir::Phase::kUpdate));
    graph.AddOutput(c);
    graph.AddOutput(w2);
  }

  ir::ValueId Output(absl::StatusOr<ir::NodeId> node) {
    EXPECT_TRUE(node.ok()) << node.status();
    return graph.node(*node).outputs.front();
  }
};

TEST(Liveness, FirstAndLastUseFollowTheSchedule) {
  SmallGraph g;
  const std::vector<ir::NodeId> order = g.graph.TopologicalOrder();
  const Liveness live = Liveness::Analyze(g.graph, order);
  EXPECT_EQ(live.first_use(g.a), 1);  // relu reads it first
  EXPECT_EQ(live.last_use(g.a), 2);   // add reads it last
  EXPECT_EQ(live.first_use(g.c), 3);
  EXPECT_EQ(live.last_use(g.c), 3);
  EXPECT_EQ(live.first_use(g.w2), -1);  // nothing reads the updated weight
  EXPECT_EQ(live.step_of(g.graph.value(g.c).producer), 2);
}

TEST(Liveness, InPlaceOutputSharesItsInputsBuffer) {
  SmallGraph g;
  const std::vector<ir::NodeId> order = g.graph.TopologicalOrder();
  const Liveness live = Liveness::Analyze(g.graph, order);
  EXPECT_EQ(live.buffer_of(g.w2), live.buffer_of(g.w));
  EXPECT_TRUE(live.buffers()[static_cast<size_t>(live.buffer_of(g.w))].persistent);
  // x, w (shared with w2), a, b, c.
  EXPECT_EQ(live.buffers().size(), 5u);
}

TEST(Liveness, NaiveCurveCountsEverythingResident) {
  SmallGraph g;
  const std::vector<ir::NodeId> order = g.graph.TopologicalOrder();
  const MemoryCurve curve = Liveness::Analyze(g.graph, order).NaiveMemoryCurve();
  // Persistent x and w: 2 KiB throughout.
  //   step 0: + a               = 3 KiB
  //   step 1: + b               = 4 KiB
  //   step 2: + c (a, b alive)  = 5 KiB  <- peak, at node c
  //   step 3: a, b freed; c is still read and is a graph output; w2 reuses w = 3 KiB
  EXPECT_EQ(curve.persistent_bytes, 2048);
  EXPECT_EQ(curve.bytes_at_step, (std::vector<int64_t>{3072, 4096, 5120, 3072}));
  EXPECT_EQ(curve.peak_bytes, 5120);
  EXPECT_EQ(curve.peak_step, 2);
  EXPECT_EQ(g.graph.node(curve.peak_node).name, "c");
}

TEST(Liveness, OutputWithoutReadersLivesOnlyAtItsStep) {
  // y = relu(x) is never read and is not a graph output: it is freed right after
  // its producer, so z = relu(x) at the next step does not see it.
  ir::Graph graph("dead");
  const ir::ValueId x = graph.AddInput("x", F32({256}));
  ASSERT_TRUE(graph.AddNode(OpKind::kRelu, {x}, {}, "y").ok());
  const absl::StatusOr<ir::NodeId> z = graph.AddNode(OpKind::kRelu, {x}, {}, "z");
  ASSERT_TRUE(z.ok());
  graph.AddOutput(graph.node(*z).outputs.front());
  const std::vector<ir::NodeId> order = graph.TopologicalOrder();
  const MemoryCurve curve = Liveness::Analyze(graph, order).NaiveMemoryCurve();
  EXPECT_EQ(curve.bytes_at_step, (std::vector<int64_t>{2048, 2048}));
}

}  // namespace
}  // namespace spillway::analysis
