#include "autodiff/training_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "autodiff/gradients.h"
#include "autodiff/saved_tensors.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "ir/verifier.h"

namespace spillway::autodiff {
namespace {

using ir::OpKind;
using ::testing::HasSubstr;

// conv -> batch_norm -> relu -> global_avg_pool -> flatten -> linear -> loss,
// on a 2x4x4x3 image batch with 8 channels and 5 classes.
ir::Graph SmallCnn() {
  ir::Graph graph("cnn");
  ir::GraphBuilder b(graph);
  const ir::ValueId x = b.Input("images", ir::Activation({2, 4, 4, 3}));
  const ir::ValueId labels = b.Input("labels", ir::I64({2}));
  const ir::ValueId w = b.Parameter("conv.weight", ir::F32({8, 3, 3, 3}));
  const ir::ValueId gamma = b.Parameter("bn.weight", ir::F32({8}));
  const ir::ValueId beta = b.Parameter("bn.bias", ir::F32({8}));
  const ir::ValueId mean = b.Buffer("bn.running_mean", ir::F32({8}));
  const ir::ValueId var = b.Buffer("bn.running_var", ir::F32({8}));
  const ir::ValueId fc_w = b.Parameter("fc.weight", ir::F32({5, 8}));
  const ir::ValueId fc_b = b.Parameter("fc.bias", ir::F32({5}));
  ir::ValueId h = b.Op(OpKind::kConv2d, {x, w}, {{"pads", ir::IntList{1, 1, 1, 1}}}, "conv");
  h = b.Op(OpKind::kBatchNorm, {h, gamma, beta, mean, var}, {}, "bn");
  h = b.Op(OpKind::kRelu, {h}, {}, "relu");
  h = b.Op(OpKind::kDropout, {h}, {{"p", 0.5}, {"seed", int64_t{7}}}, "drop");
  h = b.Op(OpKind::kGlobalAvgPool, {h}, {}, "pool");
  h = b.Op(OpKind::kFlatten, {h}, {}, "flatten");
  h = b.Op(OpKind::kLinear, {h, fc_w, fc_b}, {}, "fc");
  b.Output(b.Op(OpKind::kCrossEntropyLoss, {h, labels}, {}, "loss"));
  EXPECT_TRUE(b.ok()) << b.status();
  return graph;
}

std::set<std::string> SavedNames(const ir::Graph& graph) {
  std::set<std::string> names;
  for (const SavedTensor& t : SavedTensors(graph)) names.insert(graph.value(t.value).name);
  return names;
}

TEST(TrainingGraph, EveryParameterGetsAGradientOfItsOwnTypeAndAnUpdate) {
  const ir::Graph forward = SmallCnn();
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(forward, {});
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_TRUE(ir::VerifyGraph(training->graph).ok()) << ir::VerifyGraph(training->graph);
  const std::vector<ir::ValueId> params = forward.InputsOfKind(ir::ValueKind::kParameter);
  ASSERT_EQ(training->param_grads.size(), params.size());
  EXPECT_TRUE(training->params_without_gradient.empty());
  for (ir::ValueId param : params) {
    EXPECT_EQ(training->graph.value(training->param_grads.at(param)).type.shape,
              forward.value(param).type.shape)
        << forward.value(param).name;
  }
  int updates = 0;
  for (const ir::Node& node : training->graph.nodes()) {
    if (node.phase == ir::Phase::kUpdate) {
      EXPECT_EQ(node.op, OpKind::kSgdUpdate);
      ++updates;
    }
  }
  EXPECT_EQ(updates, static_cast<int>(params.size()));
}

TEST(TrainingGraph, SavedTensorsAreWhatTheRulesRead) {
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(SmallCnn(), {});
  ASSERT_TRUE(training.ok()) << training.status();
  // conv's output is read by batch_norm_backward (as x); batch_norm saves its
  // statistics; relu_backward reads relu's output; linear_backward_weight reads
  // the flattened features. Dropout saves nothing (its mask is replayed from
  // the seed), global_avg_pool's backward needs only the shape, and the loss's
  // backward reads the logits (fc). The images are a graph input, not listed.
  EXPECT_EQ(SavedNames(training->graph),
            (std::set<std::string>{"conv", "bn.saved_mean", "bn.saved_inv_std", "relu", "flatten",
                                   "fc"}));
}

TEST(TrainingGraph, PhasesAreOrderedForwardBackwardUpdate) {
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(SmallCnn(), {});
  ASSERT_TRUE(training.ok()) << training.status();
  const std::vector<ir::NodeId> order = training->graph.TopologicalOrder();
  ASSERT_EQ(static_cast<int64_t>(order.size()), training->graph.num_nodes());
  int last_phase = 0;
  for (ir::NodeId id : order) {
    const int phase = static_cast<int>(training->graph.node(id).phase);
    EXPECT_GE(phase, last_phase) << training->graph.node(id).name;
    last_phase = phase;
  }
}

TEST(TrainingGraph, FanOutAccumulatesAndBroadcastReduces) {
  // a = x * w (w broadcast over the batch), b = relu(a), c = a + b: a feeds two
  // consumers, so its gradient is an add_n; w's gradient sums over the batch.
  ir::Graph graph("fanout");
  ir::GraphBuilder b(graph);
  const ir::ValueId x = b.Input("x", ir::F32({2, 5}));
  const ir::ValueId labels = b.Input("labels", ir::I64({2}));
  const ir::ValueId w = b.Parameter("w", ir::F32({5}));
  const ir::ValueId a = b.Op(OpKind::kMul, {x, w}, {}, "a");
  const ir::ValueId r = b.Op(OpKind::kRelu, {a}, {}, "b");
  const ir::ValueId c = b.Op(OpKind::kAdd, {a, r}, {}, "c");
  b.Output(b.Op(OpKind::kCrossEntropyLoss, {c, labels}, {}, "loss"));
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(graph, {});
  ASSERT_TRUE(training.ok()) << training.status();
  const std::optional<ir::NodeId> accumulate = training->graph.FindNode("grad/a.accumulate");
  ASSERT_TRUE(accumulate.has_value());
  EXPECT_EQ(training->graph.node(*accumulate).op, OpKind::kAddN);
  EXPECT_EQ(training->graph.node(*accumulate).inputs.size(), 2u);
  const ir::Value& grad = training->graph.value(training->param_grads.at(w));
  EXPECT_EQ(grad.type.shape, (ir::Shape{5}));
  bool reduced = false;
  for (const ir::Node& node : training->graph.nodes()) reduced |= node.op == OpKind::kReduceSum;
  EXPECT_TRUE(reduced);
  EXPECT_TRUE(ir::VerifyGraph(training->graph).ok());
}

TEST(TrainingGraph, OptimizerStateMatchesTheOptimizer) {
  const ir::Graph forward = SmallCnn();
  const size_t params = forward.InputsOfKind(ir::ValueKind::kParameter).size();
  auto state_count = [&](OptimizerOptions options) {
    absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(forward, options);
    EXPECT_TRUE(training.ok()) << training.status();
    return training->graph.InputsOfKind(ir::ValueKind::kOptimizerState).size();
  };
  OptimizerOptions plain_sgd;
  plain_sgd.momentum = 0;
  EXPECT_EQ(state_count(plain_sgd), 0u);
  EXPECT_EQ(state_count(OptimizerOptions{}), params);  // one momentum buffer each
  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  EXPECT_EQ(state_count(adam), 2 * params + 1);  // m and v each, one shared step
}

TEST(TrainingGraph, RunningStatisticsAreOutputs) {
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(SmallCnn(), {});
  ASSERT_TRUE(training.ok());
  const ir::Graph& graph = training->graph;
  const ir::Node& bn = graph.node(*graph.FindNode("bn"));
  auto is_output = [&](ir::ValueId v) {
    return std::find(graph.outputs().begin(), graph.outputs().end(), v) != graph.outputs().end();
  };
  // batch_norm's outputs 3 and 4 are the running statistics, updated in place.
  EXPECT_TRUE(is_output(bn.outputs[3]));
  EXPECT_TRUE(is_output(bn.outputs[4]));
  EXPECT_TRUE(is_output(training->loss));
}

TEST(TrainingGraph, RejectsAGraphWithoutAScalarLoss) {
  ir::Graph graph("no_loss");
  ir::GraphBuilder b(graph);
  const ir::ValueId x = b.Input("x", ir::F32({4}));
  const ir::ValueId w = b.Parameter("w", ir::F32({4}));
  b.Output(b.Op(OpKind::kMul, {x, w}, {}, "y"));
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(graph, {});
  ASSERT_FALSE(training.ok());
  EXPECT_THAT(std::string(training.status().message()), HasSubstr("float scalar"));
  ir::Graph empty("empty");
  EXPECT_FALSE(BuildTrainingGraph(empty, {}).ok());
}

TEST(Gradients, EveryDifferentiableOpHasARule) {
#define SPILLWAY_CHECK_RULE(name, text)                                            \
  if (ir::GetOpDef(OpKind::k##name).differentiable) {                              \
    EXPECT_TRUE(HasGradientRule(OpKind::k##name)) << text " has no gradient rule"; \
  }
  SPILLWAY_FORWARD_OPS(SPILLWAY_CHECK_RULE)
#undef SPILLWAY_CHECK_RULE
}

}  // namespace
}  // namespace spillway::autodiff
