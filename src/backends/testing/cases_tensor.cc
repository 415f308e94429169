// Op-test cases of the tensor ops: element-wise ops, matrix products, data
// movement, fill, reductions and the optimizer updates. Shapes are tiny
// because the gradient check runs two forward evaluations per input element.
#include <string>
#include <utility>
#include <vector>

#include "backends/testing/op_test.h"

namespace spillway::backends::testing {
namespace {

using ir::Activation;
using ir::AttrMap;
using ir::F32;
using ir::IntList;
using ir::OpKind;

// An op without a gradient rule (gradient accumulation, reductions, fill,
// updates): compared with the reference and run twice, never differentiated.
OpTestCase NoGradientCase(std::string name, OpKind op, std::vector<ir::TensorType> inputs,
                          AttrMap attrs = {}) {
  OpTestCase test_case = Case(std::move(name), op, std::move(inputs), std::move(attrs));
  test_case.check_gradient = false;
  return test_case;
}

void AddElementwiseCases(std::vector<OpTestCase>& cases) {
  cases.push_back(Case("relu/nhwc", OpKind::kRelu, {Activation({2, 2, 3, 2})}));
  cases.push_back(Case("gelu/erf", OpKind::kGelu, {F32({3, 5})}));
  // Wider inputs reach the tails of both forms.
  OpTestCase tanh =
      Case("gelu/tanh", OpKind::kGelu, {F32({3, 5})}, {{"approximate", std::string("tanh")}});
  tanh.low = -4.0;
  tanh.high = 4.0;
  cases.push_back(std::move(tanh));
  // Wide enough to reach the flat tails, where the gradients are small.
  OpTestCase sigmoid = Case("sigmoid/wide", OpKind::kSigmoid, {F32({3, 5})});
  sigmoid.low = -6.0;
  sigmoid.high = 6.0;
  cases.push_back(std::move(sigmoid));
  OpTestCase tanh_nhwc = Case("tanh/nhwc", OpKind::kTanh, {Activation({1, 2, 3, 2})});
  tanh_nhwc.low = -3.0;
  tanh_nhwc.high = 3.0;
  cases.push_back(std::move(tanh_nhwc));
  cases.push_back(Case("leaky_relu/default_alpha", OpKind::kLeakyRelu, {F32({3, 5})}));
  cases.push_back(Case("leaky_relu/alpha0.2_nhwc", OpKind::kLeakyRelu, {Activation({2, 2, 3, 2})},
                       {{"alpha", 0.2}}));
  // Inputs on both sides of each bound, so that dx is dy in some elements and 0
  // in others. The finite differences are meaningless across a bound, as for
  // relu at 0; the seeded draws land much further from the bounds than the
  // step (about 1e-5), which a gradient mismatch would show.
  OpTestCase relu6 = Case("clip/relu6_nhwc", OpKind::kClip, {Activation({2, 2, 3, 2})},
                          {{"min", 0.0}, {"max", 6.0}});
  relu6.low = -2.0;
  relu6.high = 8.0;
  cases.push_back(std::move(relu6));
  cases.push_back(
      Case("clip/hardtanh", OpKind::kClip, {F32({3, 5})}, {{"min", -0.5}, {"max", 0.5}}));
  cases.push_back(Case("clip/max_only", OpKind::kClip, {F32({3, 5})}, {{"max", 0.25}}));
  cases.push_back(
      Case("dropout/p0.3", OpKind::kDropout, {F32({4, 8})}, {{"p", 0.3}, {"seed", int64_t{7}}}));
  cases.push_back(Case("dropout/p0_keeps_all", OpKind::kDropout, {F32({2, 5})},
                       {{"p", 0.0}, {"seed", int64_t{1}}}));

  cases.push_back(Case("add/same_shape", OpKind::kAdd, {F32({2, 3}), F32({2, 3})}));
  cases.push_back(Case("add/bias_row_nhwc", OpKind::kAdd, {Activation({2, 2, 2, 3}), F32({3})}));
  cases.push_back(Case("add/stretch_both", OpKind::kAdd, {F32({2, 1, 4}), F32({3, 1})}));
  cases.push_back(Case("add/scalar", OpKind::kAdd, {F32({}), F32({2, 3})}));
  cases.push_back(Case("mul/same_shape", OpKind::kMul, {F32({2, 3}), F32({2, 3})}));
  cases.push_back(Case("mul/stretch_both", OpKind::kMul, {F32({3, 1, 2}), F32({4, 2})}));
  cases.push_back(Case("mul/prepend_and_stretch", OpKind::kMul, {F32({2, 3, 2}), F32({1, 2})}));
  cases.push_back(Case("sub/same_shape", OpKind::kSub, {F32({2, 3}), F32({2, 3})}));
  cases.push_back(Case("sub/mean_row_nhwc", OpKind::kSub, {Activation({2, 2, 2, 3}), F32({3})}));
  cases.push_back(Case("sub/scalar_minus_stretched", OpKind::kSub, {F32({}), F32({2, 1, 3})}));
  cases.push_back(Case("sub/stretch_both", OpKind::kSub, {F32({2, 1, 4}), F32({3, 1})}));
  // Every float drawn from [0.5, 2]: the divisor stays away from 0, where the
  // finite differences of a / b would blow up.
  auto div = [](std::string name, std::vector<ir::TensorType> inputs) {
    OpTestCase test_case = Case(std::move(name), OpKind::kDiv, std::move(inputs));
    test_case.low = 0.5;
    test_case.high = 2.0;
    return test_case;
  };
  cases.push_back(div("div/same_shape", {F32({2, 3}), F32({2, 3})}));
  cases.push_back(div("div/channel_scale_nhwc", {Activation({2, 2, 2, 3}), F32({3})}));
  cases.push_back(div("div/scalar_by_tensor", {F32({}), F32({2, 3})}));
  cases.push_back(div("div/stretch_both", {F32({3, 1, 2}), F32({4, 2})}));
  cases.push_back(
      NoGradientCase("add_n/three", OpKind::kAddN, {F32({2, 3}), F32({2, 3}), F32({2, 3})}));
}

void AddMatMulCases(std::vector<OpTestCase>& cases) {
  cases.push_back(Case("matmul/2d", OpKind::kMatMul, {F32({3, 4}), F32({4, 5})}));
  cases.push_back(Case("matmul/transpose_a", OpKind::kMatMul, {F32({4, 3}), F32({4, 2})},
                       {{"transpose_a", true}}));
  cases.push_back(Case("matmul/transpose_b_alpha", OpKind::kMatMul, {F32({3, 4}), F32({5, 4})},
                       {{"transpose_b", true}, {"alpha", 0.5}}));
  cases.push_back(Case("matmul/both_transposed", OpKind::kMatMul, {F32({4, 3}), F32({2, 4})},
                       {{"transpose_a", true}, {"transpose_b", true}}));
  cases.push_back(Case("matmul/batched", OpKind::kMatMul, {F32({2, 3, 4}), F32({2, 4, 2})}));
  // Batch axes broadcast: a's [2,1] against b's [3] gives [2,3].
  cases.push_back(Case("matmul/broadcast_batches_transpose_b", OpKind::kMatMul,
                       {F32({2, 1, 2, 3}), F32({3, 4, 3})}, {{"transpose_b", true}}));
  // A batch against one matrix (linear's data gradient).
  cases.push_back(
      Case("matmul/batch_times_matrix", OpKind::kMatMul, {F32({2, 3, 4}), F32({4, 2})}));

  cases.push_back(
      Case("linear/bias_rank3", OpKind::kLinear, {F32({2, 3, 4}), F32({5, 4}), F32({5})}));
  cases.push_back(Case("linear/no_bias", OpKind::kLinear, {F32({3, 4}), F32({2, 4})}));
  cases.push_back(Case("linear/single_row", OpKind::kLinear, {F32({4}), F32({3, 4}), F32({3})}));
}

void AddDataMovementCases(std::vector<OpTestCase>& cases) {
  cases.push_back(
      Case("concat/axis0", OpKind::kConcat, {F32({1, 3}), F32({2, 3})}, {{"axis", int64_t{0}}}));
  cases.push_back(Case("concat/middle_axis", OpKind::kConcat, {F32({2, 1, 3}), F32({2, 2, 3})},
                       {{"axis", int64_t{1}}}));
  cases.push_back(
      Case("concat/channels_three_inputs", OpKind::kConcat,
           {Activation({1, 2, 2, 1}), Activation({1, 2, 2, 3}), Activation({1, 2, 2, 2})},
           {{"axis", int64_t{-1}}}));

  // Negative starts and ends, bounds past the end clamped, steps of 2 and 3.
  cases.push_back(Case("slice/steps_negative_bounds", OpKind::kSlice, {F32({5, 7})},
                       {{"axes", IntList{0, -1}},
                        {"starts", IntList{-4, 1}},
                        {"ends", IntList{100, -1}},
                        {"steps", IntList{2, 3}}}));
  cases.push_back(Case("slice/clamped_start", OpKind::kSlice, {F32({2, 5, 3})},
                       {{"axes", IntList{1}}, {"starts", IntList{-100}}, {"ends", IntList{3}}}));
  cases.push_back(Case("slice/nhwc_spatial", OpKind::kSlice, {Activation({1, 4, 5, 2})},
                       {{"axes", IntList{1, 2}},
                        {"starts", IntList{1, 0}},
                        {"ends", IntList{3, 5}},
                        {"steps", IntList{1, 2}}}));

  cases.push_back(Case("reshape/inferred_dim", OpKind::kReshape, {F32({2, 3, 4})},
                       {{"shape", IntList{4, -1}}}));
  cases.push_back(Case("reshape/to_nhwc", OpKind::kReshape, {F32({2, 12})},
                       {{"shape", IntList{2, 2, 3, 2}}, {"layout", std::string("nhwc")}}));
  cases.push_back(
      Case("transpose/2d", OpKind::kTranspose, {F32({3, 4})}, {{"perm", IntList{1, 0}}}));
  cases.push_back(Case("transpose/nhwc_to_nchw", OpKind::kTranspose, {Activation({2, 3, 2, 4})},
                       {{"perm", IntList{0, 3, 1, 2}}}));
  cases.push_back(Case("transpose/rank3_cycle", OpKind::kTranspose, {F32({2, 3, 4})},
                       {{"perm", IntList{2, 0, 1}}}));
  cases.push_back(Case("flatten/axis1", OpKind::kFlatten, {Activation({2, 2, 2, 3})}));
  cases.push_back(
      Case("flatten/axis_minus1", OpKind::kFlatten, {F32({2, 3, 4})}, {{"axis", int64_t{-1}}}));

  cases.push_back(
      NoGradientCase("fill/f32", OpKind::kFill, {}, {{"shape", IntList{2, 3}}, {"value", 1.5}}));
  cases.push_back(
      NoGradientCase("fill/i64_scalar", OpKind::kFill, {},
                     {{"shape", IntList{}}, {"value", int64_t{1}}, {"dtype", std::string("i64")}}));
}

void AddReductionCases(std::vector<OpTestCase>& cases) {
  cases.push_back(NoGradientCase("reduce_sum/middle_axis", OpKind::kReduceSum, {F32({2, 3, 4})},
                                 {{"axes", IntList{1}}}));
  cases.push_back(NoGradientCase("reduce_sum/keepdims_outer_axes", OpKind::kReduceSum,
                                 {F32({2, 3, 4})}, {{"axes", IntList{0, -1}}, {"keepdims", true}}));
  // A convolution's bias gradient: every axis but the channels.
  cases.push_back(NoGradientCase("reduce_sum/nhwc_to_channels", OpKind::kReduceSum,
                                 {Activation({2, 3, 2, 4})}, {{"axes", IntList{0, 1, 2}}}));
}

void AddUpdateCases(std::vector<OpTestCase>& cases) {
  cases.push_back(NoGradientCase("sgd_update/plain_weight_decay", OpKind::kSgdUpdate,
                                 {F32({2, 3}), F32({2, 3})},
                                 {{"lr", 0.1}, {"weight_decay", 0.01}}));
  cases.push_back(NoGradientCase("sgd_update/momentum", OpKind::kSgdUpdate,
                                 {F32({2, 3}), F32({2, 3}), F32({2, 3})},
                                 {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 1e-4}}));
  cases.push_back(NoGradientCase("sgd_update/nesterov", OpKind::kSgdUpdate,
                                 {F32({5}), F32({5}), F32({5})},
                                 {{"lr", 0.05}, {"momentum", 0.8}, {"nesterov", true}}));
  // Adam's second moment v must not be negative: every float is drawn from
  // [0, 1]. The step counts updates from 1.
  for (const bool decoupled : {true, false}) {
    OpTestCase adam =
        NoGradientCase(decoupled ? "adam_update/adamw" : "adam_update/l2", OpKind::kAdamUpdate,
                       {F32({2, 3}), F32({2, 3}), F32({2, 3}), F32({2, 3}), ir::I64({})},
                       {{"lr", 1e-2}, {"weight_decay", 0.1}, {"decoupled", decoupled}});
    adam.low = 0.0;
    adam.high = 1.0;
    adam.int_low = 1;
    adam.int_limit = 5;
    cases.push_back(std::move(adam));
  }
}

}  // namespace

std::vector<OpTestCase> TensorOpTestCases() {
  std::vector<OpTestCase> cases;
  AddElementwiseCases(cases);
  AddMatMulCases(cases);
  AddDataMovementCases(cases);
  AddReductionCases(cases);
  AddUpdateCases(cases);
  return cases;
}

}  // namespace spillway::backends::testing
