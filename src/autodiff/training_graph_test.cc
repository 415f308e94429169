#include "autodiff/training_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/op_registry.h"
#include "ir/verifier.h"
#include "support/status_macros.h"

namespace spillway::autodiff {
namespace {

using ir::OpKind;
using ir::ValueId;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// conv -> batch_norm -> relu -> dropout -> global_avg_pool -> flatten ->
// linear -> loss, on a 2x4x4x3 image batch with 8 channels and 5 classes.
// Five parameters: conv.weight, bn.weight, bn.bias, fc.weight, fc.bias.
ir::Graph SmallCnn() {
  ir::Graph graph("cnn");
  ir::GraphBuilder b(graph);
  const ValueId x = b.Input("images", ir::Activation({2, 4, 4, 3}));
  const ValueId labels = b.Input("labels", ir::I64({2}));
  const ValueId w = b.Parameter("conv.weight", ir::F32({8, 3, 3, 3}));
  const ValueId gamma = b.Parameter("bn.weight", ir::F32({8}));
  const ValueId beta = b.Parameter("bn.bias", ir::F32({8}));
  const ValueId mean = b.Buffer("bn.running_mean", ir::F32({8}));
  const ValueId var = b.Buffer("bn.running_var", ir::F32({8}));
  const ValueId fc_w = b.Parameter("fc.weight", ir::F32({5, 8}));
  const ValueId fc_b = b.Parameter("fc.bias", ir::F32({5}));
  ValueId h = b.Op(OpKind::kConv2d, {x, w}, {{"pads", ir::IntList{1, 1, 1, 1}}}, "conv");
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

TrainingGraph Build(const ir::Graph& forward, const OptimizerOptions& options = {}) {
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(forward, options);
  EXPECT_TRUE(training.ok()) << training.status();
  if (!training.ok()) return TrainingGraph{};
  EXPECT_TRUE(ir::VerifyGraph(training->graph).ok()) << ir::VerifyGraph(training->graph);
  return *std::move(training);
}

bool IsOutput(const ir::Graph& graph, ValueId value) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), value) != graph.outputs().end();
}

std::vector<const ir::Node*> NodesOfPhase(const ir::Graph& graph, ir::Phase phase) {
  std::vector<const ir::Node*> nodes;
  for (const ir::Node& node : graph.nodes()) {
    if (node.phase == phase) nodes.push_back(&node);
  }
  return nodes;
}

// A library caller gets the command line's errors: the field, the range in
// words and the value, NaN included.
TEST(TrainingGraph, HyperparametersOutOfRangeAreRefusedByName) {
  EXPECT_TRUE(ValidateOptimizerOptions({}).ok());
  OptimizerOptions options;
  options.lr = std::nan("");
  EXPECT_EQ(StatusMessage(ValidateOptimizerOptions(options)),
            "the learning rate must be a positive number, got 'nan'");
  options = {};
  options.momentum = 1;
  EXPECT_EQ(StatusMessage(ValidateOptimizerOptions(options)),
            "the momentum must be a number in [0, 1), got '1'");
  options = {};
  options.epsilon = 0;
  EXPECT_THAT(StatusMessage(ValidateOptimizerOptions(options)), HasSubstr("Adam's epsilon"));
  ir::Graph forward("empty");
  EXPECT_EQ(BuildTrainingGraph(forward, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TrainingGraph, EveryParameterGetsAGradientOfItsTypeAndOneUpdate) {
  const ir::Graph forward = SmallCnn();
  const TrainingGraph training = Build(forward);
  const ir::Graph& graph = training.graph;
  const std::vector<ValueId> params = forward.InputsOfKind(ir::ValueKind::kParameter);
  ASSERT_EQ(params.size(), 5u);
  ASSERT_EQ(training.param_grads.size(), params.size());
  EXPECT_TRUE(training.params_without_gradient.empty());
  for (ValueId param : params) {
    EXPECT_EQ(graph.value(training.param_grads.at(param)).type, forward.value(param).type)
        << forward.value(param).name;
  }
  std::vector<const ir::Node*> updates = NodesOfPhase(graph, ir::Phase::kUpdate);
  ASSERT_EQ(updates.size(), params.size());
  std::set<ValueId> updated;
  for (const ir::Node* update : updates) {
    EXPECT_EQ(update->op, OpKind::kSgdUpdate);
    // The update reads the parameter and its gradient.
    EXPECT_EQ(training.param_grads.at(update->inputs[0]), update->inputs[1]) << update->name;
    EXPECT_EQ(update->name, "update/" + graph.value(update->inputs[0]).name);
    updated.insert(update->inputs[0]);
  }
  EXPECT_EQ(updated, std::set<ValueId>(params.begin(), params.end()));
}

TEST(TrainingGraph, ForwardIdsAreKeptAndPhasesAreOrdered) {
  const ir::Graph forward = SmallCnn();
  const TrainingGraph training = Build(forward);
  const ir::Graph& graph = training.graph;
  // The training graph extends a copy: the forward nodes keep their ids.
  for (const ir::Node& node : forward.nodes()) {
    EXPECT_EQ(graph.node(node.id).name, node.name);
    EXPECT_EQ(graph.node(node.id).phase, ir::Phase::kForward);
  }
  EXPECT_EQ(training.loss, forward.outputs().front());
  const std::vector<ir::NodeId> order = graph.TopologicalOrder();
  ASSERT_EQ(static_cast<int64_t>(order.size()), graph.num_nodes());
  ir::Phase last = ir::Phase::kForward;
  for (ir::NodeId id : order) {
    const ir::Phase phase = graph.node(id).phase;
    EXPECT_GE(static_cast<int>(phase), static_cast<int>(last)) << graph.node(id).name;
    last = phase;
  }
  EXPECT_EQ(last, ir::Phase::kUpdate);
}

TEST(TrainingGraph, TheSeedIsAFillOfOneAndNodesAreNamedAfterTheForward) {
  const TrainingGraph training = Build(SmallCnn());
  const ir::Graph& graph = training.graph;
  const std::optional<ir::NodeId> seed = graph.FindNode("grad/loss");
  ASSERT_TRUE(seed.has_value());
  const ir::Node& fill = graph.node(*seed);
  EXPECT_EQ(fill.op, OpKind::kFill);
  EXPECT_EQ(fill.phase, ir::Phase::kBackward);
  EXPECT_EQ(fill.attrs.Float("value"), 1.0);
  EXPECT_EQ(graph.value(fill.outputs[0]).type, ir::F32({}));
  // The loss's backward reads the seed as dloss.
  const ir::Node& loss_backward = graph.node(*graph.FindNode("bwd/loss"));
  EXPECT_EQ(loss_backward.op, OpKind::kCrossEntropyLossBackward);
  EXPECT_EQ(loss_backward.inputs[0], fill.outputs[0]);
  EXPECT_EQ(graph.node(*graph.FindNode("bwd/conv.weight")).op, OpKind::kConv2dBackwardWeight);
  EXPECT_EQ(graph.node(*graph.FindNode("bwd/fc.data")).op, OpKind::kMatMul);
  // The images depend on no parameter, so conv gets no data gradient.
  EXPECT_FALSE(graph.FindNode("bwd/conv.data").has_value());
}

// The number of nodes of `op` in `graph`.
int CountOp(const ir::Graph& graph, OpKind op) {
  return static_cast<int>(std::count_if(graph.nodes().begin(), graph.nodes().end(),
                                        [&](const ir::Node& node) { return node.op == op; }));
}

// global_avg_pool -> flatten -> cross_entropy_loss against `labels`, the
// graph's output: the head of the small graphs below.
void PoolToLoss(ir::GraphBuilder& b, ValueId features, ValueId labels) {
  const ValueId pooled = b.Op(
      OpKind::kFlatten, {b.Op(OpKind::kGlobalAvgPool, {features}, {}, "pool")}, {}, "features");
  b.Output(b.Op(OpKind::kCrossEntropyLoss, {pooled, labels}, {}, "loss"));
}

TEST(TrainingGraph, AResidualFanOutAddsIntoTheConvolutionsInputGradient) {
  // h = relu(conv_a(x)); out = conv_b(h) + h: h has two differentiated
  // consumers. The add's pass-through comes first (the add is later in the
  // forward), and conv_b's data gradient adds it in as its third input, so
  // relu_backward reads that sum and no add_n is needed.
  ir::Graph graph("residual");
  ir::GraphBuilder b(graph);
  const ValueId x = b.Input("x", ir::Activation({1, 4, 4, 4}));
  const ValueId labels = b.Input("labels", ir::I64({1}));
  const ValueId wa = b.Parameter("conv_a.weight", ir::F32({4, 3, 3, 4}));
  const ValueId wb = b.Parameter("conv_b.weight", ir::F32({4, 3, 3, 4}));
  const ir::AttrMap same = {{"pads", ir::IntList{1, 1, 1, 1}}};
  const ValueId h = b.Op(OpKind::kRelu, {b.Op(OpKind::kConv2d, {x, wa}, same, "conv_a")}, {}, "h");
  const ValueId sum =
      b.Op(OpKind::kAdd, {b.Op(OpKind::kConv2d, {h, wb}, same, "conv_b"), h}, {}, "residual");
  PoolToLoss(b, sum, labels);
  ASSERT_TRUE(b.ok()) << b.status();

  const TrainingGraph training = Build(graph);
  const ir::Graph& result = training.graph;
  const ir::Node& conv_b_data = result.node(*result.FindNode("bwd/conv_b.data"));
  EXPECT_EQ(conv_b_data.op, OpKind::kConv2dBackwardData);
  ASSERT_EQ(conv_b_data.inputs.size(), 3u);
  // The add passes dy through unchanged: its partial is the residual's gradient itself.
  const ir::Node& pool_backward = result.node(result.value(conv_b_data.inputs[2]).producer);
  EXPECT_EQ(pool_backward.op, OpKind::kGlobalAvgPoolBackward);
  EXPECT_EQ(conv_b_data.inputs[0], conv_b_data.inputs[2]);
  const ir::Node& relu_backward = result.node(*result.FindNode("bwd/h"));
  EXPECT_EQ(relu_backward.op, OpKind::kReluBackward);
  EXPECT_EQ(relu_backward.inputs[0], conv_b_data.outputs[0]);
  EXPECT_FALSE(result.FindNode("grad/h.accumulate").has_value());
  EXPECT_EQ(CountOp(result, OpKind::kAddN), 0);
}

TEST(TrainingGraph, AConvolutionBeforeTheOtherConsumerLeavesTheSumToAddN) {
  // out = relu(h) + conv_b(h), conv_b after the relu in the forward: conv_b's
  // data gradient comes first, so there is nothing yet to add into it, and
  // the relu's gradient comes after; add_n sums the two.
  ir::Graph graph("late_conv");
  ir::GraphBuilder b(graph);
  const ValueId h = b.Parameter("h", ir::Activation({1, 4, 4, 4}));
  const ValueId labels = b.Input("labels", ir::I64({1}));
  const ValueId wb = b.Parameter("conv_b.weight", ir::F32({4, 3, 3, 4}));
  const ValueId relu = b.Op(OpKind::kRelu, {h}, {}, "relu");
  const ValueId conv =
      b.Op(OpKind::kConv2d, {h, wb}, {{"pads", ir::IntList{1, 1, 1, 1}}}, "conv_b");
  const ValueId sum = b.Op(OpKind::kAdd, {relu, conv}, {}, "residual");
  PoolToLoss(b, sum, labels);
  ASSERT_TRUE(b.ok()) << b.status();

  const TrainingGraph training = Build(graph);
  const ir::Graph& result = training.graph;
  EXPECT_EQ(result.node(*result.FindNode("bwd/conv_b.data")).inputs.size(), 2u);
  const ir::Node& add_n = result.node(result.value(training.param_grads.at(h)).producer);
  EXPECT_EQ(add_n.op, OpKind::kAddN);
  EXPECT_EQ(add_n.name, "grad/h.accumulate");
  EXPECT_EQ(add_n.inputs.size(), 2u);
}

TEST(TrainingGraph, ADownsamplingBlocksTwoInputGradientsShareOneBuffer) {
  // x feeds a main 1x1 convolution and a 1x1 stride-2 shortcut, as in a
  // ResNet block that changes resolution: the shortcut (later in the
  // forward) gives the first gradient of x, and the main branch's data
  // gradient adds it in, so the two x-sized gradients are never live apart.
  ir::Graph graph("downsample");
  ir::GraphBuilder b(graph);
  const ValueId x = b.Parameter("x", ir::Activation({1, 8, 8, 4}));
  const ValueId labels = b.Input("labels", ir::I64({1}));
  const ValueId w_main = b.Parameter("main.weight", ir::F32({8, 3, 3, 4}));
  const ValueId w_short = b.Parameter("shortcut.weight", ir::F32({8, 1, 1, 4}));
  const ir::AttrMap stride2 = {{"strides", ir::IntList{2, 2}}};
  const ValueId main =
      b.Op(OpKind::kConv2d, {x, w_main},
           {{"strides", ir::IntList{2, 2}}, {"pads", ir::IntList{1, 1, 1, 1}}}, "main");
  const ValueId shortcut = b.Op(OpKind::kConv2d, {x, w_short}, stride2, "shortcut");
  const ValueId sum = b.Op(OpKind::kAdd, {main, shortcut}, {}, "block");
  PoolToLoss(b, sum, labels);
  ASSERT_TRUE(b.ok()) << b.status();

  const TrainingGraph training = Build(graph);
  const ir::Graph& result = training.graph;
  const ir::Node& shortcut_data = result.node(*result.FindNode("bwd/shortcut.data"));
  const ir::Node& main_data = result.node(*result.FindNode("bwd/main.data"));
  EXPECT_EQ(shortcut_data.inputs.size(), 2u);
  ASSERT_EQ(main_data.inputs.size(), 3u);
  EXPECT_EQ(main_data.inputs[2], shortcut_data.outputs[0]);
  EXPECT_EQ(training.param_grads.at(x), main_data.outputs[0]);
  EXPECT_EQ(CountOp(result, OpKind::kAddN), 0);
}

TEST(TrainingGraph, AParameterUsedTwiceAccumulatesItsGradient) {
  // y = w * (w * x): w's two partial gradients are summed.
  ir::Graph graph("shared_weight");
  ir::GraphBuilder b(graph);
  const ValueId x = b.Input("x", ir::F32({2, 3}));
  const ValueId labels = b.Input("labels", ir::I64({2}));
  const ValueId w = b.Parameter("w", ir::F32({3}));
  const ValueId inner = b.Op(OpKind::kMul, {w, x}, {}, "inner");
  b.Output(b.Op(OpKind::kCrossEntropyLoss, {b.Op(OpKind::kMul, {w, inner}, {}, "outer"), labels},
                {}, "loss"));
  ASSERT_TRUE(b.ok()) << b.status();
  const TrainingGraph training = Build(graph);
  const ir::Node& producer =
      training.graph.node(training.graph.value(training.param_grads.at(w)).producer);
  EXPECT_EQ(producer.op, OpKind::kAddN);
  EXPECT_EQ(producer.name, "grad/w.accumulate");
  EXPECT_EQ(producer.inputs.size(), 2u);
}

TEST(TrainingGraph, ABroadcastBiasAddReducesOverTheBroadcastAxes) {
  // A per-channel bias [8] added to an NHWC [2,4,4,8] activation: its gradient
  // is reduce_sum over axes [0,1,2], already of the bias's type.
  ir::Graph graph("bias");
  ir::GraphBuilder b(graph);
  const ValueId x = b.Parameter("x", ir::Activation({2, 4, 4, 8}));
  const ValueId bias = b.Parameter("bias", ir::F32({8}));
  const ValueId labels = b.Input("labels", ir::I64({2, 4, 4}));
  b.Output(b.Op(OpKind::kCrossEntropyLoss, {b.Op(OpKind::kAdd, {x, bias}, {}, "y"), labels}, {},
                "loss"));
  ASSERT_TRUE(b.ok()) << b.status();
  const TrainingGraph training = Build(graph);
  const ir::Value& grad = training.graph.value(training.param_grads.at(bias));
  EXPECT_EQ(grad.type, ir::F32({8}));
  const ir::Node& reduce = training.graph.node(grad.producer);
  EXPECT_EQ(reduce.op, OpKind::kReduceSum);
  EXPECT_EQ(reduce.attrs.Ints("axes"), (ir::IntList{0, 1, 2}));
  // x is not broadcast: its gradient is dy itself, the loss backward's output.
  const ir::Value& x_grad = training.graph.value(training.param_grads.at(x));
  EXPECT_EQ(training.graph.node(x_grad.producer).op, OpKind::kCrossEntropyLossBackward);
}

TEST(TrainingGraph, SgdWithoutMomentumHasNoState) {
  const ir::Graph forward = SmallCnn();
  OptimizerOptions options;
  options.momentum = 0.0;
  const TrainingGraph training = Build(forward, options);
  EXPECT_TRUE(training.graph.InputsOfKind(ir::ValueKind::kOptimizerState).empty());
  EXPECT_TRUE(training.optimizer_state.empty());
  for (const ir::Node* update : NodesOfPhase(training.graph, ir::Phase::kUpdate)) {
    EXPECT_EQ(update->inputs.size(), 2u);  // param, grad
    EXPECT_EQ(update->outputs.size(), 1u);
  }
}

TEST(TrainingGraph, SgdWithMomentumHasOneBufferPerParameter) {
  const ir::Graph forward = SmallCnn();
  OptimizerOptions options;
  options.momentum = 0.9;
  options.nesterov = true;
  options.weight_decay = 1e-4;
  const TrainingGraph training = Build(forward, options);
  const ir::Graph& graph = training.graph;
  const std::vector<ValueId> params = forward.InputsOfKind(ir::ValueKind::kParameter);
  EXPECT_EQ(graph.InputsOfKind(ir::ValueKind::kOptimizerState).size(), params.size());
  for (const ir::Node* update : NodesOfPhase(graph, ir::Phase::kUpdate)) {
    ASSERT_EQ(update->inputs.size(), 3u);  // param, grad, momentum_buf
    const ir::Value& buffer = graph.value(update->inputs[2]);
    EXPECT_EQ(buffer.kind, ir::ValueKind::kOptimizerState);
    EXPECT_EQ(buffer.type, graph.value(update->inputs[0]).type);
    EXPECT_EQ(buffer.name, "momentum/" + graph.value(update->inputs[0]).name);
    EXPECT_THAT(training.optimizer_state.at(update->inputs[0]), ElementsAre(buffer.id));
    EXPECT_TRUE(update->attrs.Bool("nesterov"));
    EXPECT_EQ(update->attrs.Float("weight_decay"), 1e-4);
  }
}

TEST(TrainingGraph, AdamHasMomentsPerParameterAndOneSharedStep) {
  const ir::Graph forward = SmallCnn();
  OptimizerOptions options;
  options.kind = OptimizerKind::kAdam;
  options.lr = 1e-3;
  const TrainingGraph training = Build(forward, options);
  const ir::Graph& graph = training.graph;
  const size_t params = forward.InputsOfKind(ir::ValueKind::kParameter).size();
  // m and v for each of the 5 parameters, plus the step: 11 state inputs.
  EXPECT_EQ(graph.InputsOfKind(ir::ValueKind::kOptimizerState).size(), 2 * params + 1);
  ASSERT_NE(training.adam_step, ir::kInvalidValue);
  EXPECT_EQ(graph.value(training.adam_step).type, ir::I64({}));
  for (const ir::Node* update : NodesOfPhase(graph, ir::Phase::kUpdate)) {
    EXPECT_EQ(update->op, OpKind::kAdamUpdate);
    ASSERT_EQ(update->inputs.size(), 5u);  // param, grad, m, v, step
    EXPECT_EQ(update->inputs[4], training.adam_step);
    EXPECT_EQ(graph.value(update->inputs[2]).type, graph.value(update->inputs[0]).type);
    EXPECT_EQ(graph.value(update->inputs[3]).type, graph.value(update->inputs[0]).type);
    EXPECT_THAT(training.optimizer_state.at(update->inputs[0]),
                ElementsAre(update->inputs[2], update->inputs[3]));
    EXPECT_EQ(update->attrs.Float("lr"), 1e-3);
  }
}

TEST(TrainingGraph, UpdatesAreInPlaceAndTheirOutputsAreGraphOutputs) {
  OptimizerOptions options;
  options.kind = OptimizerKind::kAdam;
  const TrainingGraph training = Build(SmallCnn(), options);
  const ir::Graph& graph = training.graph;
  for (const ir::Node* update : NodesOfPhase(graph, ir::Phase::kUpdate)) {
    // The registry pairs each output with the input it overwrites; the types agree.
    for (const auto& [output, input] : ir::GetOpDef(update->op).in_place) {
      EXPECT_EQ(graph.value(update->outputs[static_cast<size_t>(output)]).type,
                graph.value(update->inputs[static_cast<size_t>(input)]).type);
    }
    for (ValueId out : update->outputs) EXPECT_TRUE(IsOutput(graph, out)) << update->name;
    EXPECT_EQ(training.updated_params.at(update->inputs[0]), update->outputs[0]);
  }
  EXPECT_TRUE(IsOutput(graph, training.loss));
  // batch_norm's outputs 3 and 4 are the running statistics, updated in place.
  const ir::Node& bn = graph.node(*graph.FindNode("bn"));
  EXPECT_TRUE(IsOutput(graph, bn.outputs[3]));
  EXPECT_TRUE(IsOutput(graph, bn.outputs[4]));
  // Loss, 2 running statistics, and param + m + v for each of 5 parameters.
  EXPECT_EQ(graph.outputs().size(), 1u + 2u + 3u * 5u);
}

TEST(TrainingGraph, ParametersOffThePathToTheLossAreReportedNotUpdated) {
  // "unused" feeds a relu whose result no one reads; "used" reaches the loss.
  ir::Graph graph("dead_branch");
  ir::GraphBuilder b(graph);
  const ValueId labels = b.Input("labels", ir::I64({2}));
  const ValueId used = b.Parameter("used", ir::F32({2, 3}));
  const ValueId unused = b.Parameter("unused", ir::F32({4}));
  b.Op(OpKind::kRelu, {unused}, {}, "dead");
  b.Output(b.Op(OpKind::kCrossEntropyLoss, {used, labels}, {}, "loss"));
  ASSERT_TRUE(b.ok()) << b.status();
  const TrainingGraph training = Build(graph);
  EXPECT_THAT(training.params_without_gradient, ElementsAre(unused));
  EXPECT_FALSE(training.param_grads.contains(unused));
  EXPECT_FALSE(training.updated_params.contains(unused));
  EXPECT_FALSE(training.graph.FindNode("update/unused").has_value());
  EXPECT_FALSE(training.graph.FindNode("bwd/dead").has_value());
  EXPECT_TRUE(training.graph.FindNode("update/used").has_value());
}

TEST(TrainingGraph, RejectsAGraphWithoutOneFloatScalarLoss) {
  ir::Graph not_scalar("not_scalar");
  ir::GraphBuilder b(not_scalar);
  const ValueId x = b.Input("x", ir::F32({4}));
  const ValueId w = b.Parameter("w", ir::F32({4}));
  const ValueId y = b.Op(OpKind::kMul, {x, w}, {}, "y");
  b.Output(y);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(not_scalar, {});
  ASSERT_FALSE(training.ok());
  EXPECT_THAT(std::string(StatusMessage(training.status())), HasSubstr("'y'"));
  EXPECT_THAT(std::string(StatusMessage(training.status())), HasSubstr("float scalar"));

  b.Output(y);  // two outputs
  EXPECT_THAT(std::string(StatusMessage(BuildTrainingGraph(not_scalar, {}).status())),
              HasSubstr("exactly one output"));
  EXPECT_FALSE(BuildTrainingGraph(ir::Graph("empty"), {}).ok());
}

TEST(TrainingGraph, RejectsAGraphThatIsAlreadyATrainingGraph) {
  const TrainingGraph training = Build(SmallCnn());
  ir::Graph again = training.graph;
  absl::StatusOr<TrainingGraph> twice = BuildTrainingGraph(again, {});
  ASSERT_FALSE(twice.ok());
  // Its first non-forward node is the seed.
  EXPECT_THAT(std::string(StatusMessage(twice.status())), HasSubstr("'grad/loss'"));
}

}  // namespace
}  // namespace spillway::autodiff
