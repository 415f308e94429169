// Compiled once per instruction set (SPILLWAY_DIRECT_KERNELS_ISA names the
// namespace; see CMakeLists.txt), and direct_kernels_dispatch.cc picks the
// widest the processor runs. Floating-point contraction is off in every
// build, so each instruction set gives the same bits.
#include "backends/cpu/direct_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/kernel.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/types.h"
#include "support/check.h"

#ifndef SPILLWAY_DIRECT_KERNELS_ISA
#error "compile with SPILLWAY_DIRECT_KERNELS_ISA set to the instruction set's namespace"
#endif

namespace spillway::backends::cpu::SPILLWAY_DIRECT_KERNELS_ISA {
namespace {

// Rows of a [rows, C] view summed into one partial result: the unit of
// parallel work of every per-channel reduction, fixed so that the order of
// additions does not depend on the thread count.
constexpr int64_t kRowsPerBlock = 256;
// Elements per unit of parallel work of the elementwise loops.
constexpr int64_t kElementsPerBlock = 1 << 14;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T>
T Attr(const absl::StatusOr<T>& value) {
  SPILLWAY_CHECK(value.ok(), "attributes were validated");
  return *value;
}

// Calls body(begin, end) over [0, count) in blocks of `block`, on `threads`.
template <typename Body>
void ParallelBlocks(int64_t count, int64_t block, int threads, const Body& body) {
  const int64_t blocks = CeilDiv(count, block);
#pragma omp parallel for schedule(static) num_threads(threads) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) body(b * block, std::min(count, (b + 1) * block));
}

// Per-channel sums over the rows of a [rows, channels] view, in double (each
// term is formed in float, then added in double):
// accumulate(begin, end, sums) adds the terms of rows [begin, end) into
// sums[term * channels + c]. Blocks of rows are summed separately and then
// in block order.
template <typename Accumulate>
std::vector<double> ChannelSums(int64_t rows, int64_t channels, int terms, int threads,
                                const Accumulate& accumulate) {
  const int64_t width = terms * channels;
  const int64_t blocks = CeilDiv(rows, kRowsPerBlock);
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
#pragma omp parallel for schedule(static) num_threads(threads) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    accumulate(b * kRowsPerBlock, std::min(rows, (b + 1) * kRowsPerBlock),
               partial.data() + b * width);
  }
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const double* block = partial.data() + b * width;
    for (int64_t i = 0; i < width; ++i) total[static_cast<size_t>(i)] += block[i];
  }
  return total;
}

// ---- batch norm ----

// The one normalization every batch-norm forward goes through, training,
// recomputation and inference alike: y = (x - mean) * (inv_std * gamma) + beta
// from float statistics. A recomputation from the saved statistics therefore
// reproduces the first run's bits.
void Normalize(const float* x, int64_t rows, int64_t channels, const float* gamma,
               const float* beta, const float* mean, const float* inv_std, float* y, int threads) {
  std::vector<float> scale(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) scale[static_cast<size_t>(c)] = inv_std[c] * gamma[c];
  const float* s = scale.data();
  ParallelBlocks(rows, kRowsPerBlock, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * channels;
      float* yr = y + r * channels;
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) yr[c] = (xr[c] - mean[c]) * s[c] + beta[c];
    }
  });
}

// batch_norm: x, gamma, beta, running_mean, running_var (+ saved_mean,
// saved_inv_std when recomputing). Training computes the biased variance
// with a per-channel shift (the first row) against cancellation, saves
// mean and 1/sqrt(var + eps) as floats and updates the running statistics
// with the unbiased variance.
bool BatchNorm(const KernelCall& call, int threads) {
  const TensorRef& x = call.inputs[0];
  const int64_t channels = x.type->shape.back();
  const int64_t rows = x.num_elements() / channels;
  const ir::AttrMap& attrs = call.node.attrs;
  const bool training = Attr(attrs.GetBool("training", true));
  const double epsilon = Attr(attrs.GetFloat("epsilon", 1e-5));
  const float* gamma = call.inputs[1].as<float>();
  const float* beta = call.inputs[2].as<float>();
  const float* xs = x.as<float>();
  const auto size = static_cast<size_t>(channels);
  std::vector<float> mean(size);
  std::vector<float> inv_std(size);

  if (!training) {
    const float* running_mean = call.inputs[3].as<float>();
    const float* running_var = call.inputs[4].as<float>();
    for (size_t c = 0; c < size; ++c) {
      mean[c] = running_mean[c];
      inv_std[c] =
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + epsilon));
    }
  } else if (const std::optional<SavedStatistics> saved = SavedStatisticsOf(call)) {
    std::copy_n(saved->mean->as<float>(), size, mean.begin());  // recomputed from them
    std::copy_n(saved->inv_std->as<float>(), size, inv_std.begin());
  } else {
    const double momentum = Attr(attrs.GetFloat("momentum", 0.1));
    const float* shift = xs;  // the first row
    const std::vector<double> sums =
        ChannelSums(rows, channels, 2, threads, [&](int64_t begin, int64_t end, double* acc) {
          double* sum = acc;
          double* squares = acc + channels;
          for (int64_t r = begin; r < end; ++r) {
            const float* xr = xs + r * channels;
#pragma omp simd
            for (int64_t c = 0; c < channels; ++c) {
              const float d = xr[c] - shift[c];
              sum[c] += static_cast<double>(d);
              squares[c] += static_cast<double>(d * d);
            }
          }
        });
    const auto count = static_cast<double>(rows);
    float* saved_mean = call.outputs[1].as<float>();
    float* saved_inv_std = call.outputs[2].as<float>();
    float* running_mean = call.outputs[3].as<float>();
    float* running_var = call.outputs[4].as<float>();
    for (size_t c = 0; c < size; ++c) {
      const double shifted_mean = sums[c] / count;
      const double variance = std::max(0.0, sums[size + c] / count - shifted_mean * shifted_mean);
      const double channel_mean = static_cast<double>(shift[c]) + shifted_mean;
      mean[c] = static_cast<float>(channel_mean);
      inv_std[c] = static_cast<float>(1.0 / std::sqrt(variance + epsilon));
      if (saved_mean != nullptr) saved_mean[c] = mean[c];
      if (saved_inv_std != nullptr) saved_inv_std[c] = inv_std[c];
      const double unbiased = rows > 1 ? variance * count / (count - 1.0) : variance;
      if (running_mean != nullptr) {
        running_mean[c] = static_cast<float>((1.0 - momentum) * call.inputs[3].as<float>()[c] +
                                             momentum * channel_mean);
      }
      if (running_var != nullptr) {
        running_var[c] = static_cast<float>((1.0 - momentum) * call.inputs[4].as<float>()[c] +
                                            momentum * unbiased);
      }
    }
  }
  if (call.outputs[0].data != nullptr) {
    Normalize(xs, rows, channels, gamma, beta, mean.data(), inv_std.data(),
              call.outputs[0].as<float>(), threads);
  }
  return true;
}

// batch_norm_backward: dy, x, gamma, mean, inv_std (training) or running
// variance (inference) -> dx, dgamma, dbeta. With x^ = (x - mean) * inv_std:
// dbeta = sum dy, dgamma = sum dy x^, and in training
// dx = gamma inv_std (dy - dbeta/M - x^ dgamma/M), computed per element as
// a dy + b (x - mean) + k with per-channel a, b, k.
bool BatchNormBackward(const KernelCall& call, int threads) {
  const TensorRef& x = call.inputs[1];
  const int64_t channels = x.type->shape.back();
  const int64_t rows = x.num_elements() / channels;
  const bool training = Attr(call.node.attrs.GetBool("training", true));
  const double epsilon = Attr(call.node.attrs.GetFloat("epsilon", 1e-5));
  const float* dy = call.inputs[0].as<float>();
  const float* xs = x.as<float>();
  const float* gamma = call.inputs[2].as<float>();
  const float* mean = call.inputs[3].as<float>();
  const float* statistic = call.inputs[4].as<float>();
  const auto size = static_cast<size_t>(channels);
  std::vector<double> inv_std(size);
  for (size_t c = 0; c < size; ++c) {
    inv_std[c] = training ? static_cast<double>(statistic[c])
                          : 1.0 / std::sqrt(static_cast<double>(statistic[c]) + epsilon);
  }
  const std::vector<double> sums =
      ChannelSums(rows, channels, 2, threads, [&](int64_t begin, int64_t end, double* acc) {
        double* sum_dy = acc;
        double* sum_dy_centered = acc + channels;
        for (int64_t r = begin; r < end; ++r) {
          const float* dyr = dy + r * channels;
          const float* xr = xs + r * channels;
#pragma omp simd
          for (int64_t c = 0; c < channels; ++c) {
            sum_dy[c] += static_cast<double>(dyr[c]);
            sum_dy_centered[c] += static_cast<double>(dyr[c] * (xr[c] - mean[c]));
          }
        }
      });
  float* dgamma = call.outputs[1].as<float>();
  float* dbeta = call.outputs[2].as<float>();
  const auto count = static_cast<double>(rows);
  std::vector<float> a(size);
  std::vector<float> b(size);
  std::vector<float> k(size);
  for (size_t c = 0; c < size; ++c) {
    if (dbeta != nullptr) dbeta[c] = static_cast<float>(sums[c]);
    if (dgamma != nullptr) dgamma[c] = static_cast<float>(sums[size + c] * inv_std[c]);
    const double g = static_cast<double>(gamma[c]) * inv_std[c];
    a[c] = static_cast<float>(g);
    b[c] =
        training ? static_cast<float>(-g * inv_std[c] * inv_std[c] * sums[size + c] / count) : 0.0f;
    k[c] = training ? static_cast<float>(-g * sums[c] / count) : 0.0f;
  }
  float* dx = call.outputs[0].as<float>();
  if (dx == nullptr) return true;
  const float* pa = a.data();
  const float* pb = b.data();
  const float* pk = k.data();
  ParallelBlocks(rows, kRowsPerBlock, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* dyr = dy + r * channels;
      const float* xr = xs + r * channels;
      float* dxr = dx + r * channels;
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) {
        dxr[c] = pa[c] * dyr[c] + pb[c] * (xr[c] - mean[c]) + pk[c];
      }
    }
  });
  return true;
}

// ---- pooling ----

// max_pool_backward (dy, x) -> dx: each output's gradient goes to the first
// position of its window (in row-major window order) where x equals the
// window's maximum, as the reference kernel does. A first pass over the
// window finds the maximum (exactly the forward's y; the two zeros compare
// equal, so either sign finds the same position), a second routes dy. Batch
// images run in parallel; within one, overlapping windows accumulate in a
// fixed order.
bool MaxPoolBackward(const KernelCall& call, int threads) {
  const ir::AttrMap& attrs = call.node.attrs;
  const ir::IntList kernel = Attr(attrs.GetInts("kernel"));
  const ir::IntList strides = Attr(attrs.GetInts("strides", kernel));
  const ir::IntList pads = Attr(attrs.GetInts("pads", {0, 0, 0, 0}));
  const ir::Shape& in = call.inputs[1].type->shape;
  const ir::Shape& out = call.inputs[0].type->shape;
  const int64_t height = in[1], width = in[2], channels = in[3];
  const int64_t out_height = out[1], out_width = out[2];
  const float* dy = call.inputs[0].as<float>();
  const float* x = call.inputs[1].as<float>();
  float* dx = call.outputs[0].as<float>();
  if (dx == nullptr) return true;
  const int64_t image = height * width * channels;
  const int64_t out_image = out_height * out_width * channels;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < in[0]; ++n) {
    std::fill_n(dx + n * image, image, 0.0f);
    // The channels' window maxima, and 1 where a channel's maximum has been
    // found (float, like the data, so that the loops vectorize).
    std::vector<float> maxima(static_cast<size_t>(channels));
    std::vector<float> found(static_cast<size_t>(channels));
    // Calls visit(x, dx) at each position of the window, in row-major order.
    auto for_each_in_window = [&](int64_t oh, int64_t ow, auto&& visit) {
      for (int64_t kh = 0; kh < kernel[0]; ++kh) {
        const int64_t h = oh * strides[0] - pads[0] + kh;
        if (h < 0 || h >= height) continue;
        for (int64_t kw = 0; kw < kernel[1]; ++kw) {
          const int64_t w = ow * strides[1] - pads[1] + kw;
          if (w < 0 || w >= width) continue;
          const int64_t at = n * image + (h * width + w) * channels;
          visit(x + at, dx + at);
        }
      }
    };
    for (int64_t oh = 0; oh < out_height; ++oh) {
      for (int64_t ow = 0; ow < out_width; ++ow) {
        const float* dyp = dy + n * out_image + (oh * out_width + ow) * channels;
        float* m = maxima.data();
        float* f = found.data();
        std::fill(maxima.begin(), maxima.end(), -std::numeric_limits<float>::infinity());
        std::fill(found.begin(), found.end(), 0.0f);
        for_each_in_window(oh, ow, [&](const float* xp, float* /*dxp*/) {
#pragma omp simd
          for (int64_t c = 0; c < channels; ++c) m[c] = xp[c] > m[c] ? xp[c] : m[c];
        });
        for_each_in_window(oh, ow, [&](const float* xp, float* dxp) {
#pragma omp simd
          for (int64_t c = 0; c < channels; ++c) {
            const bool hit = f[c] == 0.0f && xp[c] == m[c];
            dxp[c] += hit ? dyp[c] : 0.0f;
            f[c] = hit ? 1.0f : f[c];
          }
        });
      }
    }
  }
  return true;
}

// global_avg_pool: x [N,H,W,C] -> y [N,1,1,C], the mean over H and W.
bool GlobalAvgPool(const KernelCall& call, int threads) {
  const ir::Shape& shape = call.inputs[0].type->shape;
  const int64_t pixels = shape[1] * shape[2], channels = shape[3];
  const float* x = call.inputs[0].as<float>();
  float* y = call.outputs[0].as<float>();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < shape[0]; ++n) {
    std::vector<double> sum(static_cast<size_t>(channels), 0.0);
    double* s = sum.data();
    for (int64_t p = 0; p < pixels; ++p) {
      const float* xp = x + (n * pixels + p) * channels;
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) s[c] += static_cast<double>(xp[c]);
    }
    for (int64_t c = 0; c < channels; ++c) {
      y[n * channels + c] = static_cast<float>(s[c] / static_cast<double>(pixels));
    }
  }
  return true;
}

// global_avg_pool_backward: dy [N,1,1,C] -> dx [N,H,W,C] = dy / (H*W).
bool GlobalAvgPoolBackward(const KernelCall& call, int threads) {
  const ir::Shape& shape = call.outputs[0].type->shape;
  const int64_t pixels = shape[1] * shape[2], channels = shape[3];
  const float* dy = call.inputs[0].as<float>();
  float* dx = call.outputs[0].as<float>();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < shape[0]; ++n) {
    std::vector<float> share(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      share[static_cast<size_t>(c)] = dy[n * channels + c] / static_cast<float>(pixels);
    }
    for (int64_t p = 0; p < pixels; ++p) {
      std::copy(share.begin(), share.end(), dx + (n * pixels + p) * channels);
    }
  }
  return true;
}

// ---- elementwise and reductions ----

// add of two tensors of the output's shape (residual connections; other
// broadcasts are not taken, DirectKernelTakes).
bool Add(const KernelCall& call, int threads) {
  const TensorRef& y = call.outputs[0];
  const float* a = call.inputs[0].as<float>();
  const float* b = call.inputs[1].as<float>();
  float* out = y.as<float>();
  ParallelBlocks(y.num_elements(), kElementsPerBlock, threads, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
  return true;
}

// add_n: the inputs summed left to right, block by block (the output may be
// one of the inputs' buffers).
bool AddN(const KernelCall& call, int threads) {
  const TensorRef& y = call.outputs[0];
  float* out = y.as<float>();
  ParallelBlocks(y.num_elements(), kElementsPerBlock, threads, [&](int64_t begin, int64_t end) {
    std::vector<float> sum(call.inputs[0].as<float>() + begin, call.inputs[0].as<float>() + end);
    float* s = sum.data() - begin;
    for (size_t k = 1; k < call.inputs.size(); ++k) {
      const float* in = call.inputs[k].as<float>();
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) s[i] += in[i];
    }
    std::copy(sum.begin(), sum.end(), out + begin);
  });
  return true;
}

// reduce_sum over every axis but the last (bias gradients of NHWC
// activations; other reductions are not taken, DirectKernelTakes).
bool ReduceSum(const KernelCall& call, int threads) {
  const TensorRef& x = call.inputs[0];
  const int64_t channels = x.type->shape.back();
  const float* xs = x.as<float>();
  const std::vector<double> sums = ChannelSums(x.num_elements() / channels, channels, 1, threads,
                                               [&](int64_t begin, int64_t end, double* sum) {
                                                 for (int64_t r = begin; r < end; ++r) {
                                                   const float* xr = xs + r * channels;
#pragma omp simd
                                                   for (int64_t c = 0; c < channels; ++c)
                                                     sum[c] += static_cast<double>(xr[c]);
                                                 }
                                               });
  float* y = call.outputs[0].as<float>();
  for (int64_t c = 0; c < channels; ++c) y[c] = static_cast<float>(sums[static_cast<size_t>(c)]);
  return true;
}

// sgd_update (param, grad[, momentum_buf]), as PyTorch's SGD without
// dampening: g = grad + weight_decay * param; buf = momentum * buf + g;
// g = nesterov ? g + momentum * buf : buf; param -= lr * g.
bool SgdUpdate(const KernelCall& call, int threads) {
  const ir::AttrMap& attrs = call.node.attrs;
  const auto lr = static_cast<float>(Attr(attrs.GetFloat("lr")));
  const auto momentum = static_cast<float>(Attr(attrs.GetFloat("momentum", 0.0)));
  const auto weight_decay = static_cast<float>(Attr(attrs.GetFloat("weight_decay", 0.0)));
  const bool nesterov = Attr(attrs.GetBool("nesterov", false));
  const float* param = call.inputs[0].as<float>();
  const float* grad = call.inputs[1].as<float>();
  const bool has_buffer = call.inputs.size() == 3;
  const float* buffer = has_buffer ? call.inputs[2].as<float>() : nullptr;
  float* param_out = call.outputs[0].as<float>();
  float* buffer_out = has_buffer ? call.outputs[1].as<float>() : nullptr;
  const int64_t count = call.inputs[0].num_elements();
  if (has_buffer && buffer_out != nullptr && param_out != nullptr) {
    // The usual case, without the branches that keep the general loop below
    // from vectorizing; the same arithmetic.
    ParallelBlocks(count, kElementsPerBlock, threads, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float g = grad[i] + weight_decay * param[i];
        const float b = momentum * buffer[i] + g;
        buffer_out[i] = b;
        param_out[i] = param[i] - lr * (nesterov ? g + momentum * b : b);
      }
    });
    return true;
  }
  ParallelBlocks(count, kElementsPerBlock, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float g = grad[i] + weight_decay * param[i];
      if (has_buffer) {
        const float b = momentum * buffer[i] + g;
        if (buffer_out != nullptr) buffer_out[i] = b;
        g = nesterov ? g + momentum * b : b;
      }
      if (param_out != nullptr) param_out[i] = param[i] - lr * g;
    }
  });
  return true;
}

}  // namespace

absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads) {
  if (!DirectKernelTakes(call)) return false;
  switch (call.node.op) {
    case ir::OpKind::kBatchNorm:
      return BatchNorm(call, threads);
    case ir::OpKind::kBatchNormBackward:
      return BatchNormBackward(call, threads);
    case ir::OpKind::kMaxPoolBackward:
      return MaxPoolBackward(call, threads);
    case ir::OpKind::kGlobalAvgPool:
      return GlobalAvgPool(call, threads);
    case ir::OpKind::kGlobalAvgPoolBackward:
      return GlobalAvgPoolBackward(call, threads);
    case ir::OpKind::kAdd:
      return Add(call, threads);
    case ir::OpKind::kAddN:
      return AddN(call, threads);
    case ir::OpKind::kReduceSum:
      return ReduceSum(call, threads);
    case ir::OpKind::kSgdUpdate:
      return SgdUpdate(call, threads);
    default:
      return false;
  }
}

}  // namespace spillway::backends::cpu::SPILLWAY_DIRECT_KERNELS_ISA
