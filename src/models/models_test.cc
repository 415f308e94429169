#include "models/models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <set>
#include <string>

#include "ir/op_registry.h"
#include "ir/verifier.h"
#include "support/status_macros.h"

namespace spillway::models {
namespace {

using ::testing::HasSubstr;

// Trainable parameters: kParameter inputs only (running statistics are buffers).
int64_t ParameterCount(const ir::Graph& graph) {
  int64_t count = 0;
  for (ir::ValueId id : graph.InputsOfKind(ir::ValueKind::kParameter)) {
    count += *ir::NumElements(graph.value(id).type.shape);
  }
  return count;
}

int64_t BufferElements(const ir::Graph& graph) {
  int64_t count = 0;
  for (ir::ValueId id : graph.InputsOfKind(ir::ValueKind::kBuffer)) {
    count += *ir::NumElements(graph.value(id).type.shape);
  }
  return count;
}

int64_t ForwardMacs(const ir::Graph& graph) {
  int64_t macs = 0;
  for (const ir::Node& node : graph.nodes()) macs += ir::NodeCost(graph, node).macs;
  return macs;
}

ir::Graph Build(std::string_view name, const ModelOptions& options = {}) {
  absl::StatusOr<ir::Graph> graph = BuildModel(name, options);
  EXPECT_TRUE(graph.ok()) << StatusMessage(graph.status());
  return graph.ok() ? *std::move(graph) : ir::Graph();
}

const ir::TensorType& TypeOf(const ir::Graph& graph, std::string_view value) {
  std::optional<ir::ValueId> id = graph.FindValue(value);
  EXPECT_TRUE(id.has_value()) << "no value " << value;
  static const ir::TensorType kMissing;
  return id.has_value() ? graph.value(*id).type : kMissing;
}

const ir::Node* NodeNamed(const ir::Graph& graph, std::string_view name) {
  std::optional<ir::NodeId> id = graph.FindNode(name);
  EXPECT_TRUE(id.has_value()) << "no node " << name;
  return id.has_value() ? &graph.node(*id) : nullptr;
}

int CountOps(const ir::Graph& graph, ir::OpKind op) {
  int count = 0;
  for (const ir::Node& node : graph.nodes()) count += node.op == op ? 1 : 0;
  return count;
}

struct PublishedModel {
  std::string name;
  int64_t parameters;  // torchvision's model card, 1000 classes
  double gmacs;        // torchvision's "GFLOPS" column, which counts MACs, at 224x224
};

class PublishedModelTest : public ::testing::TestWithParam<PublishedModel> {};

TEST_P(PublishedModelTest, MatchesTorchvisionParametersAndMacs) {
  const PublishedModel& expected = GetParam();
  ir::Graph graph = Build(expected.name);
  EXPECT_EQ(ParameterCount(graph), expected.parameters);
  // Only convolutions and linear layers report MACs, as torchvision counts them.
  const double gmacs = static_cast<double>(ForwardMacs(graph)) / 1e9;
  EXPECT_NEAR(gmacs, expected.gmacs, 0.02 * expected.gmacs);
}

INSTANTIATE_TEST_SUITE_P(Torchvision, PublishedModelTest,
                         ::testing::Values(PublishedModel{"resnet18", 11'689'512, 1.81},
                                           PublishedModel{"resnet34", 21'797'672, 3.66},
                                           PublishedModel{"resnet50", 25'557'032, 4.09},
                                           PublishedModel{"resnet101", 44'549'160, 7.80},
                                           PublishedModel{"resnet152", 60'192'808, 11.51},
                                           PublishedModel{"vgg16", 138'357'544, 15.47}),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(ModelsTest, EveryModelVerifiesAndEndsInOneScalarLoss) {
  for (const ModelInfo& info : ListModels()) {
    SCOPED_TRACE(info.name);
    ir::Graph graph = Build(info.name);
    absl::Status verified = ir::VerifyGraph(graph);
    EXPECT_TRUE(verified.ok()) << StatusMessage(verified);
    ASSERT_EQ(graph.outputs().size(), 1u);
    const ir::Value& loss = graph.value(graph.outputs()[0]);
    EXPECT_EQ(loss.name, "loss");
    EXPECT_EQ(loss.type, ir::F32({}));
    ASSERT_NE(loss.producer, ir::kNoNode);
    EXPECT_EQ(graph.node(loss.producer).op, ir::OpKind::kCrossEntropyLoss);
  }
}

TEST(ResNetTest, NamesFollowTorchvision) {
  ir::Graph graph = Build("resnet50");
  EXPECT_EQ(TypeOf(graph, "conv1.weight"), ir::F32({64, 7, 7, 3}));
  EXPECT_EQ(TypeOf(graph, "layer1.0.conv1.weight"), ir::F32({64, 1, 1, 64}));
  EXPECT_EQ(TypeOf(graph, "layer1.0.downsample.0.weight"), ir::F32({256, 1, 1, 64}));
  EXPECT_EQ(TypeOf(graph, "fc.weight"), ir::F32({1000, 2048}));
  std::optional<ir::ValueId> running_mean = graph.FindValue("layer1.0.bn1.running_mean");
  ASSERT_TRUE(running_mean.has_value());
  EXPECT_EQ(graph.value(*running_mean).kind, ir::ValueKind::kBuffer);
  // v1.5: the stride of layer2's first block sits on its 3x3 conv.
  const ir::Node* conv2 = NodeNamed(graph, "layer2.0.conv2");
  ASSERT_NE(conv2, nullptr);
  EXPECT_EQ(conv2->attrs.Ints("strides"), (ir::IntList{2, 2}));
  EXPECT_EQ(TypeOf(graph, "layer4.2.relu"), ir::Activation({1, 7, 7, 2048}));
  // Batch-norm gamma and beta are 53,120 of the 25,557,032 parameters; the
  // running mean and variance have as many elements but are buffers.
  EXPECT_EQ(BufferElements(graph), 53'120);
  EXPECT_EQ(CountOps(graph, ir::OpKind::kBatchNorm), 53);
  EXPECT_EQ(CountOps(graph, ir::OpKind::kConv2d), 53);
}

TEST(ResNetTest, BaseWidthScalesTheStages) {
  ModelOptions options;
  options.base_width = 32;
  ir::Graph graph = Build("resnet50", options);
  EXPECT_EQ(TypeOf(graph, "fc.weight"), ir::F32({1000, 1024}));
  EXPECT_EQ(TypeOf(graph, "layer1.0.conv1.weight"), ir::F32({32, 1, 1, 32}));
}

TEST(ResNetTest, PaddedWindowsAcceptTinyImages) {
  // Every window of a ResNet is padded, so even 16x16 reaches layer4 (at 1x1),
  // as it does in torchvision.
  ModelOptions options;
  options.height = 16;
  options.width = 16;
  ir::Graph graph = Build("resnet50", options);
  EXPECT_EQ(TypeOf(graph, "layer4.2.relu"), ir::Activation({1, 1, 1, 2048}));
}

TEST(ResNetTest, HugeImageBuildsInMilliseconds) {
  // The paper's largest ResNet-50 input: building is shape inference only.
  ModelOptions options;
  options.height = 8000;
  options.width = 8000;
  const auto start = std::chrono::steady_clock::now();
  ir::Graph graph = Build("resnet50", options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(TypeOf(graph, "layer4.2.relu"), ir::Activation({1, 250, 250, 2048}));
  // Typically a few milliseconds; the bound only catches work that grows with pixels.
  EXPECT_LT(seconds, 2.0);
  std::cout << "resnet50 at 8000x8000 built in " << seconds * 1e3 << " ms\n";
}

TEST(Vgg16Test, LayoutAndSeeds) {
  ir::Graph graph = Build("vgg16");
  EXPECT_EQ(TypeOf(graph, "features.0.weight"), ir::F32({64, 3, 3, 3}));
  EXPECT_EQ(TypeOf(graph, "features.0.bias"), ir::F32({64}));
  EXPECT_EQ(TypeOf(graph, "features.30"), ir::Activation({1, 7, 7, 512}));
  EXPECT_EQ(TypeOf(graph, "classifier.0.weight"), ir::F32({4096, 25088}));
  // At 224x224 the adaptive pool to 7x7 is the identity and is left out.
  EXPECT_FALSE(graph.FindNode("avgpool").has_value());
  const ir::Node* first = NodeNamed(graph, "classifier.2");
  const ir::Node* second = NodeNamed(graph, "classifier.5");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->attrs.Float("p"), 0.5);
  EXPECT_NE(first->attrs.Int("seed"), second->attrs.Int("seed"));
}

TEST(Vgg16Test, MultipleOfSevenPoolsToSeven) {
  // 448 / 32 = 14: a 2x2 average pool is exactly the adaptive pool to 7x7.
  ModelOptions options;
  options.height = 448;
  options.width = 448;
  ir::Graph graph = Build("vgg16", options);
  const ir::Node* pool = NodeNamed(graph, "avgpool");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->attrs.Ints("kernel"), (ir::IntList{2, 2}));
  EXPECT_EQ(ParameterCount(graph), 138'357'544);
}

TEST(Vgg16Test, OtherFeatureSizesAreRejected) {
  ModelOptions options;
  options.height = 320;  // feature map 10x10
  options.width = 320;
  absl::StatusOr<ir::Graph> graph = BuildModel("vgg16", options);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("10x10"));
}

TEST(Vgg16Test, TooSmallImageNamesTheLayer) {
  // 16 -> 8 -> 4 -> 2 -> 1: the fifth 2x2 pool, features.30, has no window.
  ModelOptions options;
  options.height = 16;
  options.width = 16;
  absl::StatusOr<ir::Graph> graph = BuildModel("vgg16", options);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("features.30"));
}

// ResNet-50 without fc (25,557,032 - 2,049,000 = 23,508,032) plus the head,
// 16,844,149; derivation in docs/models.md.
constexpr int64_t kDeepLabHeadParameters = 16'844'149;

TEST(DeepLabV3PlusTest, ParametersAndShapes) {
  ir::Graph graph = Build("deeplabv3plus");
  EXPECT_EQ(ParameterCount(graph), 23'508'032 + kDeepLabHeadParameters);
  EXPECT_EQ(ParameterCount(graph), 40'352'181);
  // Output stride 16: layer4 keeps layer3's 14x14 at 224x224.
  EXPECT_EQ(TypeOf(graph, "backbone.layer4.2.relu"), ir::Activation({1, 14, 14, 2048}));
  EXPECT_EQ(TypeOf(graph, "aspp.concat"), ir::Activation({1, 14, 14, 1280}));
  EXPECT_EQ(TypeOf(graph, "aspp.pool.resize"), ir::Activation({1, 14, 14, 256}));
  // The logits before the final resize are at stride 4.
  EXPECT_EQ(TypeOf(graph, "decoder.classifier"), ir::Activation({1, 56, 56, 21}));
  EXPECT_EQ(TypeOf(graph, "upsample"), ir::Activation({1, 224, 224, 21}));
  EXPECT_EQ(TypeOf(graph, "labels"), ir::I64({1, 224, 224}));
  const ir::Node* loss = NodeNamed(graph, "loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->attrs.Int("ignore_index"), 255);
  // torchvision's dilation: layer4's first block keeps dilation 1 at stride 1.
  const ir::Node* first = NodeNamed(graph, "backbone.layer4.0.conv2");
  const ir::Node* second = NodeNamed(graph, "backbone.layer4.1.conv2");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->attrs.Ints("strides"), (ir::IntList{1, 1}));
  EXPECT_EQ(first->attrs.Ints("dilations"), (ir::IntList{1, 1}));
  EXPECT_EQ(second->attrs.Ints("dilations"), (ir::IntList{2, 2}));
  EXPECT_EQ(second->attrs.Ints("pads"), (ir::IntList{2, 2, 2, 2}));
  const ir::Node* aspp3 = NodeNamed(graph, "aspp.branch3.conv");
  ASSERT_NE(aspp3, nullptr);
  EXPECT_EQ(aspp3->attrs.Ints("dilations"), (ir::IntList{18, 18}));
  EXPECT_EQ(CountOps(graph, ir::OpKind::kDropout), 1);
}

TEST(DeepLabV3PlusTest, ResNet101Backbone) {
  ModelOptions options;
  options.backbone = "resnet101";
  options.height = 1000;  // the paper's size
  options.width = 1000;
  ir::Graph graph = Build("deeplabv3plus", options);
  // ResNet-101 without fc: 44,549,160 - 2,049,000.
  EXPECT_EQ(ParameterCount(graph), 42'500'160 + kDeepLabHeadParameters);
  // 1000 -> 500 (conv1) -> 250 (maxpool, layer1) -> 125 -> 63 (layer3, layer4).
  EXPECT_EQ(TypeOf(graph, "backbone.layer4.2.relu"), ir::Activation({1, 63, 63, 2048}));
  EXPECT_EQ(TypeOf(graph, "decoder.classifier"), ir::Activation({1, 250, 250, 21}));
  EXPECT_EQ(TypeOf(graph, "upsample"), ir::Activation({1, 1000, 1000, 21}));
}

TEST(DeepLabV3PlusTest, UnknownBackbone) {
  ModelOptions options;
  options.backbone = "resnet18";
  absl::StatusOr<ir::Graph> graph = BuildModel("deeplabv3plus", options);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("backbone"));
}

TEST(UNetTest, ParametersAndShapes) {
  ir::Graph graph = Build("unet");
  // Level by level (3x3 convs with bias; the 2x2 up-conv has the parameters of
  // a 2x2 transposed conv): 38,720 + 221,440 + 885,248 + 3,539,968 +
  // 14,157,824 down, 9,176,576 + 2,294,528 + 573,824 + 143,552 up, 130 outc.
  EXPECT_EQ(ParameterCount(graph), 31'031'810);
  EXPECT_EQ(TypeOf(graph, "down4.relu2"), ir::Activation({1, 14, 14, 1024}));
  EXPECT_EQ(TypeOf(graph, "up1.up_conv"), ir::Activation({1, 28, 28, 512}));
  EXPECT_EQ(TypeOf(graph, "up1.concat"), ir::Activation({1, 28, 28, 1024}));
  EXPECT_EQ(TypeOf(graph, "up4.relu2"), ir::Activation({1, 224, 224, 64}));
  EXPECT_EQ(TypeOf(graph, "outc"), ir::Activation({1, 224, 224, 2}));
}

TEST(UNetTest, OneInputChannelIsThePapersNetwork) {
  // The paper's grey-scale input: the first conv loses 9 * 2 * 64 = 1,152 weights.
  ModelOptions options;
  options.in_channels = 1;
  EXPECT_EQ(ParameterCount(Build("unet", options)), 31'030'658);
}

TEST(UNetTest, DepthAndWidth) {
  ModelOptions options;
  options.depth = 2;
  options.base_width = 8;
  options.height = 12;
  options.width = 20;
  options.classes = 5;
  ir::Graph graph = Build("unet", options);
  EXPECT_EQ(TypeOf(graph, "down2.relu2"), ir::Activation({1, 3, 5, 32}));
  EXPECT_EQ(TypeOf(graph, "outc"), ir::Activation({1, 12, 20, 5}));
  EXPECT_FALSE(graph.FindNode("down3.pool").has_value());
}

TEST(UNetTest, SizeNotDivisibleByTwoToTheDepth) {
  ModelOptions options;
  options.height = 100;  // not a multiple of 16
  absl::StatusOr<ir::Graph> graph = BuildModel("unet", options);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("divisible by 2^depth = 16"));
}

TEST(Gpt2Test, Gpt2SmallHas124MParameters) {
  ir::Graph graph = Build("gpt2");
  // wte 50257*768 + wpe 1024*768 + 12 blocks of 7,087,872 + ln_f 1,536.
  EXPECT_EQ(ParameterCount(graph), 124'439'808);
  EXPECT_EQ(TypeOf(graph, "h.0.attn.c_attn.weight"), ir::F32({2304, 768}));
  EXPECT_EQ(TypeOf(graph, "h.0.attn.q.transpose"), ir::F32({1, 12, 1024, 64}));
  EXPECT_EQ(TypeOf(graph, "h.11.attn.scores"), ir::F32({1, 12, 1024, 1024}));
  EXPECT_EQ(TypeOf(graph, "h.11.add_2"), ir::F32({1, 1024, 768}));
  // Tied head: the logits come from wte, no extra parameter.
  EXPECT_EQ(TypeOf(graph, "lm_head"), ir::F32({1, 1024, 50257}));
  EXPECT_FALSE(graph.FindValue("lm_head.weight").has_value());
  const ir::Node* softmax = NodeNamed(graph, "h.0.attn.softmax");
  ASSERT_NE(softmax, nullptr);
  EXPECT_TRUE(softmax->attrs.Bool("causal"));
  const ir::Node* scores = NodeNamed(graph, "h.0.attn.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_DOUBLE_EQ(scores->attrs.Float("alpha"), 0.125);  // 1 / sqrt(64)
}

TEST(Gpt2Test, DropoutSeedsAreDistinct) {
  ir::Graph graph = Build("gpt2");
  // One after the embeddings, three per block (attention, two residuals).
  std::set<int64_t> seeds;
  int dropouts = 0;
  for (const ir::Node& node : graph.nodes()) {
    if (node.op != ir::OpKind::kDropout) continue;
    ++dropouts;
    EXPECT_DOUBLE_EQ(node.attrs.Float("p"), 0.1);
    seeds.insert(node.attrs.Int("seed"));
  }
  EXPECT_EQ(dropouts, 37);
  EXPECT_EQ(seeds.size(), 37u);

  ModelOptions options;
  options.dropout = 0.0;
  EXPECT_EQ(CountOps(Build("gpt2", options), ir::OpKind::kDropout), 0);
}

TEST(Gpt2Test, SmallConfig) {
  ModelOptions options;
  options.n_layer = 2;
  options.n_head = 4;
  options.d_model = 64;
  options.seq_len = 16;
  options.vocab = 100;
  options.batch = 3;
  ir::Graph graph = Build("gpt2", options);
  // wte 6,400 + wpe 1,024 + 2 blocks of 12*64^2 + 13*64 = 49,984 + ln_f 128.
  EXPECT_EQ(ParameterCount(graph), 6'400 + 1'024 + 2 * 49'984 + 128);
  EXPECT_EQ(TypeOf(graph, "lm_head"), ir::F32({3, 16, 100}));
}

TEST(Gpt2Test, HeadsMustDivideTheWidth) {
  ModelOptions options;
  options.n_head = 5;
  absl::StatusOr<ir::Graph> graph = BuildModel("gpt2", options);
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("n_head"));
}

TEST(ModelsErrorTest, UnknownModelListsTheKnownOnes) {
  absl::StatusOr<ir::Graph> graph = BuildModel("alexnet", {});
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("alexnet"));
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("resnet50"));
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("gpt2"));
}

TEST(ModelsErrorTest, NonPositiveOptionsAreNamed) {
  for (const ModelInfo& info : ListModels()) {
    SCOPED_TRACE(info.name);
    ModelOptions options;
    options.batch = 0;
    absl::StatusOr<ir::Graph> graph = BuildModel(info.name, options);
    ASSERT_FALSE(graph.ok());
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("'batch'"));
  }
  ModelOptions options;
  options.classes = 0;
  EXPECT_THAT(StatusMessage(BuildModel("resnet18", options).status()), HasSubstr("'classes'"));
  options = {};
  options.width = -3;
  EXPECT_THAT(StatusMessage(BuildModel("unet", options).status()), HasSubstr("'width'"));
  options = {};
  options.d_model = 0;
  EXPECT_THAT(StatusMessage(BuildModel("gpt2", options).status()), HasSubstr("'d_model'"));
  options = {};
  options.dropout = 1.0;
  EXPECT_THAT(StatusMessage(BuildModel("vgg16", options).status()), HasSubstr("'dropout'"));
}

TEST(ModelsErrorTest, InputBytesOverflowingInt64) {
  // 2^40 * 8000 * 8000 * 3 floats is far beyond 2^63 bytes.
  ModelOptions options;
  options.batch = int64_t{1} << 40;
  options.height = 8000;
  options.width = 8000;
  absl::StatusOr<ir::Graph> graph = BuildModel("resnet50", options);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("images"));
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("64-bit"));
}

TEST(ModelsErrorTest, ActivationBytesOverflowingInt64) {
  // The input, 2^32 * 8000^2 * 3 * 4 bytes ~ 3.3e18, still fits in int64; conv1's
  // output, 2^32 * 4000^2 * 64 * 4 bytes ~ 1.8e19, does not: inference says so.
  ModelOptions options;
  options.batch = int64_t{1} << 32;
  options.height = 8000;
  options.width = 8000;
  absl::StatusOr<ir::Graph> graph = BuildModel("resnet50", options);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("'conv1'"));
  EXPECT_THAT(StatusMessage(graph.status()), HasSubstr("64-bit"));
}

TEST(ListModelsTest, NamesAndOptions) {
  std::vector<std::string> names;
  for (const ModelInfo& info : ListModels()) {
    names.push_back(info.name);
    EXPECT_FALSE(info.description.empty());
    EXPECT_FALSE(info.options.empty());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("resnet18", "resnet34", "resnet50", "resnet101",
                                            "resnet152", "vgg16", "deeplabv3plus", "unet", "gpt2"));
  for (const ModelInfo& info : ListModels()) {
    if (info.name != "deeplabv3plus") continue;
    bool found_classes = false;
    for (const ModelOptionInfo& option : info.options) {
      if (option.name == "classes") {
        found_classes = true;
        EXPECT_EQ(option.default_value, "21");
      }
    }
    EXPECT_TRUE(found_classes);
  }
}

TEST(CheckOptionsApplyTest, RefusesByNameWhatTheModelDoesNotRead) {
  EXPECT_TRUE(CheckOptionsApply("resnet50", {{"base_width", ""}, {"height", ""}}).ok());
  EXPECT_TRUE(CheckOptionsApply("gpt2", {{"n_layer", ""}, {"seed", ""}}).ok());
  EXPECT_TRUE(CheckOptionsApply("resnet50", {}).ok());

  const absl::Status layers = CheckOptionsApply("resnet50", {{"n_layer", "--layers"}});
  EXPECT_EQ(layers.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layers.message(), HasSubstr("--layers does not apply to resnet50"));
  EXPECT_THAT(layers.message(), HasSubstr("its options are batch, height, width"));

  // The listing is written the way the caller spells options.
  const absl::Status image =
      CheckOptionsApply("gpt2", {{"height", "--image"}},
                        [](std::string_view name) { return "-" + std::string(name); });
  EXPECT_THAT(image.message(), HasSubstr("--image does not apply to gpt2; its options are -batch"));
  EXPECT_THAT(CheckOptionsApply("vgg16", {{"depth", ""}}).message(),
              HasSubstr("depth does not apply to vgg16"));
  EXPECT_EQ(CheckOptionsApply("resnet51", {}).code(), absl::StatusCode::kNotFound);
}

TEST(SetModelOptionTest, ParsesEachKind) {
  ModelOptions options;
  EXPECT_TRUE(SetModelOption(options, "batch", "8").ok());
  EXPECT_TRUE(SetModelOption(options, "classes", "10").ok());
  EXPECT_TRUE(SetModelOption(options, "dropout", "0.25").ok());
  EXPECT_TRUE(SetModelOption(options, "backbone", "resnet101").ok());
  EXPECT_EQ(options.batch, 8);
  EXPECT_EQ(options.classes, 10);
  EXPECT_EQ(options.dropout, 0.25);
  EXPECT_EQ(options.backbone, "resnet101");

  absl::Status bad_value = SetModelOption(options, "height", "12x");
  EXPECT_EQ(bad_value.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(bad_value), HasSubstr("'height'"));
  absl::Status unknown = SetModelOption(options, "layers", "3");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(unknown), HasSubstr("n_layer"));
}

}  // namespace
}  // namespace spillway::models
