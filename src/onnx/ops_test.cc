// Every supported ONNX op, imported and run: each test builds a small model
// in code, imports it, runs the forward graph on the reference kernels with
// NCHW data converted to the IR's layout, and compares the output, back in
// ONNX order, with ONNX's definition of the op written out in the test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backends/reference/reference_backend.h"
#include "onnx/importer.h"
#include "onnx/test_util.h"
#include "runtime/forward.h"
#include "support/status_macros.h"

namespace spillway::onnx {
namespace {

using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ::testing::Each;
using ::testing::ElementsAre;
using testing::Floats;
using ::testing::HasSubstr;
using testing::ImportError;
using testing::ImportOrDie;
using testing::ModelBuilder;
using testing::Ops;
using testing::Output;
using testing::SetFloat;
using testing::SetInt;
using testing::SetInts;
using testing::SetString;
using testing::ValueNamed;

using Tensors = std::map<std::string, std::vector<float>>;

// The forward outputs of `model`, in ONNX order, for NCHW `inputs`.
std::vector<std::vector<float>> Evaluate(const ImportedModel& model, const Tensors& inputs) {
  std::map<std::string, std::vector<std::byte>> ir_inputs;
  for (const auto& [name, values] : inputs) {
    const ir::Value& value = ValueNamed(model.graph, name);
    const auto* bytes = reinterpret_cast<const std::byte*>(values.data());
    ir_inputs[name] = runtime::FromFrameworkOrder(value.type, {bytes, values.size() * 4});
  }
  runtime::ForwardInputs feed;
  for (const auto& [name, bytes] : ir_inputs) feed[name] = bytes;
  for (const auto& [name, bytes] : model.initial_values) feed[name] = bytes;
  backends::reference::ReferenceBackend backend;
  absl::StatusOr<runtime::ForwardResult> result = runtime::RunForward(model.graph, backend, feed);
  EXPECT_TRUE(result.ok()) << StatusMessage(result.status());
  std::vector<std::vector<float>> outputs;
  if (!result.ok()) return outputs;
  for (size_t i = 0; i < result->outputs.size(); ++i) {
    const ir::TensorType& type = model.graph.value(model.graph.outputs()[i]).type;
    outputs.push_back(Floats(runtime::ToFrameworkOrder(type, result->outputs[i])));
  }
  return outputs;
}

// n values spread over [-2, 2), none of them 0.
std::vector<float> Spread(int64_t n, float phase = 0.0f) {
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) {
    values.push_back(std::sin(static_cast<float>(i) * 1.7f + phase) * 2.0f + 0.01f);
  }
  return values;
}

void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected,
                float tolerance = 1e-5f) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tolerance * std::max(1.0f, std::abs(expected[i])))
        << "element " << i;
  }
}

std::vector<float> Map(const std::vector<float>& x, const std::function<float(float)>& f) {
  std::vector<float> y;
  for (float v : x) y.push_back(f(v));
  return y;
}

// NCHW index.
size_t At(const std::vector<int64_t>& shape, int64_t n, int64_t c, int64_t h, int64_t w) {
  return static_cast<size_t>(((n * shape[1] + c) * shape[2] + h) * shape[3] + w);
}

TEST(OnnxOpsTest, Activations) {
  const std::vector<float> x = Spread(12);
  const std::pair<const char*, std::function<float(float)>> cases[] = {
      {"Relu", [](float v) { return std::max(v, 0.0f); }},
      {"LeakyRelu", [](float v) { return v > 0 ? v : 0.2f * v; }},
      {"Sigmoid", [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
      {"Tanh", [](float v) { return std::tanh(v); }},
  };
  for (const auto& [op, f] : cases) {
    SCOPED_TRACE(op);
    ModelBuilder m;
    m.Input("x", {1, 3, 2, 2});
    NodeProto& node = m.Node(op, {"x"}, {"y"});
    if (std::string(op) == "LeakyRelu") SetFloat(node, "alpha", 0.2f);
    m.Output("y", 4);
    const ImportedModel model = ImportOrDie(m);
    EXPECT_EQ(Output(model).type.layout, ir::Layout::kNHWC);
    ExpectNear(Evaluate(model, {{"x", x}}).at(0), Map(x, f));
  }
}

// MobileNet's activations: ReLU6 as Clip(0, 6), a Clip with only a max,
// HardSigmoid (ONNX's default alpha 0.2) and HardSwish (PyTorch's x·relu6(x+3)/6).
TEST(OnnxOpsTest, ClipHardSigmoidAndHardSwish) {
  std::vector<float> x = Spread(24);
  for (float& v : x) v *= 4.0f;  // reach past ±3 and 6
  ModelBuilder m(14);            // HardSwish is new in opset 14
  m.Input("x", {2, 3, 2, 2});
  m.ScalarConstant("zero", 0.0f);
  m.ScalarConstant("six", 6.0f);
  m.Node("Clip", {"x", "zero", "six"}, {"relu6"});
  m.Node("Clip", {"x", "", "six"}, {"capped"});
  m.Node("HardSigmoid", {"x"}, {"hard_sigmoid"});
  m.Node("HardSwish", {"x"}, {"hard_swish"});
  for (const char* out : {"relu6", "capped", "hard_sigmoid", "hard_swish"}) m.Output(out, 4);
  const ImportedModel model = ImportOrDie(m);
  const std::vector<std::vector<float>> y = Evaluate(model, {{"x", x}});
  ExpectNear(y.at(0), Map(x, [](float v) { return std::clamp(v, 0.0f, 6.0f); }));
  ExpectNear(y.at(1), Map(x, [](float v) { return std::min(v, 6.0f); }));
  ExpectNear(y.at(2), Map(x, [](float v) { return std::clamp(0.2f * v + 0.5f, 0.0f, 1.0f); }));
  ExpectNear(y.at(3), Map(x, [](float v) { return v * std::clamp(v + 3.0f, 0.0f, 6.0f) / 6.0f; }));
}

// x·0.5·(1 + erf(x/√2)) in each association order exporters use becomes one gelu.
TEST(OnnxOpsTest, ErfPatternsBecomeGelu) {
  const std::vector<float> x = Spread(8);
  const std::vector<float> expected =
      Map(x, [](float v) { return 0.5f * v * (1.0f + std::erf(v / std::sqrt(2.0f))); });
  for (int order = 0; order < 3; ++order) {
    SCOPED_TRACE(order);
    ModelBuilder m(17);
    m.Input("x", {2, 4});
    m.ScalarConstant("sqrt2", std::sqrt(2.0f));
    m.ScalarConstant("one", 1.0f);
    m.ScalarConstant("half", 0.5f);
    m.Node("Div", {"x", "sqrt2"}, {"scaled"});
    m.Node("Erf", {"scaled"}, {"erf"});
    m.Node("Add", {"erf", "one"}, {"one_plus"});
    if (order == 0) {  // PyTorch: (x·(1+erf))·0.5
      m.Node("Mul", {"x", "one_plus"}, {"m"});
      m.Node("Mul", {"m", "half"}, {"y"});
    } else if (order == 1) {  // (0.5·(1+erf))·x
      m.Node("Mul", {"half", "one_plus"}, {"m"});
      m.Node("Mul", {"x", "m"}, {"y"});
    } else {  // (x·0.5)·(1+erf)
      m.Node("Mul", {"x", "half"}, {"m"});
      m.Node("Mul", {"m", "one_plus"}, {"y"});
    }
    m.Output("y", 2);
    const ImportedModel model = ImportOrDie(m);
    EXPECT_THAT(Ops(model.graph), ElementsAre(ir::OpKind::kGelu));
    ExpectNear(Evaluate(model, {{"x", x}}).at(0), expected);
  }
}

// An intermediate of the pattern read elsewhere keeps it apart: Erf alone is refused.
TEST(OnnxOpsTest, ErfPatternReadFromOutsideIsNotFused) {
  ModelBuilder m(17);
  m.Input("x", {2, 4});
  m.ScalarConstant("sqrt2", std::sqrt(2.0f));
  m.ScalarConstant("one", 1.0f);
  m.ScalarConstant("half", 0.5f);
  m.Node("Div", {"x", "sqrt2"}, {"scaled"});
  m.Node("Erf", {"scaled"}, {"erf"}, "erf");
  m.Node("Add", {"erf", "one"}, {"one_plus"});
  m.Node("Mul", {"x", "one_plus"}, {"m"});
  m.Node("Mul", {"m", "half"}, {"y"});
  m.Output("y", 2);
  m.Output("erf", 2);
  EXPECT_THAT(ImportError(m), HasSubstr("node 'erf' (Erf, opset 17): Erf is supported only"));
}

// Add, Sub, Mul and Div between activations, against a per-channel
// initializer [C,1,1] (broadcast in NHWC) and against a scalar constant.
TEST(OnnxOpsTest, ArithmeticBroadcastsOverNchw) {
  const std::vector<int64_t> shape = {2, 3, 2, 2};
  const std::vector<float> a = Spread(24), b = Spread(24, 0.5f);
  const std::vector<float> bias = {0.5f, -1.5f, 2.5f};
  const std::pair<const char*, std::function<float(float, float)>> ops[] = {
      {"Add", std::plus<float>()},
      {"Sub", std::minus<float>()},
      {"Mul", std::multiplies<float>()},
      {"Div", std::divides<float>()}};
  for (const auto& [op, f] : ops) {
    SCOPED_TRACE(op);
    ModelBuilder m;
    m.Input("a", shape);
    m.Input("b", shape);
    m.Weight("bias", {3, 1, 1}, bias);
    m.ScalarConstant("two", 2.0f);
    m.Node(op, {"a", "b"}, {"ab"});
    m.Node(op, {"ab", "bias"}, {"abc"});
    m.Node(op, {"two", "abc"}, {"y"});
    m.Output("y", 4);
    const ImportedModel model = ImportOrDie(m);
    EXPECT_EQ(ValueNamed(model.graph, "bias").kind, ir::ValueKind::kParameter);
    std::vector<float> expected(24);
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t w = 0; w < 2; ++w) {
            const size_t i = At(shape, n, c, h, w);
            expected[i] = f(2.0f, f(f(a[i], b[i]), bias[static_cast<size_t>(c)]));
          }
        }
      }
    }
    ExpectNear(Evaluate(model, {{"a", a}, {"b", b}}).at(0), expected);
  }
}

// Flatten and Reshape of a 4-D activation with spatial extent > 1 see the
// NCHW element order; a reshape back to 4-D is an activation again.
TEST(OnnxOpsTest, FlattenReshapeAndBackToFourD) {
  const std::vector<int64_t> shape = {2, 3, 2, 2};
  const std::vector<float> x = Spread(24);
  ModelBuilder m;
  m.Input("x", shape);
  m.Node("Flatten", {"x"}, {"flat"});
  m.Ints("to3", {2, 3, -1});
  m.Node("Reshape", {"x", "to3"}, {"three"});
  m.Ints("to4", {0, 6, 2, 1});
  m.Node("Reshape", {"flat", "to4"}, {"four"});
  m.Node("Relu", {"four"}, {"relu"});
  m.Output("flat", 2);
  m.Output("three", 3);
  m.Output("relu", 4);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_EQ(Output(model, 0).type.shape, (ir::Shape{2, 12}));
  EXPECT_EQ(Output(model, 1).type.shape, (ir::Shape{2, 3, 4}));
  EXPECT_EQ(ir::TypeToString(Output(model, 2).type), "f32[2,2,1,6] nhwc");
  const std::vector<std::vector<float>> y = Evaluate(model, {{"x", x}});
  ExpectNear(y.at(0), x);  // row-major NCHW is the flattened order
  ExpectNear(y.at(1), x);
  ExpectNear(y.at(2), Map(x, [](float v) { return std::max(v, 0.0f); }));
}

TEST(OnnxOpsTest, SqueezeAndUnsqueeze) {
  const std::vector<float> x = Spread(6);
  for (const int64_t opset : {11, 13}) {
    SCOPED_TRACE(opset);
    ModelBuilder m(opset);
    m.Input("x", {2, 3, 1, 1});
    NodeProto& squeeze = m.Node(
        "Squeeze",
        opset >= 13 ? std::vector<std::string>{"x", "axes"} : std::vector<std::string>{"x"}, {"s"});
    NodeProto& unsqueeze = m.Node(
        "Unsqueeze",
        opset >= 13 ? std::vector<std::string>{"s", "axes"} : std::vector<std::string>{"s"}, {"u"});
    if (opset >= 13) {
      m.Ints("axes", {2, 3});
    } else {
      SetInts(squeeze, "axes", {2, 3});
      SetInts(unsqueeze, "axes", {2, 3});
    }
    m.Output("s", 2);
    m.Output("u", 4);
    const ImportedModel model = ImportOrDie(m);
    EXPECT_EQ(Output(model, 0).type.shape, (ir::Shape{2, 3}));
    EXPECT_EQ(ir::TypeToString(Output(model, 1).type), "f32[2,1,1,3] nhwc");
    const std::vector<std::vector<float>> y = Evaluate(model, {{"x", x}});
    ExpectNear(y.at(0), x);
    ExpectNear(y.at(1), x);
  }
}

// A transpose into NHWC order (as TensorFlow exports do) and one that swaps H and W.
TEST(OnnxOpsTest, TransposeOfActivations) {
  const std::vector<int64_t> shape = {1, 2, 3, 4};
  const std::vector<float> x = Spread(24);
  ModelBuilder m;
  m.Input("x", shape);
  SetInts(m.Node("Transpose", {"x"}, {"nhwc"}), "perm", {0, 2, 3, 1});
  SetInts(m.Node("Transpose", {"x"}, {"swapped"}), "perm", {0, 1, 3, 2});
  m.Input("m", {2, 5});
  m.Node("Transpose", {"m"}, {"mt"});
  m.Output("nhwc", 4);
  m.Output("swapped", 4);
  m.Output("mt", 2);
  const ImportedModel model = ImportOrDie(m);
  const std::vector<float> mat = Spread(10, 1.0f);
  const std::vector<std::vector<float>> y = Evaluate(model, {{"x", x}, {"m", mat}});
  std::vector<float> nhwc, swapped, mt;
  for (int64_t h = 0; h < 3; ++h) {
    for (int64_t w = 0; w < 4; ++w) {
      for (int64_t c = 0; c < 2; ++c) nhwc.push_back(x[At(shape, 0, c, h, w)]);
    }
  }
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t w = 0; w < 4; ++w) {
      for (int64_t h = 0; h < 3; ++h) swapped.push_back(x[At(shape, 0, c, h, w)]);
    }
  }
  for (int64_t j = 0; j < 5; ++j) {
    for (int64_t i = 0; i < 2; ++i) mt.push_back(mat[static_cast<size_t>(i * 5 + j)]);
  }
  ExpectNear(y.at(0), nhwc);
  ExpectNear(y.at(1), swapped);
  ExpectNear(y.at(2), mt);
}

TEST(OnnxOpsTest, SplitAndSliceAlongChannelsAndSpace) {
  const std::vector<int64_t> shape = {1, 4, 3, 3};
  const std::vector<float> x = Spread(36);
  ModelBuilder m;
  m.Input("x", shape);
  m.Ints("sizes", {1, 3});
  SetInt(m.Node("Split", {"x", "sizes"}, {"first", "rest"}), "axis", 1);
  m.Ints("starts", {1, 0});
  m.Ints("ends", {INT64_MAX, 3});
  m.Ints("axes", {2, 3});
  m.Ints("steps", {1, 2});
  m.Node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"sliced"});
  m.Output("first", 4);
  m.Output("rest", 4);
  m.Output("sliced", 4);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_EQ(ir::TypeToString(Output(model, 2).type), "f32[1,2,2,4] nhwc");
  const std::vector<std::vector<float>> y = Evaluate(model, {{"x", x}});
  ExpectNear(y.at(0), std::vector<float>(x.begin(), x.begin() + 9));
  ExpectNear(y.at(1), std::vector<float>(x.begin() + 9, x.end()));
  std::vector<float> sliced;
  for (int64_t c = 0; c < 4; ++c) {
    for (int64_t h = 1; h < 3; ++h) {
      for (int64_t w = 0; w < 3; w += 2) sliced.push_back(x[At(shape, 0, c, h, w)]);
    }
  }
  ExpectNear(y.at(2), sliced);
}

// PyTorch's bilinear (half_pixel, or align_corners) and nearest resize,
// written out: source coordinate, clamped, and the two neighbours' weights.
float Bilinear(const std::vector<float>& x, const std::vector<int64_t>& shape, int64_t n, int64_t c,
               int64_t oh, int64_t ow, int64_t out_h, int64_t out_w, bool align_corners) {
  auto source = [&](int64_t dst, int64_t in, int64_t out) {
    if (align_corners) {
      return out > 1 ? static_cast<float>(dst) * static_cast<float>(in - 1) /
                           static_cast<float>(out - 1)
                     : 0.0f;
    }
    return std::max(
        0.0f,
        (static_cast<float>(dst) + 0.5f) * static_cast<float>(in) / static_cast<float>(out) - 0.5f);
  };
  const float sh = source(oh, shape[2], out_h), sw = source(ow, shape[3], out_w);
  const auto h0 = static_cast<int64_t>(sh), w0 = static_cast<int64_t>(sw);
  const int64_t h1 = std::min(h0 + 1, shape[2] - 1), w1 = std::min(w0 + 1, shape[3] - 1);
  const float dh = sh - static_cast<float>(h0), dw = sw - static_cast<float>(w0);
  return (1 - dh) * ((1 - dw) * x[At(shape, n, c, h0, w0)] + dw * x[At(shape, n, c, h0, w1)]) +
         dh * ((1 - dw) * x[At(shape, n, c, h1, w0)] + dw * x[At(shape, n, c, h1, w1)]);
}

TEST(OnnxOpsTest, ResizeAsPyTorchExportsInterpolate) {
  const std::vector<int64_t> shape = {1, 2, 3, 4};
  const std::vector<float> x = Spread(24);
  for (const std::string transform : {"half_pixel", "pytorch_half_pixel", "align_corners"}) {
    SCOPED_TRACE(transform);
    // F.interpolate(x, size=(5, 7)): the sizes come from Shape, Slice and Concat.
    ModelBuilder m(13);
    m.Input("x", shape);
    m.Node("Shape", {"x"}, {"shape"});
    m.Ints("zero", {0});
    m.Ints("two", {2});
    m.Node("Slice", {"shape", "zero", "two", "zero"}, {"nc"});
    m.Ints("hw", {5, 7});
    SetInt(m.Node("Concat", {"nc", "hw"}, {"sizes"}), "axis", 0);
    NodeProto& resize = m.Node("Resize", {"x", "", "", "sizes"}, {"y"});
    SetString(resize, "mode", "linear");
    SetString(resize, "coordinate_transformation_mode", transform);
    m.Output("y", 4);
    const ImportedModel model = ImportOrDie(m);
    EXPECT_THAT(Ops(model.graph), ElementsAre(ir::OpKind::kResizeBilinear));
    std::vector<float> expected;
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t h = 0; h < 5; ++h) {
        for (int64_t w = 0; w < 7; ++w) {
          expected.push_back(Bilinear(x, shape, 0, c, h, w, 5, 7, transform == "align_corners"));
        }
      }
    }
    ExpectNear(Evaluate(model, {{"x", x}}).at(0), expected);
  }

  // F.interpolate(x, scale_factor=2, mode="nearest").
  ModelBuilder m(13);
  m.Input("x", shape);
  m.Weight("scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  NodeProto& resize = m.Node("Resize", {"x", "", "scales"}, {"y"});
  SetString(resize, "mode", "nearest");
  SetString(resize, "coordinate_transformation_mode", "asymmetric");
  SetString(resize, "nearest_mode", "floor");
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_THAT(Ops(model.graph), ElementsAre(ir::OpKind::kResizeNearest));
  std::vector<float> expected;
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t h = 0; h < 6; ++h) {
      for (int64_t w = 0; w < 8; ++w) expected.push_back(x[At(shape, 0, c, h / 2, w / 2)]);
    }
  }
  ExpectNear(Evaluate(model, {{"x", x}}).at(0), expected);
}

TEST(OnnxOpsTest, ResizeModesOutsidePyTorchsAreRefused) {
  ModelBuilder m(13);
  m.Input("x", {1, 2, 3, 4});
  m.Weight("double", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  m.Weight("fraction", {4}, {1.0f, 1.0f, 1.5f, 2.0f});
  SetString(m.Node("Resize", {"x", "", "double"}, {"cubic"}, "cubic"), "mode", "cubic");
  NodeProto& frac = m.Node("Resize", {"x", "", "fraction"}, {"frac"}, "frac");
  SetString(frac, "mode", "nearest");
  SetString(frac, "coordinate_transformation_mode", "asymmetric");
  SetString(frac, "nearest_mode", "floor");
  m.Output("cubic", 4);
  m.Output("frac", 4);
  const std::string error = ImportError(m);
  EXPECT_THAT(error, HasSubstr("node 'cubic' (Resize, opset 13): resize mode 'cubic'"));

  // A scale whose output size no integer holds (found by the fuzzer).
  ModelBuilder huge(13);
  huge.Input("x", {1, 2, 3, 4});
  huge.Weight("scales", {4}, {1.0f, 1.0f, 2.0f, 1e35f});
  SetString(huge.Node("Resize", {"x", "", "scales"}, {"y"}), "mode", "linear");
  huge.Output("y", 4);
  EXPECT_THAT(ImportError(huge), HasSubstr("Resize scales 2 and 1e+35 give an output of 6x4"));
  EXPECT_THAT(error, HasSubstr("node 'frac' (Resize, opset 13): scales that do not give whole"));
}

TEST(OnnxOpsTest, LayerNormalizationWithAndWithoutBias) {
  const std::vector<float> x = Spread(12);
  const std::vector<float> gamma = {1.5f, -0.5f, 2.0f, 1.0f}, beta = {0.1f, 0.2f, 0.3f, 0.4f};
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias);
    ModelBuilder m(17);
    m.Input("x", {3, 4});
    m.Weight("gamma", {4}, gamma);
    m.Weight("beta", {4}, beta);
    NodeProto& ln = m.Node("LayerNormalization",
                           with_bias ? std::vector<std::string>{"x", "gamma", "beta"}
                                     : std::vector<std::string>{"x", "gamma"},
                           {"y"});
    SetFloat(ln, "epsilon", 1e-3f);
    m.Output("y", 2);
    const ImportedModel model = ImportOrDie(m);
    EXPECT_EQ(ValueNamed(model.graph, "gamma").kind, ir::ValueKind::kParameter);
    std::vector<float> expected;
    for (int64_t row = 0; row < 3; ++row) {
      const auto first = x.begin() + row * 4;
      float mean = 0, var = 0;
      for (int i = 0; i < 4; ++i) mean += first[i] / 4;
      for (int i = 0; i < 4; ++i) var += (first[i] - mean) * (first[i] - mean) / 4;
      for (size_t i = 0; i < 4; ++i) {
        expected.push_back((first[static_cast<int64_t>(i)] - mean) / std::sqrt(var + 1e-3f) *
                               gamma[i] +
                           (with_bias ? beta[i] : 0.0f));
      }
    }
    ExpectNear(Evaluate(model, {{"x", x}}).at(0), expected);
  }
}

// Layer norm over several axes of an NCHW activation (C, H and W, as
// GroupNorm(1) would), and ConvNeXt's channels-last layer norm between two
// transposes.
TEST(OnnxOpsTest, LayerNormalizationOverActivations) {
  const std::vector<int64_t> shape = {2, 3, 2, 2};
  const std::vector<float> x = Spread(24);
  const std::vector<float> gamma = Spread(12, 2.0f), channel_gamma = {1.5f, -0.5f, 2.0f};
  ModelBuilder m(17);
  m.Input("x", shape);
  m.Weight("gamma", {3, 2, 2}, gamma);
  SetInt(m.Node("LayerNormalization", {"x", "gamma"}, {"chw"}), "axis", 1);
  SetInts(m.Node("Transpose", {"x"}, {"nhwc"}), "perm", {0, 2, 3, 1});
  m.Weight("channel_gamma", {3}, channel_gamma);
  m.Node("LayerNormalization", {"nhwc", "channel_gamma"}, {"normed"});
  SetInts(m.Node("Transpose", {"normed"}, {"channels"}), "perm", {0, 3, 1, 2});
  m.Output("chw", 4);
  m.Output("channels", 4);
  const ImportedModel model = ImportOrDie(m);
  const std::vector<std::vector<float>> y = Evaluate(model, {{"x", x}});
  // Normalizes `count` values at `at(i)` and scales them by `scale(i)`.
  auto normalize = [](std::vector<float>& out, const std::vector<float>& in, int64_t count,
                      const std::function<size_t(int64_t)>& at,
                      const std::function<float(int64_t)>& scale) {
    float mean = 0, var = 0;
    for (int64_t i = 0; i < count; ++i) mean += in[at(i)] / static_cast<float>(count);
    for (int64_t i = 0; i < count; ++i) {
      var += (in[at(i)] - mean) * (in[at(i)] - mean) / static_cast<float>(count);
    }
    for (int64_t i = 0; i < count; ++i) {
      out[at(i)] = (in[at(i)] - mean) / std::sqrt(var + 1e-5f) * scale(i);
    }
  };
  std::vector<float> chw(24), channels(24);
  for (int64_t n = 0; n < 2; ++n) {
    normalize(
        chw, x, 12, [n](int64_t i) { return static_cast<size_t>(n * 12 + i); },
        [&](int64_t i) { return gamma[static_cast<size_t>(i)]; });
    for (int64_t p = 0; p < 4; ++p) {
      normalize(
          channels, x, 3, [&](int64_t c) { return At(shape, n, c, p / 2, p % 2); },
          [&](int64_t c) { return channel_gamma[static_cast<size_t>(c)]; });
    }
  }
  ExpectNear(y.at(0), chw, 1e-4f);
  ExpectNear(y.at(1), channels, 1e-4f);
}

// A channels-last Linear (ConvNeXt's MLP): transpose to [N,H,W,C], MatMul
// with [C,D], transpose back; and DenseNet's all-zero Pad, which vanishes.
TEST(OnnxOpsTest, MatMulOverChannelsLastActivationsAndZeroPad) {
  const std::vector<int64_t> shape = {1, 2, 3, 4};
  const std::vector<float> x = Spread(24), w = Spread(10, 3.0f);
  ModelBuilder m;
  m.Input("x", shape);
  m.Ints("no_pads", {0, 0, 0, 0, 0, 0, 0, 0});
  m.Node("Pad", {"x", "no_pads"}, {"padded"});
  SetInts(m.Node("Transpose", {"padded"}, {"nhwc"}), "perm", {0, 2, 3, 1});
  m.Weight("w", {2, 5}, w);
  m.Node("MatMul", {"nhwc", "w"}, {"projected"});
  SetInts(m.Node("Transpose", {"projected"}, {"y"}), "perm", {0, 3, 1, 2});
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);
  std::vector<float> expected(5 * 12, 0.0f);
  const std::vector<int64_t> out_shape = {1, 5, 3, 4};
  for (int64_t d = 0; d < 5; ++d) {
    for (int64_t h = 0; h < 3; ++h) {
      for (int64_t v = 0; v < 4; ++v) {
        for (int64_t c = 0; c < 2; ++c) {
          expected[At(out_shape, 0, d, h, v)] +=
              x[At(shape, 0, c, h, v)] * w[static_cast<size_t>(c * 5 + d)];
        }
      }
    }
  }
  ExpectNear(Evaluate(model, {{"x", x}}).at(0), expected);

  ModelBuilder padded;
  padded.Input("x", shape);
  padded.Ints("pads", {0, 0, 1, 1, 0, 0, 1, 1});
  padded.Node("Pad", {"x", "pads"}, {"y"}, "pad");
  padded.Output("y", 4);
  EXPECT_THAT(ImportError(padded), HasSubstr("node 'pad' (Pad, opset 13): padding other than"));
}

// ConstantOfShape over a folded shape, read as data: a buffer, never trained.
TEST(OnnxOpsTest, ConstantOfShapeFeedsArithmetic) {
  const std::vector<float> x = Spread(6);
  ModelBuilder m;
  m.Input("x", {2, 3});
  m.Node("Shape", {"x"}, {"shape"});
  NodeProto& fill = m.Node("ConstantOfShape", {"shape"}, {"threes"});
  ::onnx::AttributeProto* value = fill.add_attribute();
  value->set_name("value");
  value->set_type(::onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(TensorProto::FLOAT);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_float_data(3.0f);
  m.Node("Mul", {"x", "threes"}, {"y"});
  m.Output("y", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_EQ(ValueNamed(model.graph, "threes").kind, ir::ValueKind::kBuffer);
  ExpectNear(Evaluate(model, {{"x", x}}).at(0), Map(x, [](float v) { return 3.0f * v; }));
}

TEST(OnnxOpsTest, PoolsSoftmaxAndConcatOverChannels) {
  const std::vector<int64_t> shape = {1, 2, 4, 4};
  const std::vector<float> x = Spread(32);
  ModelBuilder m;
  m.Input("x", shape);
  NodeProto& max = m.Node("MaxPool", {"x"}, {"max"});
  SetInts(max, "kernel_shape", {2, 2});
  SetInts(max, "strides", {2, 2});
  NodeProto& avg = m.Node("AveragePool", {"x"}, {"avg"});
  SetInts(avg, "kernel_shape", {2, 2});
  SetInts(avg, "strides", {2, 2});
  SetInt(m.Node("Concat", {"max", "avg"}, {"both"}), "axis", 1);
  SetInt(m.Node("Softmax", {"both"}, {"y"}), "axis", 1);
  m.Node("GlobalAveragePool", {"x"}, {"gap"});
  m.Output("y", 4);
  m.Output("gap", 4);
  const ImportedModel model = ImportOrDie(m);
  const std::vector<std::vector<float>> y = Evaluate(model, {{"x", x}});
  // Channels 0-1 are the max pools, 2-3 the average pools; softmax over the 4.
  std::vector<float> pooled(16);
  const std::vector<int64_t> pooled_shape = {1, 4, 2, 2};
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t w = 0; w < 2; ++w) {
        float big = -INFINITY, sum = 0;
        for (int64_t i = 0; i < 2; ++i) {
          for (int64_t j = 0; j < 2; ++j) {
            big = std::max(big, x[At(shape, 0, c, 2 * h + i, 2 * w + j)]);
            sum += x[At(shape, 0, c, 2 * h + i, 2 * w + j)];
          }
        }
        pooled[At(pooled_shape, 0, c, h, w)] = big;
        pooled[At(pooled_shape, 0, c + 2, h, w)] = sum / 4;
      }
    }
  }
  std::vector<float> softmax(16);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t w = 0; w < 2; ++w) {
      float total = 0;
      for (int64_t c = 0; c < 4; ++c) total += std::exp(pooled[At(pooled_shape, 0, c, h, w)]);
      for (int64_t c = 0; c < 4; ++c) {
        softmax[At(pooled_shape, 0, c, h, w)] =
            std::exp(pooled[At(pooled_shape, 0, c, h, w)]) / total;
      }
    }
  }
  ExpectNear(y.at(0), softmax);
  std::vector<float> gap(2, 0.0f);
  for (size_t i = 0; i < 32; ++i) gap[i / 16] += x[i] / 16;
  ExpectNear(y.at(1), gap);
}

// Training-mode batch normalization normalizes with the batch's statistics.
TEST(OnnxOpsTest, BatchNormalizationInTrainingMode) {
  const std::vector<int64_t> shape = {2, 2, 2, 2};
  const std::vector<float> x = Spread(16);
  ModelBuilder m(15);
  m.Input("x", shape);
  m.Weight("scale", {2}, {1.5f, 0.5f});
  m.Weight("bias", {2}, {0.25f, -1.0f});
  m.Weight("mean", {2}, {0.0f, 0.0f});
  m.Weight("var", {2}, {1.0f, 1.0f});
  NodeProto& bn = m.Node("BatchNormalization", {"x", "scale", "bias", "mean", "var"},
                         {"y", "running_mean", "running_var"});
  SetInt(bn, "training_mode", 1);
  m.Output("y", 4);
  const ImportedModel model = ImportOrDie(m);
  std::vector<float> expected(16);
  for (int64_t c = 0; c < 2; ++c) {
    float mean = 0, var = 0;
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t i = 0; i < 4; ++i) mean += x[At(shape, n, c, i / 2, i % 2)] / 8;
    }
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t i = 0; i < 4; ++i) {
        const float d = x[At(shape, n, c, i / 2, i % 2)] - mean;
        var += d * d / 8;
      }
    }
    const float scale = c == 0 ? 1.5f : 0.5f, bias = c == 0 ? 0.25f : -1.0f;
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t i = 0; i < 4; ++i) {
        const size_t at = At(shape, n, c, i / 2, i % 2);
        expected[at] = (x[at] - mean) / std::sqrt(var + 1e-5f) * scale + bias;
      }
    }
  }
  ExpectNear(Evaluate(model, {{"x", x}}).at(0), expected, 1e-4f);
}

// Upsample is deprecated since opset 10: ONNX's checker refuses it in every
// opset the importer takes, and the error says why.
TEST(OnnxOpsTest, UpsampleIsRefusedAsDeprecated) {
  ModelBuilder m(11);
  m.Input("x", {1, 2, 3, 3});
  m.Weight("scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  SetString(m.Node("Upsample", {"x", "scales"}, {"y"}), "mode", "nearest");
  m.Output("y", 4);
  EXPECT_THAT(ImportError(m), HasSubstr("Upsample is deprecated"));
}

// Casts of data to its own type, Identity and inference-mode Dropout vanish.
TEST(OnnxOpsTest, IdentityCastAndInferenceDropoutAddNoNodes) {
  ModelBuilder m;
  m.Input("x", {2, 3});
  m.Node("Identity", {"x"}, {"i"});
  SetInt(m.Node("Cast", {"i"}, {"c"}), "to", TensorProto::FLOAT);
  m.Node("Dropout", {"c"}, {"d"});
  m.Node("Relu", {"d"}, {"y"});
  m.Output("y", 2);
  const ImportedModel model = ImportOrDie(m);
  EXPECT_THAT(Ops(model.graph), ElementsAre(ir::OpKind::kRelu));
}

// ---- External data and large models ----

// A model whose weight lives in a file next to it, as torch.onnx.export
// writes models over 2 GiB (and onnx.save_model(save_as_external_data=True)).
class ExternalDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("spillway_external_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes weights.bin (8 padding bytes, then w) and the model referring to it.
  std::string Write(const std::string& location, const std::string& length) {
    std::ofstream data(dir_ / "weights.bin", std::ios::binary);
    const std::vector<float> padding = {-1.0f, -1.0f};
    data.write(reinterpret_cast<const char*>(padding.data()), 8);
    data.write(reinterpret_cast<const char*>(weight_.data()),
               static_cast<std::streamsize>(weight_.size() * 4));
    ModelBuilder m;
    m.Input("x", {2, 3});
    m.Weight("w", {4, 3});
    TensorProto& w = *m.model().mutable_graph()->mutable_initializer(0);
    w.clear_raw_data();
    w.set_data_location(TensorProto::EXTERNAL);
    for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"location", location}, {"offset", "8"}, {"length", length}}) {
      ::onnx::StringStringEntryProto* entry = w.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
    SetInt(m.Node("Gemm", {"x", "w"}, {"y"}), "transB", 1);
    m.Output("y", 2);
    const std::string path = (dir_ / "model.onnx").string();
    std::ofstream(path, std::ios::binary) << m.Bytes();
    return path;
  }

  std::filesystem::path dir_;
  std::vector<float> weight_ = Spread(12);
};

TEST_F(ExternalDataTest, WeightsAreReadFromTheFileNextToTheModel) {
  const std::string path = Write("weights.bin", "48");
  absl::StatusOr<ImportedModel> model = ImportModelFile(path, {});
  ASSERT_TRUE(model.ok()) << StatusMessage(model.status());
  EXPECT_EQ(Floats(model->initial_values.at("w")), weight_);
}

TEST_F(ExternalDataTest, BadReferencesAreClearErrors) {
  auto error = [&](const std::string& location, const std::string& length) {
    absl::StatusOr<ImportedModel> model = ImportModelFile(Write(location, length), {});
    EXPECT_FALSE(model.ok());
    return std::string(StatusMessage(model.status()));
  };
  EXPECT_THAT(error("missing.bin", "48"), HasSubstr("cannot open external data file"));
  EXPECT_THAT(error("../weights.bin", "48"), HasSubstr("must be a path inside the model's"));
  EXPECT_THAT(error("/etc/passwd", "48"), HasSubstr("must be a path inside the model's"));
  EXPECT_THAT(error("weights.bin", "4800"), HasSubstr("fewer than offset 8 + length 4800"));
  EXPECT_THAT(error("weights.bin", "4x"), HasSubstr("is not a byte count"));
  // From bytes there is no directory to look in.
  std::ifstream file(Write("weights.bin", "48"), std::ios::binary);
  std::ostringstream bytes;
  bytes << file.rdbuf();
  EXPECT_THAT(std::string(StatusMessage(ImportModel(bytes.str(), {}).status())),
              HasSubstr("import the model from its file"));
}

// Protobuf's old 64 MiB message limit does not apply: a 72 MiB model imports.
TEST(OnnxLargeModelTest, ModelsOver64MiBImport) {
  constexpr int64_t kIn = 4096, kOut = 4608;  // 72 MiB of f32 weights
  ModelBuilder m;
  m.Input("x", {1, kIn});
  std::vector<float> weight(static_cast<size_t>(kIn * kOut));
  for (size_t i = 0; i < weight.size(); i += 4099) weight[i] = static_cast<float>(i);
  m.Weight("w", {kOut, kIn}, weight);
  SetInt(m.Node("Gemm", {"x", "w"}, {"y"}), "transB", 1);
  m.Output("y", 2);
  const std::string bytes = m.Bytes();
  ASSERT_GT(bytes.size(), size_t{64} << 20);
  absl::StatusOr<ImportedModel> model = ImportModel(bytes, {});
  ASSERT_TRUE(model.ok()) << StatusMessage(model.status());
  EXPECT_EQ(Floats(model->initial_values.at("w")), weight);
}

}  // namespace
}  // namespace spillway::onnx
