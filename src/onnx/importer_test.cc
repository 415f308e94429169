#include "onnx/importer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "backends/kernel.h"
#include "backends/reference/reference_kernels.h"
#include "onnx/onnx_pb.h"
#include "onnx/test_util.h"
#include "planner/planner.h"
#include "support/status_macros.h"

namespace spillway::onnx {
namespace {

using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::Floats;
using testing::ImportError;
using testing::ImportOrDie;
using testing::ModelBuilder;
using testing::Ops;
using testing::Output;
using testing::SetFloat;
using testing::SetInt;
using testing::SetInts;
using testing::ValueNamed;

TEST(ImporterTest, ConvBecomesNhwcWithOhwiWeights) {
  ModelBuilder m;
  m.Input("x", {1, 2, 5, 5});
  m.Weight("w", {3, 2, 3, 3});
  m.Weight("b", {3});
  NodeProto& conv = m.Node("Conv", {"x", "w", "b"}, {"y"}, "conv1");
  SetInts(conv, "pads", {1, 0, 1, 0});
  SetInts(conv, "strides", {1, 2});
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);

  EXPECT_EQ(ir::TypeToString(ValueNamed(model.graph, "x").type), "f32[1,5,5,2] nhwc");
  const ir::Value& w = ValueNamed(model.graph, "w");
  EXPECT_EQ(w.kind, ir::ValueKind::kParameter);
  EXPECT_EQ(w.type.shape, (ir::Shape{3, 3, 3, 2}));
  EXPECT_EQ(ValueNamed(model.graph, "b").kind, ir::ValueKind::kParameter);
  EXPECT_EQ(ir::TypeToString(Output(model).type), "f32[1,5,2,3] nhwc");
  const ir::Node& node = model.graph.node(*model.graph.FindNode("conv1"));
  EXPECT_EQ(node.attrs.Ints("pads"), (ir::IntList{1, 0, 1, 0}));
  EXPECT_EQ(node.attrs.Ints("strides"), (ir::IntList{1, 2}));

  // OHWI element (o, h, w, i) is OIHW element (o, i, h, w), which holds its index.
  const std::vector<float> ohwi = Floats(model.initial_values.at("w"));
  ASSERT_EQ(ohwi.size(), 54u);
  for (int o = 0; o < 3; ++o) {
    for (int h = 0; h < 3; ++h) {
      for (int x = 0; x < 3; ++x) {
        for (int i = 0; i < 2; ++i) {
          EXPECT_EQ(ohwi[static_cast<size_t>(((o * 3 + h) * 3 + x) * 2 + i)],
                    static_cast<float>(((o * 2 + i) * 3 + h) * 3 + x));
        }
      }
    }
  }
}

// The imported convolution computes, on the reference kernels with NHWC data,
// what ONNX's definition computes on NCHW data.
TEST(ImporterTest, ConvForwardMatchesOnnxSemantics) {
  constexpr int64_t kC = 2, kH = 4, kW = 3, kO = 2, kK = 2;
  ModelBuilder m;
  m.Input("x", {1, kC, kH, kW});
  std::vector<float> weight;
  for (int i = 0; i < kO * kC * kK * kK; ++i) weight.push_back(static_cast<float>(i % 5) - 2.0f);
  m.Weight("w", {kO, kC, kK, kK}, weight);
  m.Node("Conv", {"x", "w"}, {"y"});
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);
  ASSERT_EQ(model.graph.num_nodes(), 1);

  std::vector<float> x_nchw;
  for (int i = 0; i < kC * kH * kW; ++i) x_nchw.push_back(static_cast<float>(i) * 0.25f - 1.0f);
  std::vector<float> x_nhwc(x_nchw.size());
  for (int c = 0; c < kC; ++c) {
    for (int h = 0; h < kH; ++h) {
      for (int x = 0; x < kW; ++x) {
        x_nhwc[static_cast<size_t>((h * kW + x) * kC + c)] =
            x_nchw[static_cast<size_t>((c * kH + h) * kW + x)];
      }
    }
  }
  std::vector<float> w = Floats(model.initial_values.at("w"));
  const ir::Node& node = model.graph.node(0);
  const ir::TensorType& y_type = model.graph.value(node.outputs[0]).type;
  ASSERT_EQ(y_type.shape, (ir::Shape{1, kH - 1, kW - 1, kO}));
  std::vector<float> y(static_cast<size_t>(*ir::NumElements(y_type.shape)));
  const backends::TensorRef inputs[] = {{&model.graph.value(node.inputs[0]).type, x_nhwc.data()},
                                        {&model.graph.value(node.inputs[1]).type, w.data()}};
  const backends::TensorRef outputs[] = {{&y_type, y.data()}};
  ASSERT_TRUE(backends::reference::RunReferenceKernel<float>({node, inputs, outputs, {}}).ok());

  for (int o = 0; o < kO; ++o) {
    for (int h = 0; h < kH - 1; ++h) {
      for (int x = 0; x < kW - 1; ++x) {
        float expected = 0;
        for (int c = 0; c < kC; ++c) {
          for (int i = 0; i < kK; ++i) {
            for (int j = 0; j < kK; ++j) {
              expected += x_nchw[static_cast<size_t>((c * kH + h + i) * kW + x + j)] *
                          weight[static_cast<size_t>(((o * kC + c) * kK + i) * kK + j)];
            }
          }
        }
        EXPECT_FLOAT_EQ(y[static_cast<size_t>((h * (kW - 1) + x) * kO + o)], expected)
            << o << "," << h << "," << x;
      }
    }
  }
}

// Gemm with transB=1 keeps PyTorch's [out, in] weight: the linear kernel
// computes y = x·wᵀ + b with the file's values.
TEST(ImporterTest, LinearForwardMatchesOnnxSemantics) {
  ModelBuilder m;
  m.Input("x", {2, 3});
  m.Weight("w", {4, 3});
  m.Weight("b", {4}, {0.5f, -1.0f, 2.0f, 0.0f});
  SetInt(m.Node("Gemm", {"x", "w", "b"}, {"y"}), "transB", 1);
  m.Output("y", 2);
  const ImportedModel model = ImportOrDie(m);
  ASSERT_EQ(model.graph.num_nodes(), 1);
  const ir::Node& node = model.graph.node(0);
  ASSERT_EQ(node.op, ir::OpKind::kLinear);

  std::vector<float> x = {1, 2, 3, -1, 0, 1};
  std::vector<float> w = Floats(model.initial_values.at("w"));
  std::vector<float> b = Floats(model.initial_values.at("b"));
  std::vector<float> y(8);
  const backends::TensorRef inputs[] = {{&model.graph.value(node.inputs[0]).type, x.data()},
                                        {&model.graph.value(node.inputs[1]).type, w.data()},
                                        {&model.graph.value(node.inputs[2]).type, b.data()}};
  const backends::TensorRef outputs[] = {{&model.graph.value(node.outputs[0]).type, y.data()}};
  ASSERT_TRUE(backends::reference::RunReferenceKernel<float>({node, inputs, outputs, {}}).ok());
  // w holds 0..11 row-major as [out=4, in=3].
  for (int n = 0; n < 2; ++n) {
    for (int o = 0; o < 4; ++o) {
      float expected = b[static_cast<size_t>(o)];
      for (int i = 0; i < 3; ++i) {
        expected += x[static_cast<size_t>(n * 3 + i)] * static_cast<float>(o * 3 + i);
      }
      EXPECT_FLOAT_EQ(y[static_cast<size_t>(n * 4 + o)], expected) << n << "," << o;
    }
  }
}

TEST(ImporterTest, BatchNormTrainingModeKeepsRunningStatisticsAsBuffers) {
  ModelBuilder m(15);
  m.Input("x", {2, 4, 3, 3});
  for (const char* name : {"scale", "bias", "mean", "var"}) m.Weight(name, {4});
  NodeProto& bn = m.Node("BatchNormalization", {"x", "scale", "bias", "mean", "var"},
                         {"y", "running_mean", "running_var"}, "bn1");
  SetInt(bn, "training_mode", 1);
  SetFloat(bn, "momentum", 0.9f);
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_EQ(ValueNamed(model.graph, "scale").kind, ir::ValueKind::kParameter);
  EXPECT_EQ(ValueNamed(model.graph, "bias").kind, ir::ValueKind::kParameter);
  EXPECT_EQ(ValueNamed(model.graph, "mean").kind, ir::ValueKind::kBuffer);
  EXPECT_EQ(ValueNamed(model.graph, "var").kind, ir::ValueKind::kBuffer);
  const ir::Node& node = model.graph.node(*model.graph.FindNode("bn1"));
  EXPECT_TRUE(node.attrs.Bool("training"));
  EXPECT_NEAR(node.attrs.Float("momentum"), 0.1, 1e-6);
  EXPECT_EQ(ir::TypeToString(Output(model).type), "f32[2,3,3,4] nhwc");
  EXPECT_EQ(model.initial_values.size(), 4u);
}

TEST(ImporterTest, BatchNormInferenceForm) {
  ModelBuilder m(13);
  m.Input("x", {2, 4});
  for (const char* name : {"scale", "bias", "mean", "var"}) m.Weight(name, {4});
  m.Node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, "bn");
  m.Output("y", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_FALSE(model.graph.node(0).attrs.Bool("training"));
  EXPECT_EQ(Output(model).type.shape, (ir::Shape{2, 4}));
}

TEST(ImporterTest, PoolsFlattenAndGemmMakeAClassifierHead) {
  ModelBuilder m(17);
  m.Input("x", {2, 4, 8, 8});
  NodeProto& max = m.Node("MaxPool", {"x"}, {"p1"});
  SetInts(max, "kernel_shape", {3, 3});
  SetInts(max, "strides", {2, 2});
  SetInts(max, "pads", {1, 1, 1, 1});
  NodeProto& avg = m.Node("AveragePool", {"p1"}, {"p2"});
  SetInts(avg, "kernel_shape", {2, 2});
  SetInts(avg, "strides", {2, 2});
  m.Node("GlobalAveragePool", {"p2"}, {"g"});
  NodeProto& flatten = m.Node("Flatten", {"g"}, {"f"});
  SetInt(flatten, "axis", 1);
  m.Weight("fc.weight", {10, 4});
  m.Weight("fc.bias", {10});
  NodeProto& gemm = m.Node("Gemm", {"f", "fc.weight", "fc.bias"}, {"logits"}, "fc");
  SetInt(gemm, "transB", 1);
  m.Node("LogSoftmax", {"logits"}, {"out"});
  m.Output("out", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_THAT(Ops(model.graph),
              ElementsAre(ir::OpKind::kMaxPool, ir::OpKind::kAvgPool, ir::OpKind::kGlobalAvgPool,
                          ir::OpKind::kReshape, ir::OpKind::kLinear, ir::OpKind::kLogSoftmax));
  EXPECT_EQ(ValueNamed(model.graph, "p1").type.shape, (ir::Shape{2, 4, 4, 4}));
  EXPECT_EQ(ValueNamed(model.graph, "p2").type.shape, (ir::Shape{2, 2, 2, 4}));
  EXPECT_EQ(ValueNamed(model.graph, "fc.weight").type.shape, (ir::Shape{10, 4}));
  EXPECT_EQ(Output(model).type.shape, (ir::Shape{2, 10}));
}

TEST(ImporterTest, TorchvisionShapeArithmeticIsFolded) {
  // x.reshape(x.shape[0], -1) after a global pool, as torch.flatten exports
  // without constant folding.
  ModelBuilder m(13);
  m.Input("x", {3, 5, 4, 4});
  m.Node("GlobalAveragePool", {"x"}, {"g"});
  m.Node("Shape", {"g"}, {"shape"});
  m.Ints("zero", {0});
  ::onnx::AttributeProto* value = m.Node("Constant", {}, {"index"}).add_attribute();
  value->set_name("value");
  value->set_type(::onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(TensorProto::INT64);
  value->mutable_t()->add_int64_data(0);
  m.Node("Gather", {"shape", "index"}, {"n"});
  m.Ints("axes", {0});
  m.Node("Unsqueeze", {"n", "axes"}, {"n1"});
  m.Ints("minus_one", {-1});
  NodeProto& concat = m.Node("Concat", {"n1", "minus_one"}, {"target"});
  SetInt(concat, "axis", 0);
  m.Node("Cast", {"target"}, {"target64"}).add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto to;
    to.set_name("to");
    to.set_type(::onnx::AttributeProto::INT);
    to.set_i(TensorProto::INT64);
    return to;
  }());
  m.Node("Reshape", {"g", "target64"}, {"y"});
  m.Output("y", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_THAT(Ops(model.graph), ElementsAre(ir::OpKind::kGlobalAvgPool, ir::OpKind::kReshape));
  EXPECT_EQ(Output(model).type.shape, (ir::Shape{3, 5}));
  EXPECT_TRUE(model.initial_values.empty());  // shape constants are not parameters
}

TEST(ImporterTest, ConcatAndSoftmaxChannelAxesAreRemapped) {
  ModelBuilder m;
  m.Input("a", {1, 2, 3, 3});
  m.Input("b", {1, 5, 3, 3});
  NodeProto& concat = m.Node("Concat", {"a", "b"}, {"c"});
  SetInt(concat, "axis", 1);
  NodeProto& softmax = m.Node("Softmax", {"c"}, {"y"});
  SetInt(softmax, "axis", 1);
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_EQ(model.graph.node(0).attrs.Int("axis"), 3);
  EXPECT_EQ(model.graph.node(1).attrs.Int("axis"), 3);
  EXPECT_EQ(ir::TypeToString(Output(model).type), "f32[1,3,3,7] nhwc");
}

TEST(ImporterTest, ResidualBlockWithIdentityAddMulRelu) {
  ModelBuilder m;
  m.Input("x", {1, 2, 4, 4});
  m.Weight("w", {2, 2, 3, 3});
  NodeProto& conv = m.Node("Conv", {"x", "w"}, {"c"});
  SetInts(conv, "pads", {1, 1, 1, 1});
  m.Node("Identity", {"x"}, {"skip"});
  m.Node("Add", {"c", "skip"}, {"sum"});
  m.Weight("half", {1}, {0.5f});
  m.Node("Mul", {"sum", "half"}, {"scaled"});
  m.Node("Relu", {"scaled"}, {"y"});
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_THAT(Ops(model.graph), ElementsAre(ir::OpKind::kConv2d, ir::OpKind::kAdd, ir::OpKind::kMul,
                                            ir::OpKind::kRelu));
  EXPECT_EQ(ir::TypeToString(Output(model).type), "f32[1,4,4,2] nhwc");
  EXPECT_EQ(Floats(model.initial_values.at("half")), std::vector<float>{0.5f});
}

TEST(ImporterTest, GemmWithoutTransposeAndMatMulBecomeMatMul) {
  ModelBuilder m;
  m.Input("x", {2, 3});
  m.Weight("b", {3, 4});
  m.Weight("c", {4});
  NodeProto& gemm = m.Node("Gemm", {"x", "b", "c"}, {"h"}, "gemm");
  SetFloat(gemm, "alpha", 2.0f);
  m.Weight("w2", {4, 5});
  m.Node("MatMul", {"h", "w2"}, {"y"});
  m.Output("y", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_THAT(Ops(model.graph),
              ElementsAre(ir::OpKind::kMatMul, ir::OpKind::kAdd, ir::OpKind::kMatMul));
  EXPECT_DOUBLE_EQ(model.graph.node(0).attrs.Float("alpha"), 2.0);
  EXPECT_EQ(Output(model).type.shape, (ir::Shape{2, 5}));
}

TEST(ImporterTest, DropoutInTrainingModeIsSeededAndInInferenceModeVanishes) {
  ModelBuilder m;
  m.Input("x", {2, 8});
  m.Weight("ratio", {}, {0.25f});
  TensorProto* yes = nullptr;
  {
    ::onnx::AttributeProto* value = m.Node("Constant", {}, {"train"}).add_attribute();
    value->set_name("value");
    value->set_type(::onnx::AttributeProto::TENSOR);
    yes = value->mutable_t();
    yes->set_data_type(TensorProto::BOOL);
    yes->add_int32_data(1);
  }
  m.Node("Dropout", {"x", "ratio", "train"}, {"d1", "mask"});
  m.Node("Dropout", {"d1"}, {"d2"});  // inference: the identity
  m.Node("Dropout", {"d2", "ratio", "train"}, {"y"});
  m.Output("y", 2);
  ImportOptions options;
  options.first_seed = 7;
  const absl::StatusOr<ImportedModel> model = ImportModel(m.Bytes(), options);
  // Boolean constants are read as integers too.
  ASSERT_TRUE(model.ok()) << StatusMessage(model.status());
  EXPECT_THAT(Ops(model->graph), ElementsAre(ir::OpKind::kDropout, ir::OpKind::kDropout));
  EXPECT_EQ(model->graph.node(0).attrs.Int("seed"), 7);
  EXPECT_EQ(model->graph.node(1).attrs.Int("seed"), 8);
  EXPECT_DOUBLE_EQ(model->graph.node(0).attrs.Float("p"), 0.25);
}

TEST(ImporterTest, ListsEveryUnsupportedNodeAtOnce) {
  ModelBuilder m;
  m.Input("x", {1, 2, 8, 8});
  m.Node("Cos", {"x"}, {"c"}, "wave");
  m.Node("Abs", {"c"}, {"a"}, "fold");  // downstream of an unsupported node
  NodeProto& pool = m.Node("MaxPool", {"x"}, {"p"}, "pool");
  SetInts(pool, "kernel_shape", {2, 2});
  SetInt(pool, "ceil_mode", 1);
  m.Node("Erf", {"x"}, {"e"}, "erf");  // not inside a GELU
  m.Node("Add", {"a", "x"}, {"y"});
  m.Output("y", 4);
  m.Output("p", 4);
  m.Output("e", 4);
  const std::string error = ImportError(m);
  EXPECT_THAT(error, AllOf(HasSubstr("4 unsupported nodes"),
                           HasSubstr("node 'wave' (Cos, opset 13): op type not supported"),
                           HasSubstr("node 'fold' (Abs, opset 13)"),
                           HasSubstr("node 'pool' (MaxPool, opset 13): ceil_mode=1"),
                           HasSubstr("node 'erf' (Erf, opset 13): Erf is supported only inside "
                                     "GELU")));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("(Add")));
}

TEST(ImporterTest, MalformedBytesAreErrorsNeverCrashes) {
  EXPECT_THAT(std::string(StatusMessage(ImportModel("not a model", {}).status())),
              HasSubstr("not an ONNX model"));
  EXPECT_FALSE(ImportModel("", {}).ok());

  ModelBuilder m;
  m.Input("x", {1, 2, 4, 4});
  m.Weight("w", {2, 2, 3, 3});
  m.Node("Conv", {"x", "w"}, {"y"});
  m.Output("y", 4);
  const std::string bytes = m.Bytes();
  ASSERT_TRUE(ImportModel(bytes, {}).ok());
  // Every truncation and a flipped bit in every byte: an error or a model, never a crash.
  for (size_t i = 0; i < bytes.size(); ++i) {
    (void)ImportModel(bytes.substr(0, i), {});
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    (void)ImportModel(flipped, {});
  }
}

// Exporters writing IR version 3 list every initializer as a graph input too.
TEST(ImporterTest, InitializersListedAsInputsAreParameters) {
  ModelBuilder m(11);
  m.Input("x", {2, 3});
  m.Input("w", {4, 3});
  m.Weight("w", {4, 3});
  SetInt(m.Node("Gemm", {"x", "w"}, {"y"}), "transB", 1);
  m.Output("y", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_EQ(model.graph.InputsOfKind(ir::ValueKind::kInput).size(), 1u);
  EXPECT_EQ(ValueNamed(model.graph, "w").kind, ir::ValueKind::kParameter);
  EXPECT_EQ(Output(model).type.shape, (ir::Shape{2, 4}));
}

TEST(ImporterTest, OpsetsOutsideTheSupportedRangeAreRefused) {
  ModelBuilder m(9);
  m.Input("x", {2, 3});
  m.Node("Relu", {"x"}, {"y"});
  m.Output("y", 2);
  EXPECT_THAT(ImportError(m), HasSubstr("opset is 9; opsets 11 to 17 are supported"));
}

TEST(ImporterTest, InputShapesComeFromTheOptionsWhenGiven) {
  ModelBuilder m;
  m.SymbolicInput("x");
  m.Node("Relu", {"x"}, {"y"});
  m.Output("y", 2);
  EXPECT_THAT(ImportError(m), HasSubstr("input 'x' has an unknown dimension 'batch'"));

  ImportOptions options;
  options.input_shapes["x"] = {16, 4};
  const ImportedModel model = ImportOrDie(m, options);
  EXPECT_EQ(Output(model).type.shape, (ir::Shape{16, 4}));

  options.input_shapes = {{"nope", {1}}};
  EXPECT_THAT(ImportError(m, options), HasSubstr("the model has no input 'nope'"));
}

// --batch replaces the first dimension of every input, symbolic or fixed,
// after --input-shape, and the labels the loss adds follow.
TEST(ImporterTest, BatchReplacesTheFirstDimensionOfEveryInput) {
  ModelBuilder m;
  m.SymbolicInput("x");
  m.Input("images", {2, 3, 8, 8});
  m.Node("GlobalAveragePool", {"images"}, {"pooled"});
  m.Node("Flatten", {"pooled"}, {"flat"});
  m.Node("Relu", {"x"}, {"y"});
  m.Node("Add", {"flat", "y"}, {"logits"});
  m.Output("logits", 2);

  ImportOptions options;
  options.input_shapes["x"] = {2, 3};
  options.batch = 5;
  options.loss = LossKind::kCrossEntropy;
  const ImportedModel model = ImportOrDie(m, options);
  EXPECT_EQ(ValueNamed(model.graph, "x").type.shape, (ir::Shape{5, 3}));
  EXPECT_EQ(ValueNamed(model.graph, "images").type.shape, (ir::Shape{5, 8, 8, 3}));
  EXPECT_EQ(ValueNamed(model.graph, "labels").type.shape, (ir::Shape{5}));

  options.batch = 0;
  EXPECT_THAT(ImportError(m, options), HasSubstr("the batch must be positive"));
}

TEST(ImporterTest, ParseInputShape) {
  const auto parsed = ParseInputShape("input=1x3x224x224");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->first, "input");
  EXPECT_EQ(parsed->second, (ir::Shape{1, 3, 224, 224}));
  EXPECT_FALSE(ParseInputShape("input").ok());
  EXPECT_FALSE(ParseInputShape("input=1x0").ok());
  EXPECT_FALSE(ParseInputShape("input=1xx2").ok());
  EXPECT_FALSE(ParseInputShape("=3").ok());
}

// conv-bn-relu-pool, a residual block, global pool and a linear head: the
// forward graph trains and plans like a built-in model.
TEST(ImporterTest, SmallCnnImportsTrainsAndPlans) {
  ModelBuilder m(15);
  m.Input("images", {4, 3, 16, 16});
  auto conv_bn_relu = [&](const std::string& name, const std::string& x, int64_t in, int64_t out,
                          bool relu) {
    m.Weight(name + ".weight", {out, in, 3, 3});
    NodeProto& conv = m.Node("Conv", {x, name + ".weight"}, {name}, name);
    SetInts(conv, "pads", {1, 1, 1, 1});
    const std::string bn = name + ".bn";
    for (const char* p : {".weight", ".bias", ".running_mean", ".running_var"}) {
      m.Weight(bn + p, {out});
    }
    NodeProto& norm =
        m.Node("BatchNormalization",
               {name, bn + ".weight", bn + ".bias", bn + ".running_mean", bn + ".running_var"},
               {bn, bn + ".mean_out", bn + ".var_out"}, bn);
    SetInt(norm, "training_mode", 1);
    if (!relu) return bn;
    m.Node("Relu", {bn}, {bn + ".relu"});
    return bn + ".relu";
  };
  std::string x = conv_bn_relu("stem", "images", 3, 8, true);
  NodeProto& pool = m.Node("MaxPool", {x}, {"pool"});
  SetInts(pool, "kernel_shape", {2, 2});
  SetInts(pool, "strides", {2, 2});
  const std::string a = conv_bn_relu("block.conv1", "pool", 8, 8, true);
  const std::string b = conv_bn_relu("block.conv2", a, 8, 8, false);
  m.Node("Add", {b, "pool"}, {"block.sum"});
  m.Node("Relu", {"block.sum"}, {"block.out"});
  m.Node("GlobalAveragePool", {"block.out"}, {"gap"});
  m.Node("Flatten", {"gap"}, {"flat"});
  m.Weight("fc.weight", {10, 8});
  m.Weight("fc.bias", {10});
  SetInt(m.Node("Gemm", {"flat", "fc.weight", "fc.bias"}, {"logits"}, "fc"), "transB", 1);
  m.Output("logits", 2);

  ImportOptions options;
  options.loss = LossKind::kCrossEntropy;
  const ImportedModel model = ImportOrDie(m, options);
  EXPECT_EQ(model.graph.InputsOfKind(ir::ValueKind::kParameter).size(), 3u * 3u + 2u);
  EXPECT_EQ(model.graph.InputsOfKind(ir::ValueKind::kBuffer).size(), 3u * 2u);
  EXPECT_EQ(model.initial_values.size(), 3u * 5u + 2u);
  EXPECT_EQ(ir::TypeToString(ValueNamed(model.graph, "labels").type), "i64[4]");
  EXPECT_EQ(Output(model).type.shape, ir::Shape{});

  absl::StatusOr<autodiff::TrainingGraph> training =
      autodiff::BuildTrainingGraph(model.graph, autodiff::OptimizerOptions{});
  ASSERT_TRUE(training.ok()) << StatusMessage(training.status());
  EXPECT_TRUE(training->params_without_gradient.empty());

  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("v100-16g-nvlink2");
  ASSERT_TRUE(profile.ok());
  const analysis::RooflineCostModel cost_model(*profile);
  planner::PlanningContext context(training->graph, cost_model, *profile,
                                   {.budget_bytes = INT64_MAX, .time_limit_s = 0.2});
  absl::StatusOr<std::unique_ptr<planner::Policy>> none = planner::MakePolicy("none");
  ASSERT_TRUE(none.ok());
  absl::StatusOr<planner::PlanResult> plan = planner::RunPolicy(**none, context);
  ASSERT_TRUE(plan.ok()) << StatusMessage(plan.status());
  EXPECT_TRUE(plan->feasible);
}

// Frozen initializers are buffers: read by the forward graph, given no
// gradient and no update.
TEST(ImporterTest, FrozenInitializersAreBuffersWithoutUpdates) {
  ModelBuilder m;
  m.Input("x", {2, 3, 4, 4});
  m.Weight("backbone.conv.weight", {4, 3, 3, 3});
  m.Node("Conv", {"x", "backbone.conv.weight"}, {"features"});
  m.Node("GlobalAveragePool", {"features"}, {"pooled"});
  m.Node("Flatten", {"pooled"}, {"flat"});
  m.Weight("head.weight", {5, 4});
  SetInt(m.Node("Gemm", {"flat", "head.weight"}, {"logits"}), "transB", 1);
  m.Output("logits", 2);
  ImportOptions options;
  options.loss = LossKind::kCrossEntropy;
  options.frozen = {"backbone."};
  const ImportedModel model = ImportOrDie(m, options);
  EXPECT_EQ(ValueNamed(model.graph, "backbone.conv.weight").kind, ir::ValueKind::kBuffer);
  EXPECT_EQ(ValueNamed(model.graph, "head.weight").kind, ir::ValueKind::kParameter);
  EXPECT_EQ(model.initial_values.size(), 2u);

  absl::StatusOr<autodiff::TrainingGraph> training =
      autodiff::BuildTrainingGraph(model.graph, autodiff::OptimizerOptions{});
  ASSERT_TRUE(training.ok()) << StatusMessage(training.status());
  EXPECT_EQ(training->param_grads.size(), 1u);
  for (const ir::Node& node : training->graph.nodes()) {
    EXPECT_NE(node.op, ir::OpKind::kConv2dBackwardWeight) << node.name;
  }

  options.frozen = {"backbone.", "neck."};
  EXPECT_THAT(ImportError(m, options), HasSubstr("--freeze 'neck.' matches no initializer"));
}

// IR values are named after the nodes that make them; the graph's outputs
// keep the file's names next to the graph.
TEST(ImporterTest, OutputNamesAreTheFiles) {
  ModelBuilder m;
  m.Input("x", {2, 3});
  m.Node("Relu", {"x"}, {"probabilities"}, "/head/Relu");
  m.Node("Relu", {"x"}, {"logits"}, "/fc/Relu");
  m.Output("logits", 2);
  m.Output("probabilities", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_EQ(Output(model, 0).name, "/fc/Relu");
  EXPECT_THAT(model.output_names, ElementsAre("logits", "probabilities"));
}

// A classifier's logits take labels [N]; a segmenter's per-pixel logits
// [N, classes, H, W] take labels [N, H, W] and the loss averages over pixels.
TEST(ImporterTest, CrossEntropyLossOverClassOrPixelLogits) {
  ImportOptions options;
  options.loss = LossKind::kCrossEntropy;
  ModelBuilder segmenter;
  segmenter.Input("x", {2, 3, 4, 5});
  segmenter.Node("Relu", {"x"}, {"y"});
  segmenter.Output("y", 4);
  const ImportedModel model = ImportOrDie(segmenter, options);
  EXPECT_EQ(ir::TypeToString(ValueNamed(model.graph, "labels").type), "i64[2,4,5]");
  EXPECT_EQ(Output(model).type.shape, ir::Shape{});

  ModelBuilder sequence;
  sequence.Input("x", {2, 3, 4});
  sequence.Node("Relu", {"x"}, {"y"});
  sequence.Output("y", 3);
  EXPECT_THAT(ImportError(sequence, options),
              HasSubstr("needs logits [N, classes] or per-pixel logits [N, classes, H, W]; the "
                        "output is [2,3,4]"));

  ModelBuilder clash;
  clash.Input("labels", {2, 3});
  clash.Node("Relu", {"labels"}, {"y"});
  clash.Output("y", 2);
  EXPECT_THAT(ImportError(clash, options), HasSubstr("already has a value of that name"));
}

}  // namespace
}  // namespace spillway::onnx
