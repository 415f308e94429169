#include "autodiff/saved_tensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "ir/builder.h"
#include "ir/verifier.h"

namespace spillway::autodiff {
namespace {

using ir::OpKind;
using ir::ValueId;

// images -> conv1 -> bn1 -> relu1 -> conv2 -> drop -> pool -> flatten -> fc -> loss
// on a 2x6x6x3 batch: conv1 and conv2 keep the 6x6 size (3x3, pad 1), 8 channels.
ir::Graph ConvBnReluConv() {
  ir::Graph graph("conv_bn_relu_conv");
  ir::GraphBuilder b(graph);
  const ValueId images = b.Input("images", ir::Activation({2, 6, 6, 3}));
  const ValueId labels = b.Input("labels", ir::I64({2}));
  const ValueId w1 = b.Parameter("conv1.weight", ir::F32({8, 3, 3, 3}));
  const ValueId gamma = b.Parameter("bn1.weight", ir::F32({8}));
  const ValueId beta = b.Parameter("bn1.bias", ir::F32({8}));
  const ValueId mean = b.Buffer("bn1.running_mean", ir::F32({8}));
  const ValueId var = b.Buffer("bn1.running_var", ir::F32({8}));
  const ValueId w2 = b.Parameter("conv2.weight", ir::F32({8, 3, 3, 8}));
  const ValueId fc_w = b.Parameter("fc.weight", ir::F32({4, 8}));
  const ir::AttrMap same = {{"pads", ir::IntList{1, 1, 1, 1}}};
  ValueId h = b.Op(OpKind::kConv2d, {images, w1}, same, "conv1");
  h = b.Op(OpKind::kBatchNorm, {h, gamma, beta, mean, var}, {}, "bn1");
  h = b.Op(OpKind::kRelu, {h}, {}, "relu1");
  h = b.Op(OpKind::kConv2d, {h, w2}, same, "conv2");
  h = b.Op(OpKind::kDropout, {h}, {{"p", 0.1}, {"seed", int64_t{3}}}, "drop");
  h = b.Op(OpKind::kGlobalAvgPool, {h}, {}, "pool");
  h = b.Op(OpKind::kFlatten, {h}, {}, "flatten");
  h = b.Op(OpKind::kLinear, {h, fc_w}, {}, "fc");
  b.Output(b.Op(OpKind::kCrossEntropyLoss, {h, labels}, {}, "loss"));
  EXPECT_TRUE(b.ok()) << b.status();
  return graph;
}

// value name -> names of the backward nodes that read it.
std::map<std::string, std::vector<std::string>> ByName(const ir::Graph& graph,
                                                       const std::vector<SavedTensor>& saved) {
  std::map<std::string, std::vector<std::string>> result;
  for (const SavedTensor& tensor : saved) {
    std::vector<std::string>& readers = result[graph.value(tensor.value).name];
    for (ir::NodeId reader : tensor.backward_readers) readers.push_back(graph.node(reader).name);
  }
  return result;
}

TEST(SavedTensors, ActivationsAreExactlyWhatTheRulesRead) {
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(ConvBnReluConv(), {});
  ASSERT_TRUE(training.ok()) << training.status();
  const ir::Graph& graph = training->graph;
  ASSERT_TRUE(ir::VerifyGraph(graph).ok()) << ir::VerifyGraph(graph);
  // batch_norm_backward reads bn's input x (conv1) and its saved statistics;
  // relu_backward reads relu's output, which conv2's weight gradient reads as
  // its x; linear_backward_weight reads fc's input; the loss's backward reads
  // the logits. conv2's output is not saved: dropout's backward replays the
  // mask from the seed, and global_avg_pool's backward needs only the shape.
  const std::map<std::string, std::vector<std::string>> expected = {
      {"conv1", {"bwd/bn1"}},
      {"bn1.saved_mean", {"bwd/bn1"}},
      {"bn1.saved_inv_std", {"bwd/bn1"}},
      {"relu1", {"bwd/conv2.weight", "bwd/relu1"}},  // node order: conv2 is differentiated first
      {"flatten", {"bwd/fc.weight"}},
      {"fc", {"bwd/loss"}},
  };
  EXPECT_EQ(ByName(graph, SavedTensors(graph)), expected);
}

TEST(SavedTensors, GraphInputsAreListedApart) {
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(ConvBnReluConv(), {});
  ASSERT_TRUE(training.ok()) << training.status();
  const ir::Graph& graph = training->graph;
  // conv1's weight gradient reads the images (conv1 needs no data gradient:
  // the images depend on no parameter); conv2's data gradient reads its
  // weight; batch_norm_backward reads gamma; fc's data gradient (a matmul)
  // reads fc.weight; the loss's backward reads the labels. conv1.weight is
  // read by nobody, since no data gradient flows into the images.
  const std::map<std::string, std::vector<std::string>> expected = {
      {"images", {"bwd/conv1.weight"}}, {"labels", {"bwd/loss"}},
      {"bn1.weight", {"bwd/bn1"}},      {"conv2.weight", {"bwd/conv2.data"}},
      {"fc.weight", {"bwd/fc.data"}},
  };
  EXPECT_EQ(ByName(graph, SavedGraphInputs(graph)), expected);
}

TEST(SavedTensors, SizesAndProducersComeFromTheForwardValues) {
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(ConvBnReluConv(), {});
  ASSERT_TRUE(training.ok()) << training.status();
  const ir::Graph& graph = training->graph;
  for (const SavedTensor& tensor : SavedTensors(graph)) {
    const ir::Value& value = graph.value(tensor.value);
    EXPECT_EQ(tensor.producer, value.producer) << value.name;
    EXPECT_EQ(graph.node(tensor.producer).phase, ir::Phase::kForward) << value.name;
    if (value.name == "relu1") {
      // 2·6·6·8 floats of 4 bytes.
      EXPECT_EQ(tensor.bytes, 2 * 6 * 6 * 8 * 4);
    }
    if (value.name == "bn1.saved_mean") {
      EXPECT_EQ(tensor.bytes, 8 * 4);  // 8 channels
    }
  }
  for (const SavedTensor& tensor : SavedGraphInputs(graph)) {
    EXPECT_EQ(tensor.producer, ir::kNoNode);
  }
}

TEST(SavedTensors, AForwardGraphSavesNothing) {
  const ir::Graph forward = ConvBnReluConv();
  EXPECT_TRUE(SavedTensors(forward).empty());
  EXPECT_TRUE(SavedGraphInputs(forward).empty());
}

}  // namespace
}  // namespace spillway::autodiff
