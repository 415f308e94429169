// Launchers of the CUDA backend's own kernels: element-wise f32 maps over n
// elements, enqueued on a stream. Each returns the launch's error (an
// execution error shows at the stream's next synchronization).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace spillway::backends::cuda {

enum class BinaryOp { kAdd, kSub, kMul };

// y = x < 0 ? 0 : x, so that NaN passes through (as the reference kernel).
cudaError_t LaunchRelu(const float* x, float* y, int64_t n, cudaStream_t stream);
// dx = y > 0 ? dy : 0, with y relu's output.
cudaError_t LaunchReluBackward(const float* dy, const float* y, float* dx, int64_t n,
                               cudaStream_t stream);
// c = a op b, element by element (same shapes; no broadcasting).
cudaError_t LaunchBinary(BinaryOp op, const float* a, const float* b, float* c, int64_t n,
                         cudaStream_t stream);

}  // namespace spillway::backends::cuda
