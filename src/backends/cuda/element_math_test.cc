// The CUDA kernels' arithmetic, on the host: element_math.h holds what one
// thread of a kernel computes where the index work is the risk, and these
// tests run it on the CPU, pass by pass in the kernels' order, through a
// backend that stands in for the CUDA one on those ops (the reference kernels
// run the rest), over the op harness's cases and a few larger ones. They need
// no device, so they run everywhere CI does.
#include "backends/cuda/element_math.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/convolution.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/testing/forwarding_backend.h"
#include "backends/testing/op_test.h"
#include "fmt/format.h"
#include "ir/op_kind.h"
#include "ir/types.h"
#include "program/workspace_sizes.h"
#include "support/status_macros.h"

namespace spillway::backends::cuda {
namespace {

// The partial sums [chunks][channels][2] as batch norm's partial-sum kernels
// leave them: per chunk and channel, the lanes' sums added in lane order.
template <typename LaneSums>
std::vector<double> PartialsAsTheKernelsAddThem(int64_t rows, int64_t channels,
                                                LaneSums lane_sums) {
  const program::BatchNormChunking chunking = program::ChunkBatchNormRows(rows);
  std::vector<double> partials(static_cast<size_t>(chunking.chunks * channels * 2));
  for (int64_t k = 0; k < chunking.chunks; ++k) {
    for (int64_t c = 0; c < channels; ++c) {
      double first = 0;
      double second = 0;
      for (int lane = 0; lane < kBatchNormLanes; ++lane) {
        const PairSum sums = lane_sums(chunking, k, lane, c);
        first += sums.first;
        second += sums.second;
      }
      partials[static_cast<size_t>((k * channels + c) * 2)] = first;
      partials[static_cast<size_t>((k * channels + c) * 2 + 1)] = second;
    }
  }
  return partials;
}

float* OutputOrNull(const KernelCall& call, size_t k) {
  return k < call.outputs.size() ? call.outputs[k].as<float>() : nullptr;
}

// batch_norm as the CUDA kernels compute it, their passes one after another.
absl::Status BatchNormAsTheKernels(const KernelCall& call) {
  const ir::MatrixExtent m = ir::AsMatrix(call.inputs[0].type->shape);
  const auto channel = [&](int64_t i) { return static_cast<size_t>(i % m.columns); };
  const float* x = call.inputs[0].as<const float>();
  const float* gamma = call.inputs[1].as<const float>();
  const float* beta = call.inputs[2].as<const float>();
  float* y = OutputOrNull(call, 0);
  const float epsilon = static_cast<float>(*call.node.attrs.GetFloat("epsilon", 1e-5));
  std::vector<float> mean(static_cast<size_t>(m.columns));
  std::vector<float> inv_std(static_cast<size_t>(m.columns));
  if (const std::optional<SavedStatistics> saved = SavedStatisticsOf(call)) {
    std::copy_n(saved->mean->as<const float>(), mean.size(), mean.begin());
    std::copy_n(saved->inv_std->as<const float>(), inv_std.size(), inv_std.begin());
  } else if (!*call.node.attrs.GetBool("training", true)) {
    for (size_t c = 0; c < mean.size(); ++c) {
      mean[c] = call.inputs[3].as<const float>()[c];
      inv_std[c] = InvStd(call.inputs[4].as<const float>()[c], epsilon);
    }
  } else {
    const std::vector<double> partials = PartialsAsTheKernelsAddThem(
        m.rows, m.columns,
        [&](const program::BatchNormChunking& chunking, int64_t k, int lane, int64_t c) {
          return LaneMoments(x, m.rows, m.columns, chunking, k, lane, c);
        });
    const BatchNormTraining settings{
        .epsilon = epsilon,
        .momentum = static_cast<float>(*call.node.attrs.GetFloat("momentum", 0.1))};
    for (int64_t c = 0; c < m.columns; ++c) {
      FinishChannelMoments(partials.data(), program::ChunkBatchNormRows(m.rows).chunks, m.rows,
                           m.columns, c, settings, mean.data(), inv_std.data(),
                           OutputOrNull(call, 1), OutputOrNull(call, 2), OutputOrNull(call, 3),
                           OutputOrNull(call, 4));
    }
  }
  if (y != nullptr) {
    for (int64_t i = 0; i < m.rows * m.columns; ++i) {
      const size_t c = channel(i);
      y[i] = Normalize(x[i], mean[c], inv_std[c], gamma[c], beta[c]);
    }
  }
  return absl::OkStatus();
}

// batch_norm_backward as the CUDA kernels compute it.
absl::Status BatchNormBackwardAsTheKernels(const KernelCall& call) {
  const ir::MatrixExtent m = ir::AsMatrix(call.inputs[1].type->shape);
  const float* dy = call.inputs[0].as<const float>();
  const float* x = call.inputs[1].as<const float>();
  const float* gamma = call.inputs[2].as<const float>();
  const float* mean = call.inputs[3].as<const float>();
  const float* spread = call.inputs[4].as<const float>();
  const bool training = *call.node.attrs.GetBool("training", true);
  const float epsilon = static_cast<float>(*call.node.attrs.GetFloat("epsilon", 1e-5));
  std::vector<float> inv_std(static_cast<size_t>(m.columns));
  for (size_t c = 0; c < inv_std.size(); ++c) {
    inv_std[c] = training ? spread[c] : InvStd(spread[c], epsilon);
  }
  const std::vector<double> partials = PartialsAsTheKernelsAddThem(
      m.rows, m.columns,
      [&](const program::BatchNormChunking& chunking, int64_t k, int lane, int64_t c) {
        return LaneGradientSums(dy, x, mean[c], inv_std[static_cast<size_t>(c)], m.rows, m.columns,
                                chunking, k, lane, c);
      });
  std::vector<float> sum_dy(inv_std.size());
  std::vector<float> sum_dy_x_hat(inv_std.size());
  for (int64_t c = 0; c < m.columns; ++c) {
    FinishChannelGradientSums(partials.data(), program::ChunkBatchNormRows(m.rows).chunks,
                              m.columns, c, sum_dy.data(), sum_dy_x_hat.data(),
                              OutputOrNull(call, 1), OutputOrNull(call, 2));
  }
  if (float* dx = OutputOrNull(call, 0)) {
    for (int64_t i = 0; i < m.rows * m.columns; ++i) {
      const size_t c = static_cast<size_t>(i % m.columns);
      dx[i] = BatchNormInputGradient(dy[i], x[i], gamma[c], mean[c], inv_std[c], sum_dy[c],
                                     sum_dy_x_hat[c], static_cast<float>(m.rows), training);
    }
  }
  return absl::OkStatus();
}

// The cross-entropy and its gradient as the CUDA kernels compute them.
absl::Status CrossEntropyAsTheKernels(const KernelCall& call) {
  const bool backward = call.node.op == ir::OpKind::kCrossEntropyLossBackward;
  const TensorRef& logits = call.inputs[backward ? 1 : 0];
  const TensorRef& labels = call.inputs[backward ? 2 : 1];
  const CrossEntropy settings = MakeCrossEntropy(call.node.attrs, logits, labels);
  const float* x = logits.as<const float>();
  float* out = call.outputs[0].as<float>();
  if (out == nullptr) return absl::OkStatus();
  if (!backward && !settings.mean) {
    for (int64_t r = 0; r < settings.rows; ++r) {
      const int64_t label = LabelAt(labels.data, settings.labels_i32, r);
      out[r] = label == settings.ignore_index ? 0.0f : RowLoss(x, label, settings, r);
    }
    return absl::OkStatus();
  }
  const int64_t chunks = program::LossChunks(settings.rows);
  std::vector<double> sums(static_cast<size_t>(chunks));
  std::vector<int64_t> counts(static_cast<size_t>(chunks));
  for (int64_t k = 0; k < chunks; ++k) {
    LossChunkTotals(x, labels.data, settings, /*with_losses=*/!backward, k,
                    &sums[static_cast<size_t>(k)], &counts[static_cast<size_t>(k)]);
  }
  const int64_t counted =
      FinishLossTotals(sums.data(), counts.data(), chunks, backward ? nullptr : out);
  if (backward) {
    for (int64_t r = 0; r < settings.rows; ++r) {
      LossGradientRow(call.inputs[0].as<const float>(), x, labels.data, settings, counted, r, out);
    }
  }
  return absl::OkStatus();
}

// The CUDA kernels' per-element arithmetic (element_math.h), run on the
// host: a backend that computes max pooling, its gradient and reduce_sum one
// element at a time with the functions the kernels call, with the geometry
// the CUDA backend makes from the call, and leaves every other op to the
// reference kernels; batch norm and its gradient likewise, pass by pass,
// with the chunks and lanes of the kernels' sums. Needs no device.
class ElementMathBackend final : public testing::ForwardingBackend {
 public:
  std::string_view name() const override { return "cuda-element-math-on-the-host"; }

  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override {
    const TensorRef& y = call.outputs[0];
    switch (call.node.op) {
      case ir::OpKind::kMaxPool: {
        ++element_math_calls_;
        const PoolGeometry g =
            MakePoolGeometry(call.node.attrs, call.inputs[0].type->shape, y.type->shape);
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = MaxPoolAt(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kMaxPoolBackward: {
        ++element_math_calls_;
        const PoolGeometry g =
            MakePoolGeometry(call.node.attrs, y.type->shape, call.inputs[0].type->shape);
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = MaxPoolGradientAt(call.inputs[0].as<const float>(),
                                               call.inputs[1].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kAvgPool: {
        ++element_math_calls_;
        const PoolGeometry g =
            MakePoolGeometry(call.node.attrs, call.inputs[0].type->shape, y.type->shape);
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = AvgPoolAt(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kAvgPoolBackward: {
        ++element_math_calls_;
        const PoolGeometry g =
            MakePoolGeometry(call.node.attrs, y.type->shape, call.inputs[0].type->shape);
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = AvgPoolGradientAt(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kReduceSum: {
        if (y.type->dtype != ir::DType::kF32) break;  // the CUDA kernel sums f32 only
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const ReduceGeometry g, MakeReduceGeometry(call));
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = ReduceSumAt(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kGelu:
      case ir::OpKind::kSigmoid:
      case ir::OpKind::kTanh:
      case ir::OpKind::kLeakyRelu:
      case ir::OpKind::kClip: {
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const ActivationParams params, MakeActivation(call.node));
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = ActivationAt(call.inputs[0].as<const float>()[i], params);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kGeluBackward:
      case ir::OpKind::kSigmoidBackward:
      case ir::OpKind::kTanhBackward:
      case ir::OpKind::kLeakyReluBackward:
      case ir::OpKind::kClipBackward: {
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const ActivationParams params, MakeActivation(call.node));
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = ActivationGradientAt(call.inputs[0].as<const float>()[i],
                                                  call.inputs[1].as<const float>()[i], params);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kAdd:
      case ir::OpKind::kSub:
      case ir::OpKind::kMul:
      case ir::OpKind::kDiv: {
        const ir::Shape& a = call.inputs[0].type->shape;
        const ir::Shape& b = call.inputs[1].type->shape;
        // Operands of one shape take LaunchBinary, which needs no index work.
        if (y.type->dtype != ir::DType::kF32 || (a == y.type->shape && b == y.type->shape)) break;
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const StridedView a_view, MakeBroadcastView(a, y.type->shape));
        ASSIGN_OR_RETURN(const StridedView b_view, MakeBroadcastView(b, y.type->shape));
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          const float x0 = call.inputs[0].as<const float>()[StridedOffset(a_view, i)];
          const float x1 = call.inputs[1].as<const float>()[StridedOffset(b_view, i)];
          y.as<float>()[i] = call.node.op == ir::OpKind::kAdd   ? x0 + x1
                             : call.node.op == ir::OpKind::kSub ? x0 - x1
                             : call.node.op == ir::OpKind::kMul ? x0 * x1
                                                                : x0 / x1;
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kTranspose:
      case ir::OpKind::kSlice: {
        ++element_math_calls_;
        const ir::Shape& x = call.inputs[0].type->shape;
        ASSIGN_OR_RETURN(const StridedView view, call.node.op == ir::OpKind::kTranspose
                                                     ? MakeTransposeView(call.node.attrs, x)
                                                     : MakeSliceView(call.node.attrs, x));
        const auto bytes = static_cast<size_t>(ir::DTypeSize(y.type->dtype));
        const auto* in = static_cast<const std::byte*>(call.inputs[0].data);
        auto* out = static_cast<std::byte*>(y.data);
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          std::memcpy(out + static_cast<size_t>(i) * bytes,
                      in + static_cast<size_t>(StridedOffset(view, i)) * bytes, bytes);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kConcat: {
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const int64_t axis, ConcatAxis(call.node.attrs, y.type->shape));
        const auto bytes = static_cast<size_t>(ir::DTypeSize(y.type->dtype));
        auto* out = static_cast<std::byte*>(y.data);
        int64_t offset = 0;
        for (const TensorRef& x : call.inputs) {
          ASSIGN_OR_RETURN(const StridedView view,
                           MakeConcatView(axis, x.type->shape, y.type->shape, offset));
          const auto* in = static_cast<const std::byte*>(x.data);
          for (int64_t i = 0; i < x.num_elements(); ++i) {
            std::memcpy(out + static_cast<size_t>(StridedOffset(view, i)) * bytes,
                        in + static_cast<size_t>(i) * bytes, bytes);
          }
          offset += x.type->shape[static_cast<size_t>(axis)];
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kResizeBilinear:
      case ir::OpKind::kResizeNearest: {
        ++element_math_calls_;
        const ResizeGeometry g =
            MakeResizeGeometry(call.node.attrs, call.inputs[0].type->shape, y.type->shape);
        const auto at =
            call.node.op == ir::OpKind::kResizeBilinear ? ResizeBilinearAt : ResizeNearestAt;
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = at(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kResizeBilinearBackward:
      case ir::OpKind::kResizeNearestBackward: {
        ++element_math_calls_;
        const ResizeGeometry g =
            MakeResizeGeometry(call.node.attrs, y.type->shape, call.inputs[0].type->shape);
        const auto at = call.node.op == ir::OpKind::kResizeBilinearBackward
                            ? ResizeBilinearGradientAt
                            : ResizeNearestGradientAt;
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = at(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kSliceBackward: {
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const StridedView view, MakeSliceView(call.node.attrs, y.type->shape));
        std::fill_n(y.as<float>(), y.num_elements(), 0.0f);
        for (int64_t i = 0; i < call.inputs[0].num_elements(); ++i) {
          y.as<float>()[StridedOffset(view, i)] = call.inputs[0].as<const float>()[i];
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kEmbedding: {
        ++element_math_calls_;
        const TensorRef& indices = call.inputs[1];
        const ir::Shape& table = call.inputs[0].type->shape;
        const bool i32 = indices.type->dtype == ir::DType::kI32;
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          const int64_t row = EmbeddingRow(indices.data, i32, i / table[1], table[0]);
          if (row < 0) return absl::OutOfRangeError("an index outside the table");
          y.as<float>()[i] = call.inputs[0].as<const float>()[row * table[1] + i % table[1]];
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kEmbeddingBackward: {
        ++element_math_calls_;
        const TensorRef& indices = call.inputs[1];
        const ir::Shape& table = y.type->shape;
        std::fill_n(y.as<float>(), y.num_elements(), 0.0f);
        for (int64_t d = 0; d < table[1]; ++d) {
          if (!EmbeddingGradientColumn(call.inputs[0].as<const float>(), indices.data,
                                       indices.type->dtype == ir::DType::kI32,
                                       indices.num_elements(), table[0], table[1], d,
                                       y.as<float>())) {
            return absl::OutOfRangeError("an index outside the table");
          }
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kAdamUpdate: {
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const AdamSettings settings, MakeAdamSettings(call.node.attrs));
        const AdamFactors factors = MakeAdamFactors(*call.inputs[4].as<const int64_t>(), settings);
        for (int64_t i = 0; i < call.inputs[0].num_elements(); ++i) {
          AdamUpdateAt(factors, call.inputs[0].as<const float>(), call.inputs[1].as<const float>(),
                       call.inputs[2].as<const float>(), call.inputs[3].as<const float>(), i,
                       OutputOrNull(call, 0), OutputOrNull(call, 1), OutputOrNull(call, 2));
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kLayerNorm: {
        ++element_math_calls_;
        const ir::MatrixExtent m = ir::AsMatrix(call.inputs[0].type->shape);
        const auto epsilon = static_cast<float>(*call.node.attrs.GetFloat("epsilon", 1e-5));
        for (int64_t r = 0; r < m.rows; ++r) {
          LayerNormRow(call.inputs[0].as<const float>(), call.inputs[1].as<const float>(),
                       call.inputs[2].as<const float>(), m.columns, epsilon, r,
                       OutputOrNull(call, 0), OutputOrNull(call, 1), OutputOrNull(call, 2));
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kLayerNormBackward: {
        ++element_math_calls_;
        const ir::MatrixExtent m = ir::AsMatrix(call.inputs[1].type->shape);
        const float* dy = call.inputs[0].as<const float>();
        const float* x = call.inputs[1].as<const float>();
        const float* mean = call.inputs[3].as<const float>();
        const float* rstd = call.inputs[4].as<const float>();
        if (float* dx = OutputOrNull(call, 0)) {
          for (int64_t r = 0; r < m.rows; ++r) {
            LayerNormGradientRow(dy, x, call.inputs[2].as<const float>(), mean, rstd, m.columns, r,
                                 dx);
          }
        }
        for (int64_t c = 0; c < m.columns; ++c) {
          LayerNormParameterGradient(dy, x, mean, rstd, m.rows, m.columns, c, OutputOrNull(call, 1),
                                     OutputOrNull(call, 2));
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kSoftmax:
      case ir::OpKind::kLogSoftmax: {
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const SoftmaxGeometry g,
                         MakeSoftmaxGeometry(call.node, call.inputs[0].type->shape));
        for (int64_t line = 0; line < g.outer * g.inner; ++line) {
          SoftmaxLine(g, call.inputs[0].as<const float>(), y.as<float>(), line);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kSoftmaxBackward:
      case ir::OpKind::kLogSoftmaxBackward: {
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const SoftmaxGeometry g,
                         MakeSoftmaxGeometry(call.node, call.inputs[0].type->shape));
        for (int64_t line = 0; line < g.outer * g.inner; ++line) {
          SoftmaxGradientLine(g, call.inputs[0].as<const float>(), call.inputs[1].as<const float>(),
                              y.as<float>(), line);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kCrossEntropyLoss:
      case ir::OpKind::kCrossEntropyLossBackward:
        ++element_math_calls_;
        return CrossEntropyAsTheKernels(call);
      case ir::OpKind::kBatchNorm:
        ++element_math_calls_;
        return BatchNormAsTheKernels(call);
      case ir::OpKind::kBatchNormBackward:
        ++element_math_calls_;
        return BatchNormBackwardAsTheKernels(call);
      default:
        break;
    }
    return ForwardingBackend::RunKernel(stream, call);
  }

  int element_math_calls() const { return element_math_calls_; }

 private:
  int element_math_calls_ = 0;
};

// Runs every harness case that `wanted` accepts (given its op, or the whole
// case) through `HostBackend` (ElementMathBackend unless named) and expects
// the reference kernels' bits, each case through the kernels' way at least
// once; returns how many cases ran.
template <typename HostBackend = ElementMathBackend, typename Wanted>
int ExpectBitwiseOnTheHost(Wanted wanted) {
  int cases = 0;
  for (testing::OpTestCase test_case : testing::AllOpTestCases()) {
    if constexpr (std::is_invocable_v<Wanted, ir::OpKind>) {
      if (!wanted(test_case.op)) continue;
    } else {
      if (!wanted(test_case)) continue;
    }
    test_case.float_tolerance = 0;  // bit for bit
    HostBackend backend;
    const absl::Status compared = testing::CompareWithReference(backend, test_case);
    EXPECT_TRUE(compared.ok()) << test_case.name << ": " << compared;
    EXPECT_GT(backend.element_math_calls(), 0) << test_case.name;
    ++cases;
  }
  return cases;
}

// Every harness case of max and average pooling (whose gradients are
// max_pool_backward and avg_pool_backward) and of reduce_sum: the element arithmetic gives the
// reference kernels' bits, since it adds in their order. The cases include overlapping windows,
// padding and ties.
TEST(CudaElementMath, PoolingAndReductionsMatchTheReferenceBitwiseOnTheHost) {
  EXPECT_GE(ExpectBitwiseOnTheHost([](ir::OpKind op) {
              return op == ir::OpKind::kMaxPool || op == ir::OpKind::kAvgPool ||
                     op == ir::OpKind::kReduceSum;
            }),
            6);
}

// Every harness case of gelu (both forms), sigmoid, tanh, leaky_relu and
// clip, and through them their gradients: the kernels' element arithmetic
// gives the reference kernels' bits on the host (the same float functions
// and the same order of operations).
TEST(CudaElementMath, ActivationsMatchTheReferenceBitwiseOnTheHost) {
  constexpr ir::OpKind kActivations[] = {ir::OpKind::kGelu, ir::OpKind::kSigmoid, ir::OpKind::kTanh,
                                         ir::OpKind::kLeakyRelu, ir::OpKind::kClip};
  EXPECT_GE(ExpectBitwiseOnTheHost([&](ir::OpKind op) {
              return std::find(std::begin(kActivations), std::end(kActivations), op) !=
                     std::end(kActivations);
            }),
            9);
}

// Every harness case of softmax (along the last and a middle axis, causal,
// causal with more queries than keys) and log_softmax, and through them
// their gradients: a line per thread, summed in the reference's order, gives
// the reference kernels' bits on the host.
TEST(CudaElementMath, SoftmaxesMatchTheReferenceBitwiseOnTheHost) {
  EXPECT_GE(ExpectBitwiseOnTheHost([](ir::OpKind op) {
              return op == ir::OpKind::kSoftmax || op == ir::OpKind::kLogSoftmax;
            }),
            6);
}

// Every harness case of layer_norm, and through them layer_norm_backward:
// a row (or, for the parameters' gradients, a feature) per thread, summed in
// float in the reference's order, gives the reference kernels' bits.
// A larger one too: 64 rows of 129 features.
TEST(CudaElementMath, LayerNormMatchesTheReferenceBitwiseOnTheHost) {
  EXPECT_GE(ExpectBitwiseOnTheHost([](ir::OpKind op) { return op == ir::OpKind::kLayerNorm; }), 1);
  testing::OpTestCase wide = testing::Case("layer_norm/64x129", ir::OpKind::kLayerNorm,
                                           {ir::F32({4, 16, 129}), ir::F32({129}), ir::F32({129})});
  wide.check_gradient =
      false;  // compared with the reference's gradient, not checked by differences
  wide.float_tolerance = 0;
  ElementMathBackend backend;
  const absl::Status compared = testing::CompareWithReference(backend, wide);
  EXPECT_TRUE(compared.ok()) << compared;
  EXPECT_EQ(backend.element_math_calls(), 2);  // layer_norm and layer_norm_backward
}

TEST(CudaElementMath, ASoftmaxGeometryNeedsASoftmaxAndAnAxisInside) {
  ir::Node node;
  node.op = ir::OpKind::kSoftmax;
  node.attrs.Set("axis", int64_t{-2});
  absl::StatusOr<SoftmaxGeometry> g = MakeSoftmaxGeometry(node, {2, 3, 4});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->outer, 2);
  EXPECT_EQ(g->length, 3);
  EXPECT_EQ(g->inner, 4);
  EXPECT_EQ(g->causal_queries, 0);
  node.attrs.Set("axis", int64_t{3});
  g = MakeSoftmaxGeometry(node, {2, 3, 4});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), ::testing::HasSubstr("axis 3"));
  node.attrs.Set("axis", int64_t{1});
  node.attrs.Set("causal", true);
  EXPECT_FALSE(MakeSoftmaxGeometry(node, {2, 3, 4}).ok());  // causal along a middle axis
  node.op = ir::OpKind::kRelu;
  EXPECT_FALSE(MakeSoftmaxGeometry(node, {2, 3, 4}).ok());
}

// Every harness case of transpose, slice (and through it slice_backward),
// concat, embedding (and embedding_backward, repeated rows included) and of
// add, sub, mul and div with broadcasting: the strided views give the reference's
// elements, and the embedding's gradient adds rows in its order.
TEST(CudaElementMath, StridedCopiesEmbeddingsAndBroadcastingMatchTheReferenceBitwiseOnTheHost) {
  constexpr ir::OpKind kOps[] = {ir::OpKind::kTranspose, ir::OpKind::kSlice, ir::OpKind::kEmbedding,
                                 ir::OpKind::kAdd,       ir::OpKind::kSub,   ir::OpKind::kMul,
                                 ir::OpKind::kDiv};
  int cases = 0;
  for (testing::OpTestCase test_case : testing::AllOpTestCases()) {
    if (std::find(std::begin(kOps), std::end(kOps), test_case.op) == std::end(kOps)) continue;
    test_case.float_tolerance = 0;  // bit for bit
    ElementMathBackend backend;
    const absl::Status compared = testing::CompareWithReference(backend, test_case);
    EXPECT_TRUE(compared.ok()) << test_case.name << ": " << compared;
    ++cases;
  }
  EXPECT_GE(cases, 15);
}

// Every harness case of resize_bilinear (both coordinate maps, up and
// down), and through them resize_bilinear_backward: the gradient gathered
// per input element adds the reference's scattered terms in its order. And
// larger ones, where one input pixel is read by many output pixels (up by
// 3.5x) and none by some (down by 2.6x).
TEST(CudaElementMath, BilinearResizeMatchesTheReferenceBitwiseOnTheHost) {
  EXPECT_GE(ExpectBitwiseOnTheHost([](ir::OpKind op) { return op == ir::OpKind::kResizeBilinear; }),
            2);
  for (const bool align_corners : {false, true}) {
    for (const auto& [in, out] : {std::pair<int64_t, int64_t>{6, 21}, {21, 8}}) {
      testing::OpTestCase resize = testing::Case(
          fmt::format("resize_bilinear/{}_to_{}_align_corners_{}", in, out, align_corners),
          ir::OpKind::kResizeBilinear, {ir::Activation({2, in, in + 1, 3})},
          {{"size", ir::IntList{out, out + 2}}, {"align_corners", align_corners}});
      resize.check_gradient = false;
      resize.float_tolerance = 0;
      ElementMathBackend backend;
      const absl::Status compared = testing::CompareWithReference(backend, resize);
      EXPECT_TRUE(compared.ok()) << resize.name << ": " << compared;
      EXPECT_EQ(backend.element_math_calls(), 2) << resize.name;
    }
  }
}

// The Adam cases (AdamW and L2 decay): the factors in double, rounded once,
// and each element in the reference's order of operations give its bits.
TEST(CudaElementMath, AdamMatchesTheReferenceBitwiseOnTheHost) {
  EXPECT_GE(ExpectBitwiseOnTheHost([](ir::OpKind op) { return op == ir::OpKind::kAdamUpdate; }), 2);
}

// Every harness case of resize_nearest (up, uneven up and down, down to 1),
// and through them resize_nearest_backward, gathered per input element in
// dy's order.
TEST(CudaElementMath, NearestResizeMatchesTheReferenceBitwiseOnTheHost) {
  EXPECT_GE(ExpectBitwiseOnTheHost([](ir::OpKind op) { return op == ir::OpKind::kResizeNearest; }),
            3);
}

// Convolutions padded unlike on two sides of an axis, as the CUDA backend
// runs them (convolution.h): on a copy of x with the padding written out as
// zeros, x placed in it through MakePaddedWindowView (as LaunchPlace does),
// by the reference kernel asked for no padding; the input gradient computed
// into the copy, the accumulator placed in it first, and cropped out through
// the same view (as LaunchGather does). Every other call goes to the
// reference kernels as it is.
class PaddedCopyBackend final : public testing::ForwardingBackend {
 public:
  std::string_view name() const override { return "cuda-padded-copy-on-the-host"; }

  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override {
    const ir::OpKind op = call.node.op;
    const bool convolution = op == ir::OpKind::kConv2d || op == ir::OpKind::kConv2dBackwardData ||
                             op == ir::OpKind::kConv2dBackwardWeight;
    if (!convolution || PaddedCopyBytes(call) == 0) {
      return ForwardingBackend::RunKernel(stream, call);
    }
    ++padded_calls_;
    std::vector<TensorRef> inputs(call.inputs.begin(), call.inputs.end());
    std::vector<TensorRef> outputs(call.outputs.begin(), call.outputs.end());
    // Where x is: the forward's input 0, the filter gradient's input 1, the
    // input gradient's output (and its accumulator, input 2, of x's shape).
    TensorRef& x = op == ir::OpKind::kConv2d               ? inputs[0]
                   : op == ir::OpKind::kConv2dBackwardData ? outputs[0]
                                                           : inputs[1];
    const ir::IntList pads = *call.node.attrs.GetInts("pads", {});
    ASSIGN_OR_RETURN(const StridedView window, MakePaddedWindowView(x.type->shape, pads));
    ir::TensorType padded = *x.type;
    padded.shape[1] += pads[0] + pads[2];
    padded.shape[2] += pads[1] + pads[3];
    std::vector<float> copy(static_cast<size_t>(*ir::NumElements(padded.shape)), 0.0f);
    const int64_t n = x.num_elements();
    auto place = [&](const float* from) {
      for (int64_t i = 0; i < n; ++i) copy[static_cast<size_t>(StridedOffset(window, i))] = from[i];
    };
    float* const dx = op == ir::OpKind::kConv2dBackwardData ? outputs[0].as<float>() : nullptr;
    if (op != ir::OpKind::kConv2dBackwardData) {
      place(x.as<const float>());
    } else if (inputs.size() == 3) {
      place(inputs[2].as<const float>());
      inputs[2] = TensorRef{&padded, copy.data()};
    }
    x = TensorRef{&padded, copy.data()};
    ir::Node unpadded = call.node;
    unpadded.attrs.Set("pads", ir::IntList{0, 0, 0, 0});
    if (op == ir::OpKind::kConv2dBackwardData) {
      unpadded.attrs.Set("input_shape", ir::IntList(padded.shape.begin(), padded.shape.end()));
    }
    const KernelCall through_copy{unpadded,     inputs,         outputs,
                                  call.context, call.workspace, call.workspace_bytes};
    RETURN_IF_ERROR(ForwardingBackend::RunKernel(stream, through_copy));
    if (dx != nullptr) {
      for (int64_t i = 0; i < n; ++i) dx[i] = copy[static_cast<size_t>(StridedOffset(window, i))];
    }
    return absl::OkStatus();
  }

  // Calls run through a padded copy.
  int element_math_calls() const { return padded_calls_; }

 private:
  int padded_calls_ = 0;
};

// Every harness case of the three convolutions padded unlike on two sides
// (forward, input gradient with accumulator, filter gradient; strided and
// grouped) gives the reference kernels' bits through a padded copy: the
// padding's zeros add nothing, and the copy's window is where x's values are.
TEST(CudaElementMath, ConvolutionsPaddedUnevenlyMatchTheReferenceBitwiseThroughAPaddedCopy) {
  EXPECT_GE(ExpectBitwiseOnTheHost<PaddedCopyBackend>([](const testing::OpTestCase& test_case) {
              const ir::IntList pads = *test_case.attrs.GetInts("pads", {0, 0, 0, 0});
              const bool uneven = pads.size() == 4 && (pads[0] != pads[2] || pads[1] != pads[3]);
              return uneven && (test_case.op == ir::OpKind::kConv2d ||
                                test_case.op == ir::OpKind::kConv2dBackwardData ||
                                test_case.op == ir::OpKind::kConv2dBackwardWeight);
            }),
            3);
}

TEST(CudaElementMath, APaddedWindowPutsXInsideItsBorder) {
  // x [1, 2, 3, 2] with pads [top 0, left 1, bottom 2, right 0]: the copy is
  // [1, 4, 4, 2], and x[0, i, j, c] sits at copy[0, i, j + 1, c].
  const ir::IntList pads = {0, 1, 2, 0};
  absl::StatusOr<StridedView> window = MakePaddedWindowView({1, 2, 3, 2}, pads);
  ASSERT_TRUE(window.ok()) << window.status();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t c = 0; c < 2; ++c) {
        EXPECT_EQ(StridedOffset(*window, (i * 3 + j) * 2 + c), (i * 4 + j + 1) * 2 + c);
      }
    }
  }
  EXPECT_FALSE(MakePaddedWindowView({2, 3, 4}, pads).ok());
}

TEST(CudaElementMath, StridedViewsCheckTheirAttributes) {
  ir::AttrMap attrs;
  attrs.Set("perm", ir::IntList{2, 0, 1});
  absl::StatusOr<StridedView> view = MakeTransposeView(attrs, {2, 3, 4});
  ASSERT_TRUE(view.ok()) << view.status();
  // y [4, 2, 3]: y[i, j, k] = x[j, k, i], x's strides (12, 4, 1).
  EXPECT_EQ(view->rank, 3);
  EXPECT_THAT(std::vector<int64_t>(view->extent, view->extent + 3),
              ::testing::ElementsAre(4, 2, 3));
  EXPECT_THAT(std::vector<int64_t>(view->stride, view->stride + 3),
              ::testing::ElementsAre(1, 12, 4));
  EXPECT_EQ(StridedOffset(*view, 1 * 6 + 1 * 3 + 2), 1 * 12 + 2 * 4 + 1);  // y[1,1,2] = x[1,2,1]
  attrs.Set("perm", ir::IntList{0, 0, 1});
  EXPECT_FALSE(MakeTransposeView(attrs, {2, 3, 4}).ok());
  EXPECT_FALSE(MakeBroadcastView({3}, {2, 4}).ok());
  EXPECT_FALSE(MakeStridedView(std::vector<int64_t>(9, 1), std::vector<int64_t>(9, 1), 0).ok());
}

TEST(CudaElementMath, AnUnknownGeluFormIsRefused) {
  ir::Node node;
  node.op = ir::OpKind::kGelu;
  node.attrs.Set("approximate", std::string("cubic"));
  const absl::StatusOr<ActivationParams> params = MakeActivation(node);
  ASSERT_FALSE(params.ok());
  EXPECT_THAT(std::string(params.status().message()), ::testing::HasSubstr("\"cubic\""));
  node.op = ir::OpKind::kRelu;
  EXPECT_FALSE(MakeActivation(node).ok());
}

// The cross-entropy's cases (mean and none, ignored rows, i32 and i64
// labels; the gradient is cross_entropy_loss_backward), and one of 10,000
// rows, whose mean and count take 3,334 chunks of three rows.
TEST(CudaElementMath, CrossEntropyMatchesTheReferenceOnTheHost) {
  std::vector<testing::OpTestCase> losses;
  for (const testing::OpTestCase& test_case : testing::AllOpTestCases()) {
    if (test_case.op == ir::OpKind::kCrossEntropyLoss) losses.push_back(test_case);
  }
  testing::OpTestCase many_rows =
      testing::Case("cross_entropy_loss/10000_rows", ir::OpKind::kCrossEntropyLoss,
                    {ir::F32({10000, 5}), ir::I64({10000})}, {{"ignore_index", int64_t{2}}});
  many_rows.int_limit = 5;  // a fifth of the rows are ignored
  many_rows.check_gradient = false;
  many_rows.float_tolerance = 1e-4;  // the reference sums 8,000 losses in float
  losses.push_back(many_rows);
  for (const testing::OpTestCase& test_case : losses) {
    ElementMathBackend backend;
    const absl::Status compared = testing::CompareWithReference(backend, test_case);
    EXPECT_TRUE(compared.ok()) << test_case.name << ": " << compared;
    EXPECT_GT(backend.element_math_calls(), 0) << test_case.name;
  }
  EXPECT_GE(losses.size(), 3u);
}

// Batch norm's cases (training and inference; the gradient is
// batch_norm_backward): against the reference within the harness's
// tolerance (the kernels sum in double, over chunks, where the reference sums
// in float, row by row), and the determinism checks, which also run a
// recomputation from the saved statistics and dx written over dy and over x.
TEST(CudaElementMath, BatchNormMatchesTheReferenceOnTheHost) {
  std::vector<testing::OpTestCase> batch_norms;
  for (const testing::OpTestCase& test_case : testing::AllOpTestCases()) {
    if (test_case.op == ir::OpKind::kBatchNorm) batch_norms.push_back(test_case);
  }
  // The harness's cases fit one chunk of rows; these take 2 and 3 (1,156 rows
  // in chunks of 386, the last shorter), and channels past one block's 32.
  for (const ir::Shape& shape : {ir::Shape{4, 16, 16, 8}, ir::Shape{4, 17, 17, 40}}) {
    testing::OpTestCase chunked = testing::Case(
        fmt::format("batch_norm/chunked_{}", ir::ShapeToString(shape)), ir::OpKind::kBatchNorm,
        {ir::Activation(shape), ir::F32({shape[3]}), ir::F32({shape[3]}), ir::F32({shape[3]}),
         ir::F32({shape[3]})},
        {{"training", true}, {"momentum", 0.2}});
    chunked.no_gradient = {3, 4};
    chunked.check_gradient = false;
    // The reference sums a thousand rows in float, one after another: its
    // dgamma is itself about 1e-5 off (the kernels sum in double).
    chunked.float_tolerance = 1e-4;
    batch_norms.push_back(chunked);
  }
  int cases = 0;
  for (const testing::OpTestCase& test_case : batch_norms) {
    ElementMathBackend backend;
    const absl::Status compared = testing::CompareWithReference(backend, test_case);
    EXPECT_TRUE(compared.ok()) << test_case.name << ": " << compared;
    const absl::Status deterministic = testing::CheckDeterministic(backend, test_case);
    EXPECT_TRUE(deterministic.ok()) << test_case.name << ": " << deterministic;
    EXPECT_GT(backend.element_math_calls(), 0) << test_case.name;
    ++cases;
  }
  EXPECT_GE(cases, 4);
}

}  // namespace
}  // namespace spillway::backends::cuda
