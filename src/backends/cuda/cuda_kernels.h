// Launchers of the CUDA backend's own kernels (the ops cuDNN and cuBLAS do
// not run for it), enqueued on a stream. Each returns the launch's error; an
// execution error shows at the stream's next synchronization.
//
// Every kernel is deterministic: a sum runs in a fixed order that depends on
// the shapes alone (never on the device's size or on timing), so the same
// inputs give bitwise the same outputs on every run, which is what makes a
// recomputed tensor bitwise the first one and every policy train like
// `none`. Outputs may alias inputs where backends/kernel.h allows it: each
// element's inputs are read, by the thread that writes it, before it is
// written. Tensors are f32 and dense; activations are NHWC.
//
// Plain C++17 and the CUDA runtime only (what CMake's nvcc support builds),
// so that the kernels do not depend on the project's C++20 libraries.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace spillway::backends::cuda {

// ---- Element-wise maps (cuda_kernels.cu) ----

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

// y = x < 0 ? 0 : x, so that NaN passes through (as the reference kernel).
cudaError_t LaunchRelu(const float* x, float* y, int64_t n, cudaStream_t stream);
// dx = y > 0 ? dy : 0, with y relu's output.
cudaError_t LaunchReluBackward(const float* dy, const float* y, float* dx, int64_t n,
                               cudaStream_t stream);
// The other element-wise activations, one kernel for each direction;
// element_math.h computes them as the reference kernels do
// (backends/reference/elementwise.cc).
enum class Activation {
  kGelu,       // x·Φ(x), with erf
  kGeluTanh,   // gelu's tanh form (approximate = "tanh")
  kSigmoid,    // 1 / (1 + exp(-x))
  kTanh,       // tanh(x)
  kLeakyRelu,  // x > 0 ? x : alpha·x
  kClip,       // min(max(x, min), max)
};
struct ActivationParams {
  Activation kind = Activation::kGelu;
  float alpha = 0.01f;  // leaky_relu's slope below zero
  float min = 0.0f;     // clip's bounds
  float max = 0.0f;
};
// y = f(x).
cudaError_t LaunchActivation(const ActivationParams& params, const float* x, float* y, int64_t n,
                             cudaStream_t stream);
// dx = dy·f'(x) from the forward tensor the gradient op reads: the input of
// gelu and leaky_relu, the output of sigmoid, tanh and clip.
cudaError_t LaunchActivationGradient(const ActivationParams& params, const float* dy,
                                     const float* saved, float* dx, int64_t n, cudaStream_t stream);
// c = a op b, element by element (same shapes; LaunchBroadcastBinary
// broadcasts).
cudaError_t LaunchBinary(BinaryOp op, const float* a, const float* b, float* c, int64_t n,
                         cudaStream_t stream);

// ---- Strided copies and broadcasting ----
//
// Element i of a dense row-major tensor of shape `extent` read from another
// tensor at base + sum_d index_d(i) * stride_d: a transpose's input in its
// output's order, a slice's window, an operand broadcast to its output's
// shape (stride 0 along the axes it stretches).
inline constexpr int kMaxStridedRank = 8;
struct StridedView {
  int rank = 0;
  int64_t extent[kMaxStridedRank] = {};
  int64_t stride[kMaxStridedRank] = {};
  int64_t base = 0;
};
// y[i] = x[view(i)] for the n elements of y, elements of 1, 4 or 8 bytes
// (transpose and slice of any dtype).
cudaError_t LaunchGather(const void* x, void* y, int element_bytes, const StridedView& view,
                         int64_t n, cudaStream_t stream);
// y[view(i)] = x[i] for the n elements of x, elements of 1, 4 or 8 bytes,
// leaving the rest of y as it is: a concatenation's inputs placed in its
// output, a slice's gradient in zeroed dx. The view's offsets are distinct,
// so no two threads write one element.
cudaError_t LaunchPlace(const void* x, void* y, int element_bytes, const StridedView& view,
                        int64_t n, cudaStream_t stream);
// c[i] = a[a_view(i)] op b[b_view(i)]: add, sub, mul or div with numpy's
// broadcasting. c may be a's or b's buffer only where that operand has c's
// shape (its view is then the identity).
cudaError_t LaunchBroadcastBinary(BinaryOp op, const float* a, const StridedView& a_view,
                                  const float* b, const StridedView& b_view, float* c, int64_t n,
                                  cudaStream_t stream);
// An embedding: y[i, :] = table[indices[i], :] for `count` indices (i32 or
// i64) into a table of `rows` rows of `width`. Its gradient: dtable = 0, then
// dy's rows added into it in index order, one thread per feature column, so
// that repeated indices sum in the reference kernel's order. An index
// outside the table stops the kernel (__trap): the step fails at its next
// synchronization.
cudaError_t LaunchEmbedding(const float* table, const void* indices, bool indices_i32,
                            int64_t count, int64_t rows, int64_t width, float* y,
                            cudaStream_t stream);
cudaError_t LaunchEmbeddingBackward(const float* dy, const void* indices, bool indices_i32,
                                    int64_t count, int64_t rows, int64_t width, float* dtable,
                                    cudaStream_t stream);

// Dropout and its backward op (the same map of x or dy): y = x * (1 / (1 -
// p)) where backends/dropout_mask.h's mask of (seed, step) keeps element i,
// else 0: the CPU's mask, so a recomputation and the backward op replay it.
cudaError_t LaunchDropout(const float* x, float* y, int64_t n, uint64_t seed, uint64_t step,
                          double p, cudaStream_t stream);

// Up to kMaxAddNInputs input pointers, passed by value to the kernel.
inline constexpr int kMaxAddNInputs = 16;
struct AddNInputs {
  const float* items[kMaxAddNInputs] = {};
  int count = 0;
};
// y = the sum of the inputs, element by element, accumulated in double in
// input order (as the reference kernel).
cudaError_t LaunchAddN(const AddNInputs& inputs, float* y, int64_t n, cudaStream_t stream);

// Every element of y = value, for y of 1, 4 or 8 bytes per element (bool,
// f32 or i32, i64): `bits` holds the value's bytes in y's element type.
cudaError_t LaunchFill(void* y, int element_bytes, uint64_t bits, int64_t n, cudaStream_t stream);

// y[i] += bias[i % channels]: the bias of a convolution or linear layer.
cudaError_t LaunchAddBias(float* y, const float* bias, int64_t n, int64_t channels,
                          cudaStream_t stream);

// The sum of x over some axes. x's axes are split into kept ones (y's, in
// order) and reduced ones; each element of y is one thread's sum, in double,
// over the reduced axes in row-major order, which is the order the reference
// kernel adds them in.
inline constexpr int kMaxReduceRank = 8;
struct ReduceGeometry {
  int kept_rank = 0;
  int64_t kept_extent[kMaxReduceRank] = {};
  int64_t kept_stride[kMaxReduceRank] = {};  // x's stride along each kept axis
  int reduced_rank = 0;
  int64_t reduced_extent[kMaxReduceRank] = {};
  int64_t reduced_stride[kMaxReduceRank] = {};  // x's stride along each reduced axis
};
cudaError_t LaunchReduceSum(const float* x, float* y, const ReduceGeometry& geometry,
                            int64_t y_elements, cudaStream_t stream);

// The SGD update of backends/reference/optimizer.cc, element by element:
// g = grad (+ weight_decay * param); with momentum, buf = momentum * buf + g
// and g = buf (nesterov: g + momentum * buf); param -= lr * g. A null output
// is not written; outputs alias their inputs (in place).
struct SgdSettings {
  float lr = 0;
  float momentum = 0;
  float weight_decay = 0;
  bool has_buffer = false;
  bool has_decay = false;
  bool nesterov = false;
};
cudaError_t LaunchSgdUpdate(const float* param, const float* grad, const float* buffer,
                            float* param_out, float* buffer_out, int64_t n,
                            const SgdSettings& settings, cudaStream_t stream);

// ---- Softmax and log_softmax along one axis (softmax.cu) ----
//
// x is seen as [outer, length, inner] around the axis: line (o, k) is the
// `length` elements at (o * length + i) * inner + k. One thread computes a
// whole line in index order, as the reference kernel does
// (backends/reference/softmax_loss.cc): its maximum, then the sum of
// exp(x - max) in float, then each output; the backward ops likewise, with
// the line's sum of dy * y (softmax) or of dy (log_softmax) first. Every
// input of a line is read before the line is written, so an output may alias
// its input.
enum class SoftmaxKind { kSoftmax, kLogSoftmax };
struct SoftmaxGeometry {
  SoftmaxKind kind = SoftmaxKind::kSoftmax;
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;
  // A causal softmax's queries (the axis is the last of [..., queries,
  // keys]): line o's query o % queries sees the keys j <= query + (length -
  // queries), the others are 0. 0: not causal.
  int64_t causal_queries = 0;
};
cudaError_t LaunchSoftmax(const SoftmaxGeometry& geometry, const float* x, float* y,
                          cudaStream_t stream);
// dx from dy and the forward output y: y * (dy - sum(dy * y)) for softmax,
// dy - exp(y) * sum(dy) for log_softmax.
cudaError_t LaunchSoftmaxBackward(const SoftmaxGeometry& geometry, const float* dy, const float* y,
                                  float* dx, cudaStream_t stream);

// The Adam update of backends/reference/optimizer.cc, element by element:
// with g = grad (+ weight_decay * param unless decoupled), m and v move
// toward g and g^2, and param steps by lr / (1 - beta1^t) * m / (sqrt(v) /
// sqrt(1 - beta2^t) + epsilon) (decoupled: param first shrinks by 1 - lr *
// weight_decay). The step t is the i64 counter on the device; each block's
// first thread computes the scalar factors from it in double, as the
// reference does on the host, and a counter below 1 stops the kernel. A null
// output is not written; outputs alias their inputs (in place).
struct AdamSettings {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0;
  bool decoupled = true;
};
cudaError_t LaunchAdamUpdate(const float* param, const float* grad, const float* m, const float* v,
                             const int64_t* step, float* param_out, float* m_out, float* v_out,
                             int64_t n, const AdamSettings& settings, cudaStream_t stream);

// ---- Batch norm (normalization.cu) ----
//
// x is seen as a matrix [rows, channels] (N, H and W by C). Per-channel sums
// run in double over fixed chunks of rows (their size depends on `rows`
// alone), each chunk's partial sums are added in chunk order, so statistics
// and parameter gradients are deterministic. Every normalized value comes
// from one expression, (x - mean) * inv_std * gamma + beta, in one kernel,
// whether the statistics were just computed, saved by an earlier run (a
// recomputation) or are the running ones (inference), so a recomputation
// gives bitwise the first run's output.

struct BatchNormTraining {
  float epsilon = 1e-5f;
  float momentum = 0.1f;  // weight of the batch in the running averages
};
// Training forward: the batch's mean and biased variance per channel, then
// inv_std = 1 / sqrt(variance + epsilon), y normalized with them. Writes
// saved_mean, saved_inv_std (nullable), and the running statistics in place
// (nullable): running = (1 - momentum) * running + momentum * batch, the
// variance unbiased (rows / (rows - 1)) as PyTorch does.
cudaError_t LaunchBatchNormTraining(const float* x, const float* gamma, const float* beta,
                                    int64_t rows, int64_t channels,
                                    const BatchNormTraining& settings, float* y, float* saved_mean,
                                    float* saved_inv_std, float* running_mean, float* running_var,
                                    void* scratch, cudaStream_t stream);
// y from given statistics: a recomputation from the saved ones.
cudaError_t LaunchBatchNormNormalize(const float* x, const float* gamma, const float* beta,
                                     const float* mean, const float* inv_std, int64_t rows,
                                     int64_t channels, float* y, cudaStream_t stream);
// Inference forward: y from the running statistics, inv_std computed as in
// training.
cudaError_t LaunchBatchNormInference(const float* x, const float* gamma, const float* beta,
                                     const float* running_mean, const float* running_var,
                                     int64_t rows, int64_t channels, float epsilon, float* y,
                                     void* scratch, cudaStream_t stream);
// Backward: dbeta = sum(dy), dgamma = sum(dy * x_hat) per channel, and
// dx = gamma * inv_std * (dy - dbeta / rows - x_hat * dgamma / rows) in
// training, gamma * inv_std * dy in inference (where `spread` is the running
// variance, else the saved inv_std). dx may alias dy; null outputs are not
// written.
cudaError_t LaunchBatchNormBackward(const float* dy, const float* x, const float* gamma,
                                    const float* mean, const float* spread, int64_t rows,
                                    int64_t channels, bool training, float epsilon, float* dx,
                                    float* dgamma, float* dbeta, void* scratch,
                                    cudaStream_t stream);

// ---- Layer norm (normalization.cu) ----
//
// x is seen as [rows, features] and normalized per row: y = (x - mean) *
// rstd * gamma + beta with the row's mean and rstd = 1 / sqrt(variance +
// epsilon), the biased variance. One thread per row sums the row in float in
// index order (the reference kernel's order), so a recomputation gives
// bitwise the first run's output. Null outputs are not written.
cudaError_t LaunchLayerNorm(const float* x, const float* gamma, const float* beta, int64_t rows,
                            int64_t features, float epsilon, float* y, float* mean, float* rstd,
                            cudaStream_t stream);
// dx per row (one thread each), then dgamma = sum(dy * x_hat) and dbeta =
// sum(dy) per feature (one thread each, over the rows in order). No output
// may alias an input. Null outputs are not written.
cudaError_t LaunchLayerNormBackward(const float* dy, const float* x, const float* gamma,
                                    const float* mean, const float* rstd, int64_t rows,
                                    int64_t features, float* dx, float* dgamma, float* dbeta,
                                    cudaStream_t stream);

// ---- Resizing (pooling.cu) ----
//
// x [n, h, w, c] resized to y [n, out_h, out_w, c] with PyTorch's source
// coordinates (backends/reference/resize.cc says which). The forward op is
// one thread per output element; the backward op one per input element,
// gathering the output gradients that were interpolated from it in the
// order the reference kernel scatters them (output pixels in row-major
// order, each one's four taps in order), so that no atomics are needed and
// the sums are deterministic.
struct ResizeGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t out_h = 0, out_w = 0;
  bool align_corners = false;
};
cudaError_t LaunchResizeBilinear(const float* x, float* y, const ResizeGeometry& geometry,
                                 cudaStream_t stream);
cudaError_t LaunchResizeBilinearBackward(const float* dy, float* dx, const ResizeGeometry& geometry,
                                         cudaStream_t stream);
// Nearest resizing (the input pixel floor(dst * in / out) along each axis)
// and its gradient, gathered per input element in dy's order.
cudaError_t LaunchResizeNearest(const float* x, float* y, const ResizeGeometry& geometry,
                                cudaStream_t stream);
cudaError_t LaunchResizeNearestBackward(const float* dy, float* dx, const ResizeGeometry& geometry,
                                        cudaStream_t stream);

// ---- Pooling (pooling.cu) ----

// An NHWC pooling window: x [n, h, w, c], y [n, out_h, out_w, c].
struct PoolGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;
  bool count_include_pad = false;  // an average's divisor: the whole kernel, not its real inputs
};
// y = the window's maximum; on ties the first in window order.
cudaError_t LaunchMaxPool(const float* x, float* y, const PoolGeometry& geometry,
                          cudaStream_t stream);
// dx: each dy goes to its window's first maximum. One thread per element of
// dx gathers, in output order, the dy of the windows whose maximum it is: no
// atomics, and the reference kernel's order of additions.
cudaError_t LaunchMaxPoolBackward(const float* dy, const float* x, float* dx,
                                  const PoolGeometry& geometry, cudaStream_t stream);
// y = the mean of the window's real inputs (summed in float in window order,
// as the reference kernel), divided by their count or, with
// count_include_pad, by the kernel's size.
cudaError_t LaunchAvgPool(const float* x, float* y, const PoolGeometry& geometry,
                          cudaStream_t stream);
// dx: each dy is shared evenly by its window. One thread per element of dx
// gathers the shares of the windows that hold it, in output order (the
// reference kernel's order of additions).
cudaError_t LaunchAvgPoolBackward(const float* dy, float* dx, const PoolGeometry& geometry,
                                  cudaStream_t stream);
// y[n, c] = the mean of x[n, :, :, c] (summed in double).
cudaError_t LaunchGlobalAvgPool(const float* x, float* y, int64_t n, int64_t pixels,
                                int64_t channels, cudaStream_t stream);
// dx[n, p, c] = dy[n, c] / pixels.
cudaError_t LaunchGlobalAvgPoolBackward(const float* dy, float* dx, int64_t n, int64_t pixels,
                                        int64_t channels, cudaStream_t stream);

// ---- Cross-entropy loss (loss.cu) ----

// Labels are i64 or i32; a row whose label is ignore_index does not count. A
// label outside [0, classes) that is not ignore_index makes its row's loss
// and gradient NaN (the device cannot return an error mid-step; the data
// loader checks labels on the host).
struct CrossEntropy {
  int64_t rows = 0;
  int64_t classes = 0;
  int64_t ignore_index = -100;
  bool mean = true;  // reduction "mean" (loss[0]), else "none" (loss[row])
  bool labels_i32 = false;
};
cudaError_t LaunchCrossEntropyLoss(const float* logits, const void* labels,
                                   const CrossEntropy& settings, float* loss, void* scratch,
                                   cudaStream_t stream);
// dlogits = scale * (softmax(logits) - onehot(label)), scale = dloss[0] /
// (rows counted) for "mean", dloss[row] for "none"; ignored rows get 0.
cudaError_t LaunchCrossEntropyLossBackward(const float* dloss, const float* logits,
                                           const void* labels, const CrossEntropy& settings,
                                           float* dlogits, void* scratch, cudaStream_t stream);

}  // namespace spillway::backends::cuda
