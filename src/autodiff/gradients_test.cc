#include "autodiff/gradients.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "autodiff/saved_tensors.h"
#include "autodiff/training_graph.h"
#include "fmt/format.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "ir/verifier.h"
#include "support/status_macros.h"

namespace spillway::autodiff {
namespace {

using ir::Activation;
using ir::F32;
using ir::I64;
using ir::IntList;
using ir::OpKind;
using ir::ValueId;
using ::testing::HasSubstr;

// One gradient rule under test: `build` adds the op (named "y") with its
// differentiable inputs as parameters and returns its output; the harness turns
// that output into a scalar loss. `saved` names the forward values (outputs or
// graph inputs) that the rule's backward nodes must read, and nothing else.
struct RuleCase {
  std::string name;
  std::function<ValueId(ir::GraphBuilder&)> build;
  std::vector<OpKind> backward_ops;  // each must appear among the backward nodes
  std::set<std::string> saved;
};

void PrintTo(const RuleCase& rule, std::ostream* os) { *os << rule.name; }

// y -> flatten(axis=0) to [1, N] -> cross_entropy_loss against one label: a
// scalar loss for any y, whose own backward reads only "head.flat" and
// "head.labels". A scalar y is the loss itself.
ir::Graph WithLossHead(const RuleCase& rule) {
  ir::Graph graph(rule.name);
  ir::GraphBuilder b(graph);
  const ValueId y = rule.build(b);
  if (b.ok() && b.type(y).rank() == 0) {
    b.Output(y);
  } else {
    const ValueId flat = b.Op(OpKind::kFlatten, {y}, {{"axis", int64_t{0}}}, "head.flat");
    const ValueId labels = b.Input("head.labels", I64({1}));
    b.Output(b.Op(OpKind::kCrossEntropyLoss, {flat, labels}, {}, "head.loss"));
  }
  EXPECT_TRUE(b.ok()) << rule.name << ": " << b.status();
  return graph;
}

std::vector<RuleCase> RuleCases() {
  std::vector<RuleCase> cases;
  cases.push_back(
      {"conv2d_grouped_strided_with_bias",
       [](ir::GraphBuilder& b) {
         // 5x5 input, 3x3 kernel, stride 2, pad 1: (5+2-3)/2+1 = 3.
         const ValueId x = b.Parameter("x", Activation({1, 5, 5, 4}));
         const ValueId w = b.Parameter("w", F32({6, 3, 3, 2}));
         const ValueId bias = b.Parameter("b", F32({6}));
         return b.Op(
             OpKind::kConv2d, {x, w, bias},
             {{"strides", IntList{2, 2}}, {"pads", IntList{1, 1, 1, 1}}, {"groups", int64_t{2}}},
             "y");
       },
       {OpKind::kConv2dBackwardData, OpKind::kConv2dBackwardWeight, OpKind::kReduceSum},
       {"x", "w"}});
  auto batch_norm = [](bool training) {
    return [training](ir::GraphBuilder& b) {
      const ValueId x = b.Parameter("x", Activation({2, 3, 3, 4}));
      const ValueId gamma = b.Parameter("gamma", F32({4}));
      const ValueId beta = b.Parameter("beta", F32({4}));
      const ValueId mean = b.Buffer("running_mean", F32({4}));
      const ValueId var = b.Buffer("running_var", F32({4}));
      return b.Op(OpKind::kBatchNorm, {x, gamma, beta, mean, var}, {{"training", training}}, "y");
    };
  };
  cases.push_back({"batch_norm_training",
                   batch_norm(true),
                   {OpKind::kBatchNormBackward},
                   {"x", "gamma", "y.saved_mean", "y.saved_inv_std"}});
  cases.push_back({"batch_norm_inference",
                   batch_norm(false),
                   {OpKind::kBatchNormBackward},
                   {"x", "gamma", "running_mean", "running_var"}});
  cases.push_back({"relu",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kRelu, {b.Parameter("x", F32({3, 4}))}, {}, "y");
                   },
                   {OpKind::kReluBackward},
                   {"y"}});  // relu reads its output, not its input
  cases.push_back({"gelu_tanh",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kGelu, {b.Parameter("x", F32({3, 4}))},
                                 {{"approximate", std::string("tanh")}}, "y");
                   },
                   {OpKind::kGeluBackward},
                   {"x"}});
  cases.push_back({"sigmoid",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kSigmoid, {b.Parameter("x", F32({3, 4}))}, {}, "y");
                   },
                   {OpKind::kSigmoidBackward},
                   {"y"}});  // the derivative is a function of the output
  cases.push_back(
      {"tanh",
       [](ir::GraphBuilder& b) {
         return b.Op(OpKind::kTanh, {b.Parameter("x", Activation({1, 2, 2, 3}))}, {}, "y");
       },
       {OpKind::kTanhBackward},
       {"y"}});
  cases.push_back(
      {"leaky_relu",
       [](ir::GraphBuilder& b) {
         return b.Op(OpKind::kLeakyRelu, {b.Parameter("x", F32({3, 4}))}, {{"alpha", 0.2}}, "y");
       },
       {OpKind::kLeakyReluBackward},
       {"x"}});
  cases.push_back({"clip",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kClip, {b.Parameter("x", Activation({1, 2, 2, 3}))},
                                 {{"min", 0.0}, {"max", 6.0}}, "y");
                   },
                   {OpKind::kClipBackward},
                   {"y"}});  // as relu: where y is strictly inside the bounds, so is x
  cases.push_back({"max_pool",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kMaxPool, {b.Parameter("x", Activation({1, 4, 4, 2}))},
                                 {{"kernel", IntList{2, 2}}}, "y");
                   },
                   {OpKind::kMaxPoolBackward},
                   {"x"}});
  cases.push_back(
      {"avg_pool_padded",
       [](ir::GraphBuilder& b) {
         return b.Op(
             OpKind::kAvgPool, {b.Parameter("x", Activation({1, 4, 4, 2}))},
             {{"kernel", IntList{3, 3}}, {"strides", IntList{1, 1}}, {"pads", IntList{1, 1, 1, 1}}},
             "y");
       },
       {OpKind::kAvgPoolBackward},
       {}});
  cases.push_back(
      {"global_avg_pool",
       [](ir::GraphBuilder& b) {
         return b.Op(OpKind::kGlobalAvgPool, {b.Parameter("x", Activation({2, 3, 3, 4}))}, {}, "y");
       },
       {OpKind::kGlobalAvgPoolBackward},
       {}});
  cases.push_back({"add_broadcast_both_ways",
                   [](ir::GraphBuilder& b) {
                     // [3,1] + [2,1,5] = [2,3,5]: a's gradient sums axes 0 (prepended)
                     // and 2 (stretched), b's sums axis 1 (stretched).
                     const ValueId a = b.Parameter("a", F32({3, 1}));
                     const ValueId other = b.Parameter("b", F32({2, 1, 5}));
                     return b.Op(OpKind::kAdd, {a, other}, {}, "y");
                   },
                   {OpKind::kReduceSum, OpKind::kReshape},
                   {}});
  cases.push_back({"mul_channel_scale",
                   [](ir::GraphBuilder& b) {
                     const ValueId x = b.Parameter("x", Activation({2, 2, 2, 4}));
                     const ValueId scale = b.Parameter("s", F32({4}));
                     return b.Op(OpKind::kMul, {x, scale}, {}, "y");
                   },
                   {OpKind::kMul, OpKind::kReduceSum},
                   {"x", "s"}});
  cases.push_back({"sub_broadcast_both_ways",
                   [](ir::GraphBuilder& b) {
                     // As add: b's gradient is summed over axis 1, then negated.
                     const ValueId a = b.Parameter("a", F32({3, 1}));
                     const ValueId other = b.Parameter("b", F32({2, 1, 5}));
                     return b.Op(OpKind::kSub, {a, other}, {}, "y");
                   },
                   {OpKind::kReduceSum, OpKind::kReshape, OpKind::kFill, OpKind::kSub},
                   {}});
  cases.push_back({"div_by_channel_scale",
                   [](ir::GraphBuilder& b) {
                     const ValueId x = b.Parameter("x", Activation({2, 2, 2, 4}));
                     const ValueId scale = b.Parameter("s", F32({4}));
                     return b.Op(OpKind::kDiv, {x, scale}, {}, "y");
                   },
                   {OpKind::kDiv, OpKind::kMul, OpKind::kReduceSum, OpKind::kSub},
                   {"s", "y"}});
  cases.push_back({"div_by_constant",
                   [](ir::GraphBuilder& b) {
                     // Only the dividend needs a gradient: y is not saved.
                     const ValueId x = b.Parameter("x", F32({3, 4}));
                     const ValueId divisor = b.Input("d", F32({4}));
                     return b.Op(OpKind::kDiv, {x, divisor}, {}, "y");
                   },
                   {OpKind::kDiv},
                   {"d"}});
  cases.push_back({"concat_channels",
                   [](ir::GraphBuilder& b) {
                     const ValueId x0 = b.Parameter("x0", Activation({1, 2, 2, 3}));
                     const ValueId x1 = b.Parameter("x1", Activation({1, 2, 2, 5}));
                     return b.Op(OpKind::kConcat, {x0, x1}, {{"axis", int64_t{-1}}}, "y");
                   },
                   {OpKind::kSlice},
                   {}});
  cases.push_back({"slice_strided",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kSlice, {b.Parameter("x", F32({4, 6}))},
                                 {{"axes", IntList{1}},
                                  {"starts", IntList{1}},
                                  {"ends", IntList{6}},
                                  {"steps", IntList{2}}},
                                 "y");
                   },
                   {OpKind::kSliceBackward},
                   {}});
  cases.push_back({"resize_bilinear",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kResizeBilinear,
                                 {b.Parameter("x", Activation({1, 2, 3, 2}))},
                                 {{"size", IntList{4, 6}}}, "y");
                   },
                   {OpKind::kResizeBilinearBackward},
                   {}});
  cases.push_back({"resize_nearest",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kResizeNearest,
                                 {b.Parameter("x", Activation({1, 2, 3, 2}))},
                                 {{"size", IntList{5, 6}}}, "y");
                   },
                   {OpKind::kResizeNearestBackward},
                   {}});
  for (const bool transpose_a : {false, true}) {
    for (const bool transpose_b : {false, true}) {
      cases.push_back(
          {fmt::format("matmul_ta{}_tb{}_batch_broadcast", static_cast<int>(transpose_a),
                       static_cast<int>(transpose_b)),
           [transpose_a, transpose_b](ir::GraphBuilder& b) {
             // a is a batch of two [3,4] (M=3, K=4) matrices, b one [4,5] matrix
             // broadcast over the batch, so b's gradient sums over it.
             const ValueId a =
                 b.Parameter("a", F32(transpose_a ? ir::Shape{2, 4, 3} : ir::Shape{2, 3, 4}));
             const ValueId rhs =
                 b.Parameter("b", F32(transpose_b ? ir::Shape{5, 4} : ir::Shape{4, 5}));
             return b.Op(
                 OpKind::kMatMul, {a, rhs},
                 {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}, {"alpha", 0.5}}, "y");
           },
           {OpKind::kMatMul, OpKind::kReduceSum},
           {"a", "b"}});
    }
  }
  cases.push_back({"linear_rank3_with_bias",
                   [](ir::GraphBuilder& b) {
                     const ValueId x = b.Parameter("x", F32({2, 3, 4}));
                     const ValueId w = b.Parameter("w", F32({5, 4}));
                     const ValueId bias = b.Parameter("b", F32({5}));
                     return b.Op(OpKind::kLinear, {x, w, bias}, {}, "y");
                   },
                   {OpKind::kMatMul, OpKind::kLinearBackwardWeight, OpKind::kReduceSum},
                   {"x", "w"}});
  cases.push_back({"linear_over_nhwc_channels",
                   [](ir::GraphBuilder& b) {
                     // matmul gives a row-major dx; a reshape restores the NHWC tag.
                     const ValueId x = b.Parameter("x", Activation({1, 2, 2, 4}));
                     const ValueId w = b.Parameter("w", F32({3, 4}));
                     return b.Op(OpKind::kLinear, {x, w}, {}, "y");
                   },
                   {OpKind::kMatMul, OpKind::kLinearBackwardWeight, OpKind::kReshape},
                   {"x", "w"}});
  cases.push_back({"linear_single_row_with_bias",
                   [](ir::GraphBuilder& b) {
                     const ValueId x = b.Parameter("x", F32({4}));
                     const ValueId w = b.Parameter("w", F32({3, 4}));
                     const ValueId bias = b.Parameter("b", F32({3}));
                     return b.Op(OpKind::kLinear, {x, w, bias}, {}, "y");
                   },
                   {OpKind::kMatMul, OpKind::kLinearBackwardWeight, OpKind::kReshape},
                   {"x", "w"}});
  cases.push_back(
      {"softmax_causal",
       [](ir::GraphBuilder& b) {
         return b.Op(OpKind::kSoftmax, {b.Parameter("x", F32({2, 3, 3}))}, {{"causal", true}}, "y");
       },
       {OpKind::kSoftmaxBackward},
       {"y"}});
  cases.push_back({"log_softmax",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kLogSoftmax, {b.Parameter("x", F32({2, 5}))}, {}, "y");
                   },
                   {OpKind::kLogSoftmaxBackward},
                   {"y"}});
  cases.push_back({"cross_entropy_loss",
                   [](ir::GraphBuilder& b) {
                     const ValueId logits = b.Parameter("logits", F32({4, 3}));
                     const ValueId labels = b.Input("labels", I64({4}));
                     return b.Op(OpKind::kCrossEntropyLoss, {logits, labels}, {}, "y");
                   },
                   {OpKind::kCrossEntropyLossBackward},
                   {"logits", "labels"}});
  cases.push_back({"layer_norm",
                   [](ir::GraphBuilder& b) {
                     const ValueId x = b.Parameter("x", F32({2, 3, 8}));
                     const ValueId gamma = b.Parameter("gamma", F32({8}));
                     const ValueId beta = b.Parameter("beta", F32({8}));
                     return b.Op(OpKind::kLayerNorm, {x, gamma, beta}, {}, "y");
                   },
                   {OpKind::kLayerNormBackward},
                   {"x", "gamma", "y.mean", "y.rstd"}});
  cases.push_back({"embedding",
                   [](ir::GraphBuilder& b) {
                     const ValueId table = b.Parameter("table", F32({10, 4}));
                     const ValueId indices = b.Input("indices", I64({2, 3}));
                     return b.Op(OpKind::kEmbedding, {table, indices}, {}, "y");
                   },
                   {OpKind::kEmbeddingBackward},
                   {"indices"}});
  cases.push_back({"dropout",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kDropout, {b.Parameter("x", F32({3, 4}))},
                                 {{"p", 0.25}, {"seed", int64_t{42}}}, "y");
                   },
                   {OpKind::kDropoutBackward},
                   {}});  // the mask is replayed from the seed
  cases.push_back({"reshape_from_nhwc",
                   [](ir::GraphBuilder& b) {
                     return b.Op(OpKind::kReshape, {b.Parameter("x", Activation({1, 2, 2, 4}))},
                                 {{"shape", IntList{4, 4}}}, "y");
                   },
                   {OpKind::kReshape},
                   {}});
  cases.push_back({"transpose",
                   [](ir::GraphBuilder& b) {
                     // The inverse of [1,2,0] is [2,0,1]; the same perm would give
                     // [4,2,3] instead of x's [2,3,4] and fail the type check.
                     return b.Op(OpKind::kTranspose, {b.Parameter("x", F32({2, 3, 4}))},
                                 {{"perm", IntList{1, 2, 0}}}, "y");
                   },
                   {OpKind::kTranspose},
                   {}});
  cases.push_back(
      {"flatten_nhwc",
       [](ir::GraphBuilder& b) {
         return b.Op(OpKind::kFlatten, {b.Parameter("x", Activation({2, 2, 2, 3}))}, {}, "y");
       },
       {OpKind::kReshape},
       {}});
  return cases;
}

class GradientRuleTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(GradientRuleTest, GradientsHaveTheInputTypesAndReadExactlyTheSavedValues) {
  const RuleCase& rule = GetParam();
  const ir::Graph forward = WithLossHead(rule);
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(forward, {});
  ASSERT_TRUE(training.ok()) << training.status();
  const ir::Graph& graph = training->graph;
  EXPECT_TRUE(ir::VerifyGraph(graph).ok()) << ir::VerifyGraph(graph);

  // Every parameter's gradient has the parameter's full type (dtype, shape and
  // layout), which Graph::AddNode inferred through the backward nodes.
  EXPECT_TRUE(training->params_without_gradient.empty());
  for (ValueId param : forward.InputsOfKind(ir::ValueKind::kParameter)) {
    ASSERT_TRUE(training->param_grads.contains(param)) << forward.value(param).name;
    EXPECT_EQ(graph.value(training->param_grads.at(param)).type, forward.value(param).type)
        << forward.value(param).name << " gets "
        << ir::TypeToString(graph.value(training->param_grads.at(param)).type);
  }

  std::set<OpKind> emitted;
  for (const ir::Node& node : graph.nodes()) {
    if (node.phase == ir::Phase::kBackward) emitted.insert(node.op);
  }
  for (OpKind op : rule.backward_ops) {
    EXPECT_TRUE(emitted.contains(op)) << "no " << ir::OpName(op) << " node";
  }

  std::set<std::string> saved;
  for (const SavedTensor& tensor : SavedTensors(graph))
    saved.insert(graph.value(tensor.value).name);
  for (const SavedTensor& tensor : SavedGraphInputs(graph)) {
    saved.insert(graph.value(tensor.value).name);
  }
  // The loss head's own backward reads the logits and the label.
  saved.erase("head.flat");
  saved.erase("head.labels");
  EXPECT_EQ(saved, rule.saved);
}

INSTANTIATE_TEST_SUITE_P(EveryRule, GradientRuleTest, ::testing::ValuesIn(RuleCases()),
                         [](const ::testing::TestParamInfo<RuleCase>& param_info) {
                           return param_info.param.name;
                         });

TEST(GradientRules, EveryDifferentiableForwardOpHasARule) {
  int differentiable = 0;
#define SPILLWAY_CHECK_RULE(name, text)                                            \
  if (ir::GetOpDef(OpKind::k##name).differentiable) {                              \
    ++differentiable;                                                              \
    EXPECT_TRUE(HasGradientRule(OpKind::k##name)) << text " has no gradient rule"; \
  }
  SPILLWAY_FORWARD_OPS(SPILLWAY_CHECK_RULE)
#undef SPILLWAY_CHECK_RULE
  // docs/ops.md's forward table has 31 ops; fill is the only one without a gradient.
  EXPECT_EQ(differentiable, 30);
  EXPECT_FALSE(HasGradientRule(OpKind::kFill));
  EXPECT_FALSE(HasGradientRule(OpKind::kReduceSum));
}

TEST(GradientRules, AnOpWithoutARuleOnThePathToTheLossIsAnErrorNamingTheNode) {
  // reduce_sum is a backward op with no gradient rule; used in a forward graph
  // between a parameter and the loss it must be reported, not skipped.
  ir::Graph graph("no_rule");
  ir::GraphBuilder b(graph);
  const ValueId w = b.Parameter("w", F32({4}));
  b.Output(b.Op(OpKind::kReduceSum, {w}, {{"axes", IntList{0}}}, "total"));
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(graph, {});
  ASSERT_FALSE(training.ok());
  EXPECT_EQ(training.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(StatusMessage(training.status())), HasSubstr("'total'"));
  EXPECT_THAT(std::string(StatusMessage(training.status())), HasSubstr("reduce_sum"));
}

}  // namespace
}  // namespace spillway::autodiff
