// Reference kernels of the tensor group on tiny tensors, against values
// worked out by hand (the arithmetic is in the comments), in float.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backends/kernel.h"
#include "backends/reference/reference_kernels.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

using ir::AttrMap;
using ir::IntList;
using ir::OpKind;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::IsNan;
using ::testing::Pointwise;

// A host tensor: its type and its elements, f32 or i64.
struct Tensor {
  ir::TensorType type;
  std::vector<float> f32;
  std::vector<int64_t> i64;

  void* data() {
    return type.dtype == ir::DType::kI64 ? static_cast<void*>(i64.data())
                                         : static_cast<void*>(f32.data());
  }
};

Tensor F32(ir::Shape shape, std::vector<float> values) {
  return {ir::F32(std::move(shape)), std::move(values), {}};
}
Tensor I64(ir::Shape shape, std::vector<int64_t> values) {
  return {ir::I64(std::move(shape)), {}, std::move(values)};
}

// A zeroed tensor of `type`.
Tensor Zeros(const ir::TensorType& type) {
  const auto count = static_cast<size_t>(*ir::NumElements(type.shape));
  Tensor tensor{type, {}, {}};
  if (type.dtype == ir::DType::kI64) {
    tensor.i64.assign(count, 0);
  } else {
    tensor.f32.assign(count, 0.0f);
  }
  return tensor;
}

// Runs `op` on `inputs` with the float reference kernel after validating the
// attributes and inferring the output types as a graph would. Each pair in
// `in_place` makes output `first` share input `second`'s buffer; that output
// is returned as the input holds it afterwards.
absl::StatusOr<std::vector<Tensor>> RunOp(OpKind op, std::vector<Tensor> inputs, AttrMap attrs,
                                          uint64_t step = 0,
                                          std::vector<std::pair<size_t, size_t>> in_place = {}) {
  std::vector<ir::TensorType> input_types;
  for (const Tensor& input : inputs) input_types.push_back(input.type);
  ASSIGN_OR_RETURN(std::vector<ir::TensorType> output_types,
                   ir::InferOutputTypes(op, attrs, input_types));
  std::vector<Tensor> outputs;
  for (const ir::TensorType& type : output_types) outputs.push_back(Zeros(type));
  ir::Node node;
  node.name = "node";
  node.op = op;
  node.attrs = std::move(attrs);
  std::vector<TensorRef> input_refs;
  for (Tensor& input : inputs) input_refs.push_back({&input.type, input.data()});
  std::vector<TensorRef> output_refs;
  for (Tensor& output : outputs) output_refs.push_back({&output.type, output.data()});
  for (auto [output, input] : in_place) output_refs[output].data = inputs[input].data();
  RETURN_IF_ERROR(RunReferenceKernel<float>(
      KernelCall{node, input_refs, output_refs, KernelContext{.step = step}}));
  for (auto [output, input] : in_place) outputs[output] = inputs[input];
  return outputs;
}

// The elements of a single-output op's result, or a failed test.
std::vector<float> RunFloat(OpKind op, std::vector<Tensor> inputs, AttrMap attrs = {},
                            uint64_t step = 0) {
  absl::StatusOr<std::vector<Tensor>> outputs =
      RunOp(op, std::move(inputs), std::move(attrs), step);
  if (!outputs.ok()) {
    ADD_FAILURE() << outputs.status();
    return {};
  }
  return outputs->front().f32;
}

std::vector<float> Iota(int count) {
  std::vector<float> values;
  for (int i = 0; i < count; ++i) values.push_back(static_cast<float>(i));
  return values;
}

auto Near(std::vector<float> expected, float tolerance = 1e-6f) {
  return Pointwise(FloatNear(tolerance), std::move(expected));
}

TEST(TensorKernelsTest, AddBroadcastsBothOperands) {
  // [[1,2,3],[4,5,6]] + [10,20,30]: b repeats over the rows.
  EXPECT_THAT(RunFloat(OpKind::kAdd, {F32({2, 3}, {1, 2, 3, 4, 5, 6}), F32({3}, {10, 20, 30})}),
              ElementsAre(11, 22, 33, 14, 25, 36));
  // [2,1] + [1,3] -> [2,3]: y[i][j] = a[i] + b[j].
  EXPECT_THAT(RunFloat(OpKind::kAdd, {F32({2, 1}, {1, 2}), F32({1, 3}, {10, 20, 30})}),
              ElementsAre(11, 21, 31, 12, 22, 32));
}

TEST(TensorKernelsTest, MulBroadcastsAScalar) {
  // [1,2,3] · 2 (a rank-0 b) and 2 · [1,2,3] (a rank-0 a).
  EXPECT_THAT(RunFloat(OpKind::kMul, {F32({3}, {1, 2, 3}), F32({}, {2})}), ElementsAre(2, 4, 6));
  EXPECT_THAT(RunFloat(OpKind::kMul, {F32({}, {2}), F32({3}, {1, 2, 3})}), ElementsAre(2, 4, 6));
}

TEST(TensorKernelsTest, SubAndDivBroadcast) {
  // [[10,20],[30,40]] - [1,2] and / [2,4], b repeating over the rows; 1 - [1,2,3] with a rank-0 a.
  const Tensor a = F32({2, 2}, {10, 20, 30, 40});
  EXPECT_THAT(RunFloat(OpKind::kSub, {a, F32({2}, {1, 2})}), ElementsAre(9, 18, 29, 38));
  EXPECT_THAT(RunFloat(OpKind::kSub, {F32({}, {1}), F32({3}, {1, 2, 3})}), ElementsAre(0, -1, -2));
  EXPECT_THAT(RunFloat(OpKind::kDiv, {a, F32({2}, {2, 4})}), ElementsAre(5, 5, 15, 10));
  // [2,1] / [1,2] -> [2,2]: y[i][j] = a[i] / b[j].
  EXPECT_THAT(RunFloat(OpKind::kDiv, {F32({2, 1}, {1, 3}), F32({1, 2}, {2, 4})}),
              ElementsAre(0.5, 0.25, 1.5, 0.75));
}

TEST(TensorKernelsTest, SubOfIntegersWraps) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // The smallest i64 minus 1 wraps around to the largest, as in numpy.
  absl::StatusOr<std::vector<Tensor>> y =
      RunOp(OpKind::kSub, {I64({2}, {5, kMin}), I64({2}, {7, 1})}, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(y->front().i64, ElementsAre(-2, kMax));
}

TEST(TensorKernelsTest, AddNSumsEveryInput) {
  EXPECT_THAT(RunFloat(OpKind::kAddN, {F32({2}, {1, 2}), F32({2}, {10, 20}), F32({2}, {100, 200})}),
              ElementsAre(111, 222));
}

TEST(TensorKernelsTest, ReluAndItsGradient) {
  EXPECT_THAT(RunFloat(OpKind::kRelu, {F32({4}, {-2, -0.5f, 0, 3})}), ElementsAre(0, 0, 0, 3));
  // dy passes where relu's output y is positive.
  EXPECT_THAT(RunFloat(OpKind::kReluBackward, {F32({3}, {5, 6, 7}), F32({3}, {0, 2, 0})}),
              ElementsAre(0, 6, 0));
}

TEST(TensorKernelsTest, GeluBothForms) {
  // gelu(1) = Φ(1) = 0.5·(1 + erf(1/√2)) = 0.8413447; gelu(0) = 0; gelu(-x) = gelu(x) - x.
  EXPECT_THAT(RunFloat(OpKind::kGelu, {F32({3}, {1, 0, -1})}),
              Near({0.8413447f, 0, 0.8413447f - 1}));
  // tanh form: 0.5·(1 + tanh(√(2/π)·1.044715)) = 0.8411920.
  EXPECT_THAT(RunFloat(OpKind::kGelu, {F32({1}, {1})}, {{"approximate", std::string("tanh")}}),
              Near({0.8411920f}));
  // gelu'(1) = Φ(1) + φ(1) = 0.8413447 + 0.2419707; gelu'(0) = 0.5 in both forms. dy = 2.
  EXPECT_THAT(RunFloat(OpKind::kGeluBackward, {F32({2}, {2, 2}), F32({2}, {1, 0})}),
              Near({2 * 1.0833155f, 1}));
  EXPECT_THAT(RunFloat(OpKind::kGeluBackward, {F32({1}, {2}), F32({1}, {0})},
                       {{"approximate", std::string("tanh")}}),
              Near({1}));
}

TEST(TensorKernelsTest, SigmoidAndItsGradient) {
  // σ(0) = 0.5, σ(ln 3) = 1/(1 + 1/3) = 0.75, σ(-ln 3) = 0.25; σ(-100) underflows to 0.
  EXPECT_THAT(RunFloat(OpKind::kSigmoid, {F32({4}, {0, std::log(3.0f), -std::log(3.0f), -100})}),
              Near({0.5, 0.75, 0.25, 0}));
  // dy·y·(1 - y) from the output: 2·0.5·0.5 = 0.5, 4·0.75·0.25 = 0.75.
  EXPECT_THAT(RunFloat(OpKind::kSigmoidBackward, {F32({2}, {2, 4}), F32({2}, {0.5, 0.75})}),
              ElementsAre(0.5, 0.75));
}

TEST(TensorKernelsTest, TanhAndItsGradient) {
  // tanh(ln 2) = (2 - 1/2)/(2 + 1/2) = 0.6; tanh is odd.
  EXPECT_THAT(RunFloat(OpKind::kTanh, {F32({3}, {0, std::log(2.0f), -std::log(2.0f)})}),
              Near({0, 0.6, -0.6}));
  // dy·(1 - y²) from the output: 2·(1 - 0.25) = 1.5, 1·(1 - 0) = 1.
  EXPECT_THAT(RunFloat(OpKind::kTanhBackward, {F32({2}, {2, 1}), F32({2}, {0.5, 0})}),
              ElementsAre(1.5, 1));
}

TEST(TensorKernelsTest, LeakyReluAndItsGradient) {
  const Tensor x = F32({4}, {-2, -0.5f, 0, 3});
  // The default slope is 0.01.
  EXPECT_THAT(RunFloat(OpKind::kLeakyRelu, {x}), Near({-0.02f, -0.005f, 0, 3}));
  EXPECT_THAT(RunFloat(OpKind::kLeakyRelu, {x}, {{"alpha", 0.5}}), ElementsAre(-1, -0.25, 0, 3));
  // From the input x: dy where x > 0, alpha·dy elsewhere, x = 0 included.
  EXPECT_THAT(RunFloat(OpKind::kLeakyReluBackward, {F32({4}, {4, 4, 4, 4}), x}, {{"alpha", 0.5}}),
              ElementsAre(2, 2, 2, 4));
}

TEST(TensorKernelsTest, ClipAndItsGradient) {
  // ReLU6: the bounds themselves, a point between, points beyond each, and NaN.
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = F32({7}, {-7, -1, 0, 0.5f, 6, 6.5f, kNaN});
  const AttrMap relu6 = {{"min", 0.0}, {"max", 6.0}};
  const std::vector<float> y = RunFloat(OpKind::kClip, {x}, relu6);
  EXPECT_THAT(y, ElementsAre(0, 0, 0, 0.5, 6, 6, IsNan()));
  // dy strictly between the bounds only, as PyTorch's hardtanh_backward; NaN
  // passes dy. From the output y, as autodiff emits it, or from x: the same.
  const Tensor dy = F32({7}, {4, 4, 4, 4, 4, 4, 4});
  EXPECT_THAT(RunFloat(OpKind::kClipBackward, {dy, F32({7}, y)}, relu6),
              ElementsAre(0, 0, 0, 4, 0, 0, 4));
  EXPECT_THAT(RunFloat(OpKind::kClipBackward, {dy, x}, relu6), ElementsAre(0, 0, 0, 4, 0, 0, 4));
  // One bound alone; without bounds clip is the identity, infinities included.
  EXPECT_THAT(RunFloat(OpKind::kClip, {F32({3}, {-5, 0.5f, 2})}, {{"max", 1.0}}),
              ElementsAre(-5, 0.5, 1));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(RunFloat(OpKind::kClip, {F32({4}, {-kInf, -1e30f, 3, kInf})}),
              ElementsAre(-kInf, -1e30f, 3, kInf));
}

TEST(TensorKernelsTest, MatMulWithTransposesAndAlpha) {
  // a = [[1,2,3],[4,5,6]], b = [[1,0],[0,1],[1,1]]:
  // a·b = [[1+3, 2+3], [4+6, 5+6]] = [[4,5],[10,11]].
  const Tensor a = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor a_t = F32({3, 2}, {1, 4, 2, 5, 3, 6});  // a stored transposed
  const Tensor b = F32({3, 2}, {1, 0, 0, 1, 1, 1});
  const Tensor b_t = F32({2, 3}, {1, 0, 1, 0, 1, 1});  // b stored transposed
  EXPECT_THAT(RunFloat(OpKind::kMatMul, {a, b}), ElementsAre(4, 5, 10, 11));
  EXPECT_THAT(RunFloat(OpKind::kMatMul, {a_t, b}, {{"transpose_a", true}}),
              ElementsAre(4, 5, 10, 11));
  EXPECT_THAT(RunFloat(OpKind::kMatMul, {a, b_t}, {{"transpose_b", true}}),
              ElementsAre(4, 5, 10, 11));
  EXPECT_THAT(RunFloat(OpKind::kMatMul, {a_t, b_t},
                       {{"transpose_a", true}, {"transpose_b", true}, {"alpha", 2.0}}),
              ElementsAre(8, 10, 20, 22));
}

TEST(TensorKernelsTest, MatMulBroadcastsBatches) {
  // a [2,1,2] = two rows [1,2] and [3,4]; b [2,1] = [[1],[10]] is shared by both batches:
  // 1 + 20 = 21 and 3 + 40 = 43.
  EXPECT_THAT(RunFloat(OpKind::kMatMul, {F32({2, 1, 2}, {1, 2, 3, 4}), F32({2, 1}, {1, 10})}),
              ElementsAre(21, 43));
  // a [2,1,1,2] against b [3,2,1]: y [2,3,1,1], y[i][j] = a_i · b_j with
  // a_0 = [1,2], a_1 = [3,4] and b_j = [j, 1]: [2, 3, 4] and [4, 7, 10].
  EXPECT_THAT(RunFloat(OpKind::kMatMul,
                       {F32({2, 1, 1, 2}, {1, 2, 3, 4}), F32({3, 2, 1}, {0, 1, 1, 1, 2, 1})}),
              ElementsAre(2, 3, 4, 4, 7, 10));
}

TEST(TensorKernelsTest, LinearAndItsWeightGradient) {
  // x [2,2] = [[1,2],[3,4]], w [3,2] = [[1,0],[0,1],[1,1]], b = [10,20,30]:
  // y = x·wᵀ + b = [[1,2,3],[3,4,7]] + b.
  const Tensor x = F32({2, 2}, {1, 2, 3, 4});
  const Tensor w = F32({3, 2}, {1, 0, 0, 1, 1, 1});
  EXPECT_THAT(RunFloat(OpKind::kLinear, {x, w, F32({3}, {10, 20, 30})}),
              ElementsAre(11, 22, 33, 13, 24, 37));
  EXPECT_THAT(RunFloat(OpKind::kLinear, {F32({2}, {1, 2}), w}), ElementsAre(1, 2, 3));
  // dw[o][i] = sum_r dy[r][o]·x[r][i] with dy = [[1,0,1],[0,1,1]]:
  // row 0 = x[0] = [1,2], row 1 = x[1] = [3,4], row 2 = x[0] + x[1] = [4,6].
  EXPECT_THAT(RunFloat(OpKind::kLinearBackwardWeight, {F32({2, 3}, {1, 0, 1, 0, 1, 1}), x}),
              ElementsAre(1, 2, 3, 4, 4, 6));
}

TEST(TensorKernelsTest, SliceWithStepsAndNegativeBounds) {
  // x [2,5] = [[0..4],[5..9]]. Axis 1 from -4 (= 1) to 100 (clamped to 5), step 2: columns 1, 3.
  const Tensor x = F32({2, 5}, Iota(10));
  const AttrMap columns = {
      {"axes", IntList{1}}, {"starts", IntList{-4}}, {"ends", IntList{100}}, {"steps", IntList{2}}};
  EXPECT_THAT(RunFloat(OpKind::kSlice, {x}, columns), ElementsAre(1, 3, 6, 8));
  // Row 1, columns 0 to -1 (= 4, exclusive) with step 3: columns 0 and 3.
  EXPECT_THAT(RunFloat(OpKind::kSlice, {x},
                       {{"axes", IntList{0, -1}},
                        {"starts", IntList{1, 0}},
                        {"ends", IntList{2, -1}},
                        {"steps", IntList{1, 3}}}),
              ElementsAre(5, 8));
  // The gradient puts dy back at columns 1 and 3 and zeros elsewhere.
  AttrMap backward = columns;
  backward.Set("input_shape", IntList{2, 5});
  EXPECT_THAT(RunFloat(OpKind::kSliceBackward, {F32({2, 2}, {1, 2, 3, 4})}, backward),
              ElementsAre(0, 1, 0, 2, 0, 0, 3, 0, 4, 0));
}

TEST(TensorKernelsTest, TransposeFollowsPerm) {
  // y[j][i] = x[i][j].
  EXPECT_THAT(RunFloat(OpKind::kTranspose, {F32({2, 3}, Iota(6))}, {{"perm", IntList{1, 0}}}),
              ElementsAre(0, 3, 1, 4, 2, 5));
  // x [2,2,3] with x[i][j][k] = 6i + 3j + k; perm [2,0,1] gives y [3,2,2] with
  // y[k][i][j] = x[i][j][k]: for k = 0: 0, 3, 6, 9; then 1, 4, 7, 10 and 2, 5, 8, 11.
  EXPECT_THAT(
      RunFloat(OpKind::kTranspose, {F32({2, 2, 3}, Iota(12))}, {{"perm", IntList{2, 0, 1}}}),
      ElementsAre(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11));
}

TEST(TensorKernelsTest, ConcatAlongFirstAndLastAxes) {
  const Tensor a = F32({2, 2}, {1, 2, 3, 4});
  const Tensor b = F32({2, 1}, {5, 6});
  EXPECT_THAT(RunFloat(OpKind::kConcat, {a, b}, {{"axis", int64_t{-1}}}),
              ElementsAre(1, 2, 5, 3, 4, 6));
  EXPECT_THAT(RunFloat(OpKind::kConcat, {a, F32({1, 2}, {7, 8})}, {{"axis", int64_t{0}}}),
              ElementsAre(1, 2, 3, 4, 7, 8));
}

TEST(TensorKernelsTest, ReduceSumWithAndWithoutKeepdims) {
  // x [2,3] = [[0,1,2],[3,4,5]]: rows sum to 3 and 12, columns to 3, 5 and 7.
  const Tensor x = F32({2, 3}, Iota(6));
  EXPECT_THAT(RunFloat(OpKind::kReduceSum, {x}, {{"axes", IntList{1}}}), ElementsAre(3, 12));
  absl::StatusOr<std::vector<Tensor>> kept =
      RunOp(OpKind::kReduceSum, {x}, {{"axes", IntList{0}}, {"keepdims", true}});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->front().type.shape, (ir::Shape{1, 3}));
  EXPECT_THAT(kept->front().f32, ElementsAre(3, 5, 7));
  EXPECT_THAT(RunFloat(OpKind::kReduceSum, {x}, {{"axes", IntList{0, -1}}}), ElementsAre(15));
}

TEST(TensorKernelsTest, FillAndReshapeOfIntegers) {
  absl::StatusOr<std::vector<Tensor>> filled =
      RunOp(OpKind::kFill, {},
            {{"shape", IntList{2, 2}}, {"value", int64_t{7}}, {"dtype", std::string("i64")}});
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_THAT(filled->front().i64, ElementsAre(7, 7, 7, 7));
  // An i64 tensor moves as 8-byte elements: [2,3] transposed.
  absl::StatusOr<std::vector<Tensor>> moved =
      RunOp(OpKind::kTranspose, {I64({2, 3}, {0, 1, 2, 3, 4, 5})}, {{"perm", IntList{1, 0}}});
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_THAT(moved->front().i64, ElementsAre(0, 3, 1, 4, 2, 5));
}

TEST(TensorKernelsTest, SgdStepWithMomentum) {
  // lr 0.1, momentum 0.9, weight decay 0.01; param [1,-2], grad [0.5,0.25], buf [0.1,0]:
  // g = grad + 0.01·param = [0.51, 0.23]; buf = 0.9·[0.1, 0] + g = [0.6, 0.23];
  // param = param - 0.1·buf = [0.94, -2.023].
  const std::vector<Tensor> inputs = {F32({2}, {1, -2}), F32({2}, {0.5f, 0.25f}),
                                      F32({2}, {0.1f, 0})};
  const AttrMap attrs = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}};
  absl::StatusOr<std::vector<Tensor>> heavy_ball = RunOp(OpKind::kSgdUpdate, inputs, attrs);
  ASSERT_TRUE(heavy_ball.ok()) << heavy_ball.status();
  EXPECT_THAT((*heavy_ball)[0].f32, Near({0.94f, -2.023f}));
  EXPECT_THAT((*heavy_ball)[1].f32, Near({0.6f, 0.23f}));
  // Nesterov steps along g + 0.9·buf = [1.05, 0.437]: param = [0.895, -2.0437].
  AttrMap nesterov = attrs;
  nesterov.Set("nesterov", true);
  absl::StatusOr<std::vector<Tensor>> ahead = RunOp(OpKind::kSgdUpdate, inputs, nesterov);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  EXPECT_THAT((*ahead)[0].f32, Near({0.895f, -2.0437f}));
  EXPECT_THAT((*ahead)[1].f32, Near({0.6f, 0.23f}));
  // Without momentum: param - 0.1·g = [0.949, -2.023].
  EXPECT_THAT(
      RunFloat(OpKind::kSgdUpdate, {inputs[0], inputs[1]}, {{"lr", 0.1}, {"weight_decay", 0.01}}),
      Near({0.949f, -2.023f}));
}

TEST(TensorKernelsTest, AdamWFirstStepMovesByLr) {
  // t = 1, lr 0.1, weight decay 0.1 (decoupled), param 1, grad 0.5, m = v = 0:
  // param = 1·(1 - 0.1·0.1) = 0.99; m = 0.1·0.5 = 0.05; v = 0.001·0.25 = 0.00025;
  // step size = 0.1 / (1 - 0.9) = 1; sqrt(v)/sqrt(1 - 0.999) = 0.0158114/0.0316228 = 0.5;
  // param = 0.99 - 1·0.05/(0.5 + 1e-8) = 0.89.
  absl::StatusOr<std::vector<Tensor>> outputs =
      RunOp(OpKind::kAdamUpdate,
            {F32({1}, {1}), F32({1}, {0.5f}), F32({1}, {0}), F32({1}, {0}), I64({}, {1})},
            {{"lr", 0.1}, {"weight_decay", 0.1}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_THAT((*outputs)[0].f32, Near({0.89f}));
  EXPECT_THAT((*outputs)[1].f32, Near({0.05f}));
  EXPECT_THAT((*outputs)[2].f32, Near({0.00025f}, 1e-9f));
}

TEST(TensorKernelsTest, AdamSecondStepAndL2Decay) {
  // t = 2, lr 0.01, param 2, grad -1, m 0.1, v 0.01:
  // m = 0.9·0.1 + 0.1·(-1) = -0.01; v = 0.999·0.01 + 0.001·1 = 0.01099;
  // step size = 0.01/(1 - 0.81) = 0.0526316; denominator = sqrt(0.01099)/sqrt(1 - 0.998001)
  //   = 0.1048332/0.0447102 = 2.3447279; param = 2 + 0.0526316·0.01/2.3447279 = 2.0002245.
  absl::StatusOr<std::vector<Tensor>> second =
      RunOp(OpKind::kAdamUpdate,
            {F32({1}, {2}), F32({1}, {-1}), F32({1}, {0.1f}), F32({1}, {0.01f}), I64({}, {2})},
            {{"lr", 0.01}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT((*second)[0].f32, Near({2.0002245f}));
  EXPECT_THAT((*second)[1].f32, Near({-0.01f}));
  EXPECT_THAT((*second)[2].f32, Near({0.01099f}));
  // Not decoupled (Adam with L2), t = 1, lr 0.1, decay 0.1, param 1, grad 0.5:
  // g = 0.5 + 0.1 = 0.6, m = 0.06, v = 0.00036, denominator = 0.6 + 1e-8: param = 1 - 0.1 = 0.9.
  absl::StatusOr<std::vector<Tensor>> l2 =
      RunOp(OpKind::kAdamUpdate,
            {F32({1}, {1}), F32({1}, {0.5f}), F32({1}, {0}), F32({1}, {0}), I64({}, {1})},
            {{"lr", 0.1}, {"weight_decay", 0.1}, {"decoupled", false}});
  ASSERT_TRUE(l2.ok()) << l2.status();
  EXPECT_THAT((*l2)[0].f32, Near({0.9f}));
  EXPECT_THAT((*l2)[1].f32, Near({0.06f}));
}

TEST(TensorKernelsTest, AdamRejectsStepZero) {
  absl::StatusOr<std::vector<Tensor>> outputs = RunOp(
      OpKind::kAdamUpdate,
      {F32({1}, {1}), F32({1}, {1}), F32({1}, {0}), F32({1}, {0}), I64({}, {0})}, {{"lr", 0.1}});
  ASSERT_FALSE(outputs.ok());
  EXPECT_THAT(std::string(StatusMessage(outputs.status())),
              HasSubstr("node (adam_update): step must be >= 1"));
}

constexpr int kDropoutElements = 100'000;

TEST(TensorKernelsTest, DropoutBackwardReplaysTheMask) {
  const double p = 0.25;
  const AttrMap attrs = {{"p", p}, {"seed", int64_t{42}}};
  std::vector<float> x(kDropoutElements);
  for (int i = 0; i < kDropoutElements; ++i) x[i] = 1.0f + static_cast<float>(i % 7);
  const std::vector<float> y = RunFloat(OpKind::kDropout, {F32({kDropoutElements}, x)}, attrs, 3);
  // dy = 1 gives dx = mask · scale, with scale = 1/(1 - 0.25) = 4/3.
  const std::vector<float> dx =
      RunFloat(OpKind::kDropoutBackward,
               {F32({kDropoutElements}, std::vector<float>(kDropoutElements, 1))}, attrs, 3);
  ASSERT_EQ(y.size(), x.size());
  ASSERT_EQ(dx.size(), x.size());
  const float scale = 1.0f / (1.0f - 0.25f);
  int kept = 0;
  for (int i = 0; i < kDropoutElements; ++i) {
    // Bitwise: the same mask and the same product x · scale.
    ASSERT_EQ(y[i], x[i] * dx[i]) << "element " << i;
    ASSERT_TRUE(dx[i] == 0 || dx[i] == scale) << "element " << i;
    kept += dx[i] != 0 ? 1 : 0;
  }
  // The kept fraction is binomial: 1 - p = 0.75 with a standard deviation of
  // sqrt(0.75·0.25/1e5) = 0.0014, so 0.01 is seven of them.
  EXPECT_NEAR(static_cast<double>(kept) / kDropoutElements, 1 - p, 0.01);
}

TEST(TensorKernelsTest, DropoutMaskChangesWithTheStep) {
  const AttrMap attrs = {{"p", 0.5}, {"seed", int64_t{42}}};
  const Tensor ones = F32({kDropoutElements}, std::vector<float>(kDropoutElements, 1));
  const std::vector<float> step_3 = RunFloat(OpKind::kDropout, {ones}, attrs, 3);
  const std::vector<float> step_4 = RunFloat(OpKind::kDropout, {ones}, attrs, 4);
  ASSERT_EQ(step_3.size(), step_4.size());
  int differing = 0;
  for (size_t i = 0; i < step_3.size(); ++i) differing += step_3[i] != step_4[i] ? 1 : 0;
  // Independent masks with p = 0.5 differ in half the elements.
  EXPECT_NEAR(static_cast<double>(differing) / kDropoutElements, 0.5, 0.01);
  // The same step gives the same mask.
  EXPECT_EQ(RunFloat(OpKind::kDropout, {ones}, attrs, 3), step_3);
}

// Output 0 written over input `input`'s buffer equals output 0 in a buffer of its own.
void ExpectSameInPlace(OpKind op, const std::vector<Tensor>& inputs, const AttrMap& attrs,
                       std::vector<std::pair<size_t, size_t>> in_place) {
  absl::StatusOr<std::vector<Tensor>> separate = RunOp(op, inputs, attrs);
  absl::StatusOr<std::vector<Tensor>> aliased = RunOp(op, inputs, attrs, 0, in_place);
  ASSERT_TRUE(separate.ok()) << separate.status();
  ASSERT_TRUE(aliased.ok()) << aliased.status();
  for (auto [output, input] : in_place) {
    EXPECT_THAT((*aliased)[output].f32, ElementsAreArray((*separate)[output].f32))
        << ir::OpName(op) << " output " << output << " over input " << input;
  }
}

TEST(TensorKernelsTest, InPlaceOutputsMatchSeparateBuffers) {
  const Tensor a = F32({2, 3}, {-1, 2, -3, 4, -5, 6});
  const Tensor b = F32({2, 3}, {0.5f, -1, 2, 0.25f, 3, -2});
  const Tensor row = F32({3}, {1, -2, 3});
  ExpectSameInPlace(OpKind::kRelu, {a}, {}, {{0, 0}});
  ExpectSameInPlace(OpKind::kAdd, {a, b}, {}, {{0, 0}});
  ExpectSameInPlace(OpKind::kAdd, {a, b}, {}, {{0, 1}});
  ExpectSameInPlace(OpKind::kAdd, {a, row}, {}, {{0, 0}});  // b broadcast under an aliased a
  ExpectSameInPlace(OpKind::kMul, {row, a}, {}, {{0, 1}});  // a broadcast under an aliased b
  ExpectSameInPlace(OpKind::kAddN, {a, b, a}, {}, {{0, 2}});
  const Tensor v = F32({2, 3}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
  ExpectSameInPlace(OpKind::kSgdUpdate, {a, b, v},
                    {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", true}}, {{0, 0}, {1, 2}});
  ExpectSameInPlace(OpKind::kAdamUpdate, {a, b, b, v, I64({}, {3})},
                    {{"lr", 0.01}, {"weight_decay", 0.1}}, {{0, 0}, {1, 2}, {2, 3}});
}

TEST(TensorKernelsTest, ErrorsNameTheNodeAndOp) {
  // A transpose whose output type does not match its perm (as a hand-built call could be).
  ir::TensorType x_type = ir::F32({2, 3});
  ir::TensorType y_type = ir::F32({2, 3});
  std::vector<float> x(6), y(6);
  ir::Node node;
  node.name = "t0";
  node.op = OpKind::kTranspose;
  node.attrs = {{"perm", IntList{1, 0}}};
  const TensorRef input{&x_type, x.data()};
  const TensorRef output{&y_type, y.data()};
  const absl::Status status =
      RunReferenceKernel<float>(KernelCall{node, {&input, 1}, {&output, 1}, {}});
  EXPECT_THAT(std::string(StatusMessage(status)), HasSubstr("t0 (transpose): the output is"));
}

}  // namespace
}  // namespace spillway::backends::reference
