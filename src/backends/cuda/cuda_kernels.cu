#include "backends/cuda/cuda_kernels.h"

namespace spillway::backends::cuda {
namespace {

constexpr int kThreads = 256;

// Enough blocks to cover n with a grid-stride loop, capped so that a huge
// tensor does not ask for more blocks than a launch allows.
unsigned Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__global__ void Relu(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] < 0.0f ? 0.0f : x[i];
  }
}

__global__ void ReluBackward(const float* dy, const float* y, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

// The products and sums are single IEEE operations (no contraction into FMA
// is possible in a lone add or multiply), so the results are the CPU's bits.
template <BinaryOp kOp>
__global__ void Binary(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (kOp == BinaryOp::kAdd) c[i] = a[i] + b[i];
    if constexpr (kOp == BinaryOp::kSub) c[i] = a[i] - b[i];
    if constexpr (kOp == BinaryOp::kMul) c[i] = a[i] * b[i];
  }
}

}  // namespace

cudaError_t LaunchRelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Relu<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchReluBackward(const float* dy, const float* y, float* dx, int64_t n,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluBackward<<<Blocks(n), kThreads, 0, stream>>>(dy, y, dx, n);
  return cudaGetLastError();
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
  }
  return cudaGetLastError();
}

}  // namespace spillway::backends::cuda
