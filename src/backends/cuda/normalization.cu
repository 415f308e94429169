// Batch norm: per-channel sums over fixed chunks of rows, then per-channel
// finishing, then one element-wise pass; layer norm: a thread per row, and
// per feature for its parameters' gradients (cuda_kernels.h says why each is
// deterministic).
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/element_math.h"
#include "backends/cuda/launch.cuh"
#include "program/workspace_sizes.h"

namespace spillway::backends::cuda {
namespace {

// A block of the partial-sum kernels: 32 channels side by side (a warp reads
// 128 contiguous bytes of a row) by kLanes rows.
constexpr int kChannelsPerBlock = 32;
constexpr int kLanes = kBatchNormLanes;

// The chunks of rows each partial sum covers, fixed by the row count alone
// (program/workspace_sizes.h, which the planner reads too).
using Chunking = program::BatchNormChunking;
constexpr Chunking ChunkRows(int64_t rows) { return program::ChunkBatchNormRows(rows); }

// The scratch layout: two partial sums per (chunk, channel), then three
// float values per channel (what the element-wise pass reads).
struct Scratch {
  double* partials;  // [chunks][channels][2]
  float* first;      // [channels]: mean, or the sum of dy
  float* second;     // [channels]: inv_std, or the sum of dy * x_hat
  float* third;      // [channels]: inv_std from the running variance (inference backward)
};

Scratch Carve(void* memory, int64_t channels, const Chunking& chunking) {
  Scratch scratch;
  scratch.partials = static_cast<double*>(memory);
  float* floats = reinterpret_cast<float*>(scratch.partials + chunking.chunks * channels * 2);
  scratch.first = floats;
  scratch.second = floats + channels;
  scratch.third = floats + 2 * channels;
  return scratch;
}

// Shared by the partial-sum kernels: adds the lanes of a block's column in
// lane order and writes the chunk's two partial sums.
__device__ inline void StorePartials(const PairSum& lane_sums, int64_t channel, int64_t channels,
                                     double* partials) {
  __shared__ double lanes[kLanes][kChannelsPerBlock][2];
  lanes[threadIdx.y][threadIdx.x][0] = lane_sums.first;
  lanes[threadIdx.y][threadIdx.x][1] = lane_sums.second;
  __syncthreads();
  if (threadIdx.y != 0 || channel >= channels) return;
  double a = 0;
  double b = 0;
  for (int lane = 0; lane < kLanes; ++lane) {
    a += lanes[lane][threadIdx.x][0];
    b += lanes[lane][threadIdx.x][1];
  }
  double* out = partials + (blockIdx.x * channels + channel) * 2;
  out[0] = a;
  out[1] = b;
}

// Partial sums of x and x^2 over the chunk's rows, per channel.
__global__ void MomentPartials(const float* x, int64_t rows, int64_t channels, Chunking chunking,
                               double* partials) {
  const int64_t channel = blockIdx.y * static_cast<int64_t>(kChannelsPerBlock) + threadIdx.x;
  const PairSum sums = channel < channels ? LaneMoments(x, rows, channels, chunking, blockIdx.x,
                                                        static_cast<int>(threadIdx.y), channel)
                                          : PairSum{};
  StorePartials(sums, channel, channels, partials);
}

// Partial sums of dy and dy * x_hat over the chunk's rows, per channel.
__global__ void GradientPartials(const float* dy, const float* x, const float* mean,
                                 const float* inv_std, int64_t rows, int64_t channels,
                                 Chunking chunking, double* partials) {
  const int64_t channel = blockIdx.y * static_cast<int64_t>(kChannelsPerBlock) + threadIdx.x;
  const PairSum sums = channel < channels ? LaneGradientSums(dy, x, mean[channel], inv_std[channel],
                                                             rows, channels, chunking, blockIdx.x,
                                                             static_cast<int>(threadIdx.y), channel)
                                          : PairSum{};
  StorePartials(sums, channel, channels, partials);
}

__global__ void FinishMoments(const double* partials, int64_t chunks, int64_t rows,
                              int64_t channels, BatchNormTraining settings, float* mean_out,
                              float* inv_std_out, float* saved_mean, float* saved_inv_std,
                              float* running_mean, float* running_var) {
  for (int64_t c = GridStart(); c < channels; c += GridStride()) {
    FinishChannelMoments(partials, chunks, rows, channels, c, settings, mean_out, inv_std_out,
                         saved_mean, saved_inv_std, running_mean, running_var);
  }
}

__global__ void RunningInvStd(const float* running_var, int64_t channels, float epsilon,
                              float* inv_std) {
  for (int64_t c = GridStart(); c < channels; c += GridStride()) {
    inv_std[c] = InvStd(running_var[c], epsilon);
  }
}

__global__ void NormalizeRows(const float* x, const float* gamma, const float* beta,
                              const float* mean, const float* inv_std, int64_t n, int64_t channels,
                              float* y) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t c = i % channels;
    y[i] = Normalize(x[i], mean[c], inv_std[c], gamma[c], beta[c]);
  }
}

__global__ void FinishGradientSums(const double* partials, int64_t chunks, int64_t channels,
                                   float* sum_dy_out, float* sum_dy_x_hat_out, float* dgamma,
                                   float* dbeta) {
  for (int64_t c = GridStart(); c < channels; c += GridStride()) {
    FinishChannelGradientSums(partials, chunks, channels, c, sum_dy_out, sum_dy_x_hat_out, dgamma,
                              dbeta);
  }
}

__global__ void InputGradient(const float* dy, const float* x, const float* gamma,
                              const float* mean, const float* inv_std, const float* sum_dy,
                              const float* sum_dy_x_hat, int64_t n, int64_t channels, float rows,
                              bool training, float* dx) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t c = i % channels;
    dx[i] = BatchNormInputGradient(dy[i], x[i], gamma[c], mean[c], inv_std[c], sum_dy[c],
                                   sum_dy_x_hat[c], rows, training);
  }
}

dim3 PartialGrid(const Chunking& chunking, int64_t channels) {
  return dim3(static_cast<unsigned>(chunking.chunks),
              static_cast<unsigned>((channels + kChannelsPerBlock - 1) / kChannelsPerBlock));
}

const dim3 kPartialBlock(kChannelsPerBlock, kLanes);

__global__ void LayerNorm(const float* x, const float* gamma, const float* beta, int64_t rows,
                          int64_t features, float epsilon, float* y, float* mean, float* rstd) {
  for (int64_t r = GridStart(); r < rows; r += GridStride()) {
    LayerNormRow(x, gamma, beta, features, epsilon, r, y, mean, rstd);
  }
}

__global__ void LayerNormInputGradient(const float* dy, const float* x, const float* gamma,
                                       const float* mean, const float* rstd, int64_t rows,
                                       int64_t features, float* dx) {
  for (int64_t r = GridStart(); r < rows; r += GridStride()) {
    LayerNormGradientRow(dy, x, gamma, mean, rstd, features, r, dx);
  }
}

__global__ void LayerNormParameterGradients(const float* dy, const float* x, const float* mean,
                                            const float* rstd, int64_t rows, int64_t features,
                                            float* dgamma, float* dbeta) {
  for (int64_t c = GridStart(); c < features; c += GridStride()) {
    LayerNormParameterGradient(dy, x, mean, rstd, rows, features, c, dgamma, dbeta);
  }
}

}  // namespace

cudaError_t LaunchLayerNorm(const float* x, const float* gamma, const float* beta, int64_t rows,
                            int64_t features, float epsilon, float* y, float* mean, float* rstd,
                            cudaStream_t stream) {
  return LaunchGrid(LayerNorm, rows, stream, x, gamma, beta, rows, features, epsilon, y, mean,
                    rstd);
}

cudaError_t LaunchLayerNormBackward(const float* dy, const float* x, const float* gamma,
                                    const float* mean, const float* rstd, int64_t rows,
                                    int64_t features, float* dx, float* dgamma, float* dbeta,
                                    cudaStream_t stream) {
  if (dx != nullptr && rows > 0) {
    LayerNormInputGradient<<<Blocks(rows), kThreads, 0, stream>>>(dy, x, gamma, mean, rstd, rows,
                                                                  features, dx);
    if (const cudaError_t launched = cudaGetLastError(); launched != cudaSuccess) return launched;
  }
  if ((dgamma != nullptr || dbeta != nullptr) && features > 0) {
    LayerNormParameterGradients<<<Blocks(features), kThreads, 0, stream>>>(dy, x, mean, rstd, rows,
                                                                           features, dgamma, dbeta);
  }
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormTraining(const float* x, const float* gamma, const float* beta,
                                    int64_t rows, int64_t channels,
                                    const BatchNormTraining& settings, float* y, float* saved_mean,
                                    float* saved_inv_std, float* running_mean, float* running_var,
                                    void* scratch_memory, cudaStream_t stream) {
  if (rows < 2 || channels < 1) return cudaErrorInvalidValue;
  const Chunking chunking = ChunkRows(rows);
  const Scratch scratch = Carve(scratch_memory, channels, chunking);
  MomentPartials<<<PartialGrid(chunking, channels), kPartialBlock, 0, stream>>>(
      x, rows, channels, chunking, scratch.partials);
  FinishMoments<<<Blocks(channels), kThreads, 0, stream>>>(
      scratch.partials, chunking.chunks, rows, channels, settings, scratch.first, scratch.second,
      saved_mean, saved_inv_std, running_mean, running_var);
  if (y != nullptr) {
    const int64_t n = rows * channels;
    NormalizeRows<<<Blocks(n), kThreads, 0, stream>>>(x, gamma, beta, scratch.first, scratch.second,
                                                      n, channels, y);
  }
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormNormalize(const float* x, const float* gamma, const float* beta,
                                     const float* mean, const float* inv_std, int64_t rows,
                                     int64_t channels, float* y, cudaStream_t stream) {
  const int64_t n = rows * channels;
  return LaunchGrid(NormalizeRows, n, stream, x, gamma, beta, mean, inv_std, n, channels, y);
}

cudaError_t LaunchBatchNormInference(const float* x, const float* gamma, const float* beta,
                                     const float* running_mean, const float* running_var,
                                     int64_t rows, int64_t channels, float epsilon, float* y,
                                     void* scratch_memory, cudaStream_t stream) {
  if (channels < 1) return cudaErrorInvalidValue;
  const Scratch scratch = Carve(scratch_memory, channels, ChunkRows(rows));
  RunningInvStd<<<Blocks(channels), kThreads, 0, stream>>>(running_var, channels, epsilon,
                                                           scratch.second);
  return LaunchBatchNormNormalize(x, gamma, beta, running_mean, scratch.second, rows, channels, y,
                                  stream);
}

cudaError_t LaunchBatchNormBackward(const float* dy, const float* x, const float* gamma,
                                    const float* mean, const float* spread, int64_t rows,
                                    int64_t channels, bool training, float epsilon, float* dx,
                                    float* dgamma, float* dbeta, void* scratch_memory,
                                    cudaStream_t stream) {
  if (rows < 1 || channels < 1) return cudaErrorInvalidValue;
  const Chunking chunking = ChunkRows(rows);
  const Scratch scratch = Carve(scratch_memory, channels, chunking);
  // The inverse standard deviations: saved in training, computed from the
  // running variance in inference.
  const float* inv_std = spread;
  if (!training) {
    RunningInvStd<<<Blocks(channels), kThreads, 0, stream>>>(spread, channels, epsilon,
                                                             scratch.third);
    inv_std = scratch.third;
  }
  float* sum_dy = scratch.first;
  float* sum_dy_x_hat = scratch.second;
  GradientPartials<<<PartialGrid(chunking, channels), kPartialBlock, 0, stream>>>(
      dy, x, mean, inv_std, rows, channels, chunking, scratch.partials);
  FinishGradientSums<<<Blocks(channels), kThreads, 0, stream>>>(
      scratch.partials, chunking.chunks, channels, sum_dy, sum_dy_x_hat, dgamma, dbeta);
  if (dx != nullptr) {
    const int64_t n = rows * channels;
    InputGradient<<<Blocks(n), kThreads, 0, stream>>>(dy, x, gamma, mean, inv_std, sum_dy,
                                                      sum_dy_x_hat, n, channels,
                                                      static_cast<float>(rows), training, dx);
  }
  return cudaGetLastError();
}

}  // namespace spillway::backends::cuda
