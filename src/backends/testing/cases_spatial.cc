// Op-test cases of the spatial ops: convolution, pooling, normalization,
// resize, softmax, losses and embedding. Shapes are small because the
// gradient check runs two forward evaluations per input element.
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

void AddConvolutionCases(std::vector<OpTestCase>& cases) {
  cases.push_back(Case("conv2d/3x3_pad1_bias", OpKind::kConv2d,
                       {Activation({2, 5, 5, 3}), F32({4, 3, 3, 3}), F32({4})},
                       {{"pads", IntList{1, 1, 1, 1}}}));
  cases.push_back(
      Case("conv2d/stride2_uneven_pads_groups2", OpKind::kConv2d,
           {Activation({2, 5, 5, 4}), F32({6, 3, 3, 2})},
           {{"strides", IntList{2, 2}}, {"pads", IntList{1, 0, 1, 2}}, {"groups", int64_t{2}}}));
  // U-Net's up-convolution: a 2x2 kernel padded on the bottom and the right
  // only, so rows and columns both differ between their two sides.
  cases.push_back(Case("conv2d/2x2_pad_bottom_right_bias", OpKind::kConv2d,
                       {Activation({2, 4, 3, 3}), F32({2, 2, 2, 3}), F32({2})},
                       {{"pads", IntList{0, 0, 1, 1}}}));
  cases.push_back(Case("conv2d/dilation2_rect_kernel", OpKind::kConv2d,
                       {Activation({1, 6, 5, 2}), F32({3, 2, 3, 2}), F32({3})},
                       {{"dilations", IntList{2, 2}}, {"pads", IntList{1, 2, 1, 2}}}));
  cases.push_back(Case("conv2d/depthwise_stride2", OpKind::kConv2d,
                       {Activation({2, 5, 5, 3}), F32({3, 3, 3, 1})},
                       {{"strides", IntList{2, 1}}, {"groups", int64_t{3}}}));
  // The input gradient added to the gradients of x's other consumers (acc,
  // input 2), as autodiff emits it: a downsampling shortcut's 1x1 stride 2,
  // and a grouped 3x3 with uneven pads. A backward op: no gradient check.
  for (OpTestCase accumulate :
       {Case("conv2d_backward_data/1x1_stride2_accumulate", OpKind::kConv2dBackwardData,
             {Activation({2, 3, 3, 8}), F32({8, 1, 1, 4}), Activation({2, 5, 5, 4})},
             {{"strides", IntList{2, 2}}, {"input_shape", IntList{2, 5, 5, 4}}}),
        Case("conv2d_backward_data/3x3_groups2_accumulate", OpKind::kConv2dBackwardData,
             {Activation({2, 3, 3, 6}), F32({6, 3, 3, 2}), Activation({2, 5, 5, 4})},
             {{"strides", IntList{2, 2}},
              {"pads", IntList{1, 0, 1, 2}},
              {"groups", int64_t{2}},
              {"input_shape", IntList{2, 5, 5, 4}}})}) {
    accumulate.check_gradient = false;
    cases.push_back(std::move(accumulate));
  }
  // The filter gradient of the uneven-padded grouped convolution above.
  OpTestCase filter_gradient =
      Case("conv2d_backward_weight/3x3_stride2_uneven_pads_groups2", OpKind::kConv2dBackwardWeight,
           {Activation({2, 3, 3, 6}), Activation({2, 5, 5, 4})},
           {{"kernel", IntList{3, 3}},
            {"strides", IntList{2, 2}},
            {"pads", IntList{1, 0, 1, 2}},
            {"groups", int64_t{2}}});
  filter_gradient.check_gradient = false;
  cases.push_back(std::move(filter_gradient));
}

void AddPoolingCases(std::vector<OpTestCase>& cases) {
  cases.push_back(Case("max_pool/2x2", OpKind::kMaxPool, {Activation({2, 4, 4, 3})},
                       {{"kernel", IntList{2, 2}}}));
  cases.push_back(
      Case("max_pool/3x3_stride2_pad1", OpKind::kMaxPool, {Activation({2, 5, 5, 3})},
           {{"kernel", IntList{3, 3}}, {"strides", IntList{2, 2}}, {"pads", IntList{1, 1, 1, 1}}}));
  cases.push_back(
      Case("avg_pool/3x3_stride2_pad1", OpKind::kAvgPool, {Activation({2, 5, 5, 3})},
           {{"kernel", IntList{3, 3}}, {"strides", IntList{2, 2}}, {"pads", IntList{1, 1, 1, 1}}}));
  cases.push_back(Case("avg_pool/count_include_pad_2x3", OpKind::kAvgPool,
                       {Activation({2, 5, 5, 3})},
                       {{"kernel", IntList{2, 3}},
                        {"strides", IntList{1, 2}},
                        {"pads", IntList{1, 1, 0, 2}},
                        {"count_include_pad", true}}));
  cases.push_back(Case("global_avg_pool/3x4", OpKind::kGlobalAvgPool, {Activation({2, 3, 4, 3})}));
}

void AddNormalizationCases(std::vector<OpTestCase>& cases) {
  // Running statistics are state, not differentiated. Inference normalizes
  // with running_var, so every input is drawn positive.
  OpTestCase training = Case("batch_norm/training", OpKind::kBatchNorm,
                             {Activation({2, 3, 3, 4}), F32({4}), F32({4}), F32({4}), F32({4})},
                             {{"training", true}, {"momentum", 0.2}});
  training.no_gradient = {3, 4};
  cases.push_back(training);
  OpTestCase rank2 = Case("batch_norm/training_rank2", OpKind::kBatchNorm,
                          {F32({6, 3}), F32({3}), F32({3}), F32({3}), F32({3})});
  rank2.no_gradient = {3, 4};
  cases.push_back(rank2);
  OpTestCase inference = Case("batch_norm/inference", OpKind::kBatchNorm,
                              {Activation({2, 3, 3, 4}), F32({4}), F32({4}), F32({4}), F32({4})},
                              {{"training", false}, {"epsilon", 1e-3}});
  inference.no_gradient = {3, 4};
  inference.low = 0.5;
  inference.high = 1.5;
  cases.push_back(inference);
  cases.push_back(
      Case("layer_norm/rows", OpKind::kLayerNorm, {F32({2, 3, 5}), F32({5}), F32({5})}));
}

void AddResizeCases(std::vector<OpTestCase>& cases) {
  cases.push_back(Case("resize_bilinear/up_align_corners", OpKind::kResizeBilinear,
                       {Activation({1, 3, 3, 2})},
                       {{"size", IntList{5, 4}}, {"align_corners", true}}));
  cases.push_back(Case("resize_bilinear/up_half_pixel", OpKind::kResizeBilinear,
                       {Activation({2, 2, 3, 2})}, {{"size", IntList{4, 5}}}));
  cases.push_back(Case("resize_bilinear/down_half_pixel", OpKind::kResizeBilinear,
                       {Activation({1, 5, 4, 2})}, {{"size", IntList{3, 3}}}));
  cases.push_back(Case("resize_bilinear/down_align_corners_to_1", OpKind::kResizeBilinear,
                       {Activation({1, 4, 3, 2})},
                       {{"size", IntList{1, 2}}, {"align_corners", true}}));
  cases.push_back(Case("resize_nearest/up_2x", OpKind::kResizeNearest, {Activation({2, 2, 3, 2})},
                       {{"size", IntList{4, 6}}}));
  // Rows 3 -> 5 and columns 4 -> 3: uneven factors, some columns never read.
  cases.push_back(Case("resize_nearest/uneven_up_and_down", OpKind::kResizeNearest,
                       {Activation({1, 3, 4, 2})}, {{"size", IntList{5, 3}}}));
  cases.push_back(Case("resize_nearest/down_to_1", OpKind::kResizeNearest,
                       {Activation({1, 4, 3, 1})}, {{"size", IntList{1, 2}}}));
}

void AddSoftmaxAndLossCases(std::vector<OpTestCase>& cases) {
  OpTestCase softmax = Case("softmax/last_axis", OpKind::kSoftmax, {F32({3, 5})});
  softmax.low = -3.0;
  softmax.high = 3.0;
  cases.push_back(softmax);
  cases.push_back(
      Case("softmax/middle_axis", OpKind::kSoftmax, {F32({2, 3, 4})}, {{"axis", int64_t{1}}}));
  // [Q, K] = [3, 4]: query q sees keys j <= q + 1.
  cases.push_back(Case("softmax/causal", OpKind::kSoftmax, {F32({2, 3, 4})}, {{"causal", true}}));
  // [Q, K] = [4, 3]: query 0 sees no key and gets zeros.
  cases.push_back(Case("softmax/causal_more_queries_than_keys", OpKind::kSoftmax, {F32({4, 3})},
                       {{"causal", true}}));
  cases.push_back(Case("log_softmax/last_axis", OpKind::kLogSoftmax, {F32({3, 5})}));
  cases.push_back(
      Case("log_softmax/axis0", OpKind::kLogSoftmax, {F32({4, 3})}, {{"axis", int64_t{0}}}));

  OpTestCase mean =
      Case("cross_entropy_loss/mean", OpKind::kCrossEntropyLoss, {F32({4, 5}), ir::I64({4})});
  mean.int_limit = 5;
  cases.push_back(mean);
  // Labels 0 are ignored (about a third of the 8 rows).
  OpTestCase ignored =
      Case("cross_entropy_loss/mean_ignore_index_i32", OpKind::kCrossEntropyLoss,
           {F32({2, 4, 3}), {ir::DType::kI32, {2, 4}}}, {{"ignore_index", int64_t{0}}});
  ignored.int_limit = 3;
  cases.push_back(ignored);
  OpTestCase none = Case("cross_entropy_loss/none_ignore_index", OpKind::kCrossEntropyLoss,
                         {F32({2, 4, 3}), ir::I64({2, 4})},
                         {{"ignore_index", int64_t{2}}, {"reduction", std::string("none")}});
  none.int_limit = 3;
  cases.push_back(none);
}

void AddEmbeddingCases(std::vector<OpTestCase>& cases) {
  OpTestCase i64 = Case("embedding/i64", OpKind::kEmbedding, {F32({6, 4}), ir::I64({2, 3})});
  i64.int_limit = 6;
  cases.push_back(i64);
  // Three indices into two rows: rows repeat, so the backward must add.
  OpTestCase repeated = Case("embedding/i32_repeated_rows", OpKind::kEmbedding,
                             {F32({2, 3}), {ir::DType::kI32, {3}}});
  repeated.int_limit = 2;
  cases.push_back(repeated);
}

}  // namespace

std::vector<OpTestCase> SpatialOpTestCases() {
  std::vector<OpTestCase> cases;
  AddConvolutionCases(cases);
  AddPoolingCases(cases);
  AddNormalizationCases(cases);
  AddResizeCases(cases);
  AddSoftmaxAndLossCases(cases);
  AddEmbeddingCases(cases);
  return cases;
}

}  // namespace spillway::backends::testing
