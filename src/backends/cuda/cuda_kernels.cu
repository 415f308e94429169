// The element-wise kernels: activations, binary ops (broadcasting too),
// add_n, fill, bias, reduce_sum and the SGD and Adam updates; strided copies
// (transpose, slice and its gradient, concat) and the embedding and its
// gradient.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/element_math.h"
#include "backends/cuda/launch.cuh"
#include "backends/dropout_mask.h"

namespace spillway::backends::cuda {
namespace {

__global__ void Relu(const float* x, float* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

__global__ void ReluBackward(const float* dy, const float* y, float* dx, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void Activate(ActivationParams params, const float* x, float* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) y[i] = ActivationAt(x[i], params);
}

__global__ void ActivateGradient(ActivationParams params, const float* dy, const float* saved,
                                 float* dx, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    dx[i] = ActivationGradientAt(dy[i], saved[i], params);
  }
}

// The sums, products and quotients are single IEEE operations (no
// contraction into FMA is possible in a lone one), so the results are the
// CPU's bits.
template <BinaryOp kOp>
__global__ void Binary(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    if constexpr (kOp == BinaryOp::kAdd) c[i] = a[i] + b[i];
    if constexpr (kOp == BinaryOp::kSub) c[i] = a[i] - b[i];
    if constexpr (kOp == BinaryOp::kMul) c[i] = a[i] * b[i];
    if constexpr (kOp == BinaryOp::kDiv) c[i] = a[i] / b[i];
  }
}

template <typename T>
__global__ void Gather(const T* x, T* y, StridedView view, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) y[i] = x[StridedOffset(view, i)];
}

template <typename T>
__global__ void Place(const T* x, T* y, StridedView view, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) y[StridedOffset(view, i)] = x[i];
}

// As Binary: one IEEE operation per element, the CPU's bits.
template <BinaryOp kOp>
__global__ void BroadcastBinary(const float* a, StridedView a_view, const float* b,
                                StridedView b_view, float* c, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float x = a[StridedOffset(a_view, i)];
    const float y = b[StridedOffset(b_view, i)];
    if constexpr (kOp == BinaryOp::kAdd) c[i] = x + y;
    if constexpr (kOp == BinaryOp::kSub) c[i] = x - y;
    if constexpr (kOp == BinaryOp::kMul) c[i] = x * y;
    if constexpr (kOp == BinaryOp::kDiv) c[i] = x / y;
  }
}

__global__ void Embedding(const float* table, const void* indices, bool indices_i32, int64_t rows,
                          int64_t width, float* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t row = EmbeddingRow(indices, indices_i32, i / width, rows);
    if (row < 0) __trap();
    y[i] = table[row * width + i % width];
  }
}

__global__ void EmbeddingBackward(const float* dy, const void* indices, bool indices_i32,
                                  int64_t count, int64_t rows, int64_t width, float* dtable) {
  for (int64_t d = GridStart(); d < width; d += GridStride()) {
    if (!EmbeddingGradientColumn(dy, indices, indices_i32, count, rows, width, d, dtable)) __trap();
  }
}

__global__ void AdamUpdate(const float* param, const float* grad, const float* m, const float* v,
                           const int64_t* step, float* param_out, float* m_out, float* v_out,
                           int64_t n, AdamSettings settings) {
  __shared__ AdamFactors factors;
  if (threadIdx.x == 0) {
    if (*step < 1) __trap();  // the first update is step 1
    factors = MakeAdamFactors(*step, settings);
  }
  __syncthreads();
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    AdamUpdateAt(factors, param, grad, m, v, i, param_out, m_out, v_out);
  }
}

__global__ void Dropout(const float* x, float* y, int64_t n, DropoutMask mask, float scale) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    y[i] = mask.Keeps(static_cast<uint64_t>(i)) ? x[i] * scale : 0.0f;
  }
}

__global__ void AddN(AddNInputs inputs, float* y, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    double sum = inputs.items[0][i];
    for (int k = 1; k < inputs.count; ++k) sum += inputs.items[k][i];
    y[i] = static_cast<float>(sum);
  }
}

template <typename T>
__global__ void Fill(T* y, T value, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) y[i] = value;
}

__global__ void AddBias(float* y, const float* bias, int64_t n, int64_t channels) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) y[i] += bias[i % channels];
}

__global__ void ReduceSum(const float* x, float* y, ReduceGeometry g, int64_t y_elements) {
  for (int64_t out = GridStart(); out < y_elements; out += GridStride()) {
    y[out] = ReduceSumAt(x, g, out);
  }
}

__global__ void SgdUpdate(const float* param, const float* grad, const float* buffer,
                          float* param_out, float* buffer_out, int64_t n, SgdSettings s) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float p = param[i];
    float g = grad[i];
    if (s.has_decay) g += s.weight_decay * p;
    if (s.has_buffer) {
      const float new_buffer = s.momentum * buffer[i] + g;
      if (buffer_out != nullptr) buffer_out[i] = new_buffer;
      g = s.nesterov ? g + s.momentum * new_buffer : new_buffer;
    }
    if (param_out != nullptr) param_out[i] = p - s.lr * g;
  }
}

// Runs launch(T{}) with T the unsigned integer of `element_bytes` bytes (1,
// 4 or 8), which moves elements of any dtype of that size.
template <typename Launch>
cudaError_t ByElementSize(int element_bytes, Launch launch) {
  switch (element_bytes) {
    case 1:
      launch(uint8_t{});
      break;
    case 4:
      launch(uint32_t{});
      break;
    case 8:
      launch(uint64_t{});
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return LaunchGrid(Relu, n, stream, x, y, n);
}

cudaError_t LaunchReluBackward(const float* dy, const float* y, float* dx, int64_t n,
                               cudaStream_t stream) {
  return LaunchGrid(ReluBackward, n, stream, dy, y, dx, n);
}

cudaError_t LaunchActivation(const ActivationParams& params, const float* x, float* y, int64_t n,
                             cudaStream_t stream) {
  return LaunchGrid(Activate, n, stream, params, x, y, n);
}

cudaError_t LaunchActivationGradient(const ActivationParams& params, const float* dy,
                                     const float* saved, float* dx, int64_t n,
                                     cudaStream_t stream) {
  return LaunchGrid(ActivateGradient, n, stream, params, dy, saved, dx, n);
}

cudaError_t LaunchGather(const void* x, void* y, int element_bytes, const StridedView& view,
                         int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return ByElementSize(element_bytes, [&](auto element) {
    using T = decltype(element);
    Gather<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), view,
                                               n);
  });
}

cudaError_t LaunchPlace(const void* x, void* y, int element_bytes, const StridedView& view,
                        int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return ByElementSize(element_bytes, [&](auto element) {
    using T = decltype(element);
    Place<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), view,
                                              n);
  });
}

cudaError_t LaunchBroadcastBinary(BinaryOp op, const float* a, const StridedView& a_view,
                                  const float* b, const StridedView& b_view, float* c, int64_t n,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (op) {
    case BinaryOp::kAdd:
      BroadcastBinary<BinaryOp::kAdd>
          <<<Blocks(n), kThreads, 0, stream>>>(a, a_view, b, b_view, c, n);
      break;
    case BinaryOp::kSub:
      BroadcastBinary<BinaryOp::kSub>
          <<<Blocks(n), kThreads, 0, stream>>>(a, a_view, b, b_view, c, n);
      break;
    case BinaryOp::kMul:
      BroadcastBinary<BinaryOp::kMul>
          <<<Blocks(n), kThreads, 0, stream>>>(a, a_view, b, b_view, c, n);
      break;
    case BinaryOp::kDiv:
      BroadcastBinary<BinaryOp::kDiv>
          <<<Blocks(n), kThreads, 0, stream>>>(a, a_view, b, b_view, c, n);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchEmbedding(const float* table, const void* indices, bool indices_i32,
                            int64_t count, int64_t rows, int64_t width, float* y,
                            cudaStream_t stream) {
  const int64_t n = count * width;
  return LaunchGrid(Embedding, n, stream, table, indices, indices_i32, rows, width, y, n);
}

cudaError_t LaunchEmbeddingBackward(const float* dy, const void* indices, bool indices_i32,
                                    int64_t count, int64_t rows, int64_t width, float* dtable,
                                    cudaStream_t stream) {
  if (const cudaError_t zeroed =
          cudaMemsetAsync(dtable, 0, static_cast<size_t>(rows * width) * sizeof(float), stream);
      zeroed != cudaSuccess) {
    return zeroed;
  }
  return LaunchGrid(EmbeddingBackward, width, stream, dy, indices, indices_i32, count, rows, width,
                    dtable);
}

cudaError_t LaunchBinary(BinaryOp op, const float* a, const float* b, float* c, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (op) {
    case BinaryOp::kAdd:
      Binary<BinaryOp::kAdd><<<Blocks(n), kThreads, 0, stream>>>(a, b, c, n);
      break;
    case BinaryOp::kSub:
      Binary<BinaryOp::kSub><<<Blocks(n), kThreads, 0, stream>>>(a, b, c, n);
      break;
    case BinaryOp::kMul:
      Binary<BinaryOp::kMul><<<Blocks(n), kThreads, 0, stream>>>(a, b, c, n);
      break;
    case BinaryOp::kDiv:
      Binary<BinaryOp::kDiv><<<Blocks(n), kThreads, 0, stream>>>(a, b, c, n);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchDropout(const float* x, float* y, int64_t n, uint64_t seed, uint64_t step,
                          double p, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (!(p >= 0.0 && p < 1.0)) return cudaErrorInvalidValue;
  // As the reference kernel: the scale in f32, 1 / (1 - p).
  const float scale = 1.0f / (1.0f - static_cast<float>(p));
  Dropout<<<Blocks(n), kThreads, 0, stream>>>(x, y, n, DropoutMask(seed, step, p), scale);
  return cudaGetLastError();
}

cudaError_t LaunchAddN(const AddNInputs& inputs, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (inputs.count < 1 || inputs.count > kMaxAddNInputs) return cudaErrorInvalidValue;
  AddN<<<Blocks(n), kThreads, 0, stream>>>(inputs, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchFill(void* y, int element_bytes, uint64_t bits, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (element_bytes) {
    case 1:
      Fill<uint8_t><<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint8_t*>(y),
                                                        static_cast<uint8_t>(bits), n);
      break;
    case 4:
      Fill<uint32_t><<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(y),
                                                         static_cast<uint32_t>(bits), n);
      break;
    case 8:
      Fill<uint64_t><<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint64_t*>(y), bits, n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(float* y, const float* bias, int64_t n, int64_t channels,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (channels < 1) return cudaErrorInvalidValue;
  AddBias<<<Blocks(n), kThreads, 0, stream>>>(y, bias, n, channels);
  return cudaGetLastError();
}

cudaError_t LaunchReduceSum(const float* x, float* y, const ReduceGeometry& geometry,
                            int64_t y_elements, cudaStream_t stream) {
  return LaunchGrid(ReduceSum, y_elements, stream, x, y, geometry, y_elements);
}

cudaError_t LaunchSgdUpdate(const float* param, const float* grad, const float* buffer,
                            float* param_out, float* buffer_out, int64_t n,
                            const SgdSettings& settings, cudaStream_t stream) {
  return LaunchGrid(SgdUpdate, n, stream, param, grad, buffer, param_out, buffer_out, n, settings);
}

cudaError_t LaunchAdamUpdate(const float* param, const float* grad, const float* m, const float* v,
                             const int64_t* step, float* param_out, float* m_out, float* v_out,
                             int64_t n, const AdamSettings& settings, cudaStream_t stream) {
  return LaunchGrid(AdamUpdate, n, stream, param, grad, m, v, step, param_out, m_out, v_out, n,
                    settings);
}

}  // namespace spillway::backends::cuda
