// Batch norm: per-channel sums over fixed chunks of rows, then per-channel
// finishing, then one element-wise pass (cuda_kernels.h says why each is
// deterministic).
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "program/workspace_sizes.h"

namespace spillway::backends::cuda {
namespace {

// A block of the partial-sum kernels: 32 channels side by side (a warp reads
// 128 contiguous bytes of a row) by kLanes rows.
constexpr int kChannelsPerBlock = 32;
constexpr int kLanes = 8;

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

// The one normalization expression (as the reference kernel's Normalize).
__device__ inline float Normalize(float x, float mean, float inv_std, float gamma, float beta) {
  return (x - mean) * inv_std * gamma + beta;
}

__device__ inline float InvStd(float variance, float epsilon) {
  return 1.0f / sqrtf(variance + epsilon);
}

// Shared by the partial-sum kernels: adds the kLanes row lanes of a block's
// column in lane order and writes the chunk's two partial sums.
__device__ inline void StorePartials(double first, double second, int64_t channel, int64_t channels,
                                     double* partials) {
  __shared__ double lanes[kLanes][kChannelsPerBlock][2];
  lanes[threadIdx.y][threadIdx.x][0] = first;
  lanes[threadIdx.y][threadIdx.x][1] = second;
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
  const int64_t first_row = blockIdx.x * chunking.rows_per_chunk;
  int64_t end_row = first_row + chunking.rows_per_chunk;
  end_row = end_row < rows ? end_row : rows;
  double sum = 0;
  double squares = 0;
  if (channel < channels) {
    for (int64_t r = first_row + threadIdx.y; r < end_row; r += kLanes) {
      const double value = x[r * channels + channel];
      sum += value;
      squares += value * value;
    }
  }
  StorePartials(sum, squares, channel, channels, partials);
}

// Partial sums of dy and dy * x_hat over the chunk's rows, per channel.
__global__ void GradientPartials(const float* dy, const float* x, const float* mean,
                                 const float* inv_std, int64_t rows, int64_t channels,
                                 Chunking chunking, double* partials) {
  const int64_t channel = blockIdx.y * static_cast<int64_t>(kChannelsPerBlock) + threadIdx.x;
  const int64_t first_row = blockIdx.x * chunking.rows_per_chunk;
  int64_t end_row = first_row + chunking.rows_per_chunk;
  end_row = end_row < rows ? end_row : rows;
  double sum_dy = 0;
  double sum_dy_x_hat = 0;
  if (channel < channels) {
    const float m = mean[channel];
    const float s = inv_std[channel];
    for (int64_t r = first_row + threadIdx.y; r < end_row; r += kLanes) {
      const int64_t i = r * channels + channel;
      const float x_hat = (x[i] - m) * s;
      sum_dy += dy[i];
      sum_dy_x_hat += static_cast<double>(dy[i]) * x_hat;
    }
  }
  StorePartials(sum_dy, sum_dy_x_hat, channel, channels, partials);
}

// The channel's two totals: its partial sums added in chunk order.
__device__ inline void Totals(const double* partials, int64_t chunks, int64_t channels,
                              int64_t channel, double* first, double* second) {
  double a = 0;
  double b = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    a += partials[(k * channels + channel) * 2];
    b += partials[(k * channels + channel) * 2 + 1];
  }
  *first = a;
  *second = b;
}

__global__ void FinishMoments(const double* partials, int64_t chunks, int64_t rows,
                              int64_t channels, BatchNormTraining settings, float* mean_out,
                              float* inv_std_out, float* saved_mean, float* saved_inv_std,
                              float* running_mean, float* running_var) {
  for (int64_t c = GridStart(); c < channels; c += GridStride()) {
    double sum = 0;
    double squares = 0;
    Totals(partials, chunks, channels, c, &sum, &squares);
    const double mean = sum / static_cast<double>(rows);
    double variance = squares / static_cast<double>(rows) - mean * mean;
    variance = variance < 0 ? 0 : variance;
    const float mean_f = static_cast<float>(mean);
    const float variance_f = static_cast<float>(variance);
    const float inv_std = InvStd(variance_f, settings.epsilon);
    mean_out[c] = mean_f;
    inv_std_out[c] = inv_std;
    if (saved_mean != nullptr) saved_mean[c] = mean_f;
    if (saved_inv_std != nullptr) saved_inv_std[c] = inv_std;
    const float bessel = static_cast<float>(rows) / static_cast<float>(rows - 1);
    if (running_mean != nullptr) {
      running_mean[c] = (1.0f - settings.momentum) * running_mean[c] + settings.momentum * mean_f;
    }
    if (running_var != nullptr) {
      running_var[c] =
          (1.0f - settings.momentum) * running_var[c] + settings.momentum * variance_f * bessel;
    }
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
    double sum_dy = 0;
    double sum_dy_x_hat = 0;
    Totals(partials, chunks, channels, c, &sum_dy, &sum_dy_x_hat);
    sum_dy_out[c] = static_cast<float>(sum_dy);
    sum_dy_x_hat_out[c] = static_cast<float>(sum_dy_x_hat);
    if (dgamma != nullptr) dgamma[c] = static_cast<float>(sum_dy_x_hat);
    if (dbeta != nullptr) dbeta[c] = static_cast<float>(sum_dy);
  }
}

__global__ void InputGradient(const float* dy, const float* x, const float* gamma,
                              const float* mean, const float* inv_std, const float* sum_dy,
                              const float* sum_dy_x_hat, int64_t n, int64_t channels, float rows,
                              bool training, float* dx) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t c = i % channels;
    const float scale = gamma[c] * inv_std[c];
    if (training) {
      const float x_hat = (x[i] - mean[c]) * inv_std[c];
      dx[i] = scale * (dy[i] - sum_dy[c] / rows - x_hat * sum_dy_x_hat[c] / rows);
    } else {
      dx[i] = scale * dy[i];
    }
  }
}

dim3 PartialGrid(const Chunking& chunking, int64_t channels) {
  return dim3(static_cast<unsigned>(chunking.chunks),
              static_cast<unsigned>((channels + kChannelsPerBlock - 1) / kChannelsPerBlock));
}

const dim3 kPartialBlock(kChannelsPerBlock, kLanes);

}  // namespace

size_t BatchNormScratchBytes(int64_t rows, int64_t channels) {
  return static_cast<size_t>(program::BatchNormScratchBytes(rows, channels));
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
  if (n == 0) return cudaSuccess;
  NormalizeRows<<<Blocks(n), kThreads, 0, stream>>>(x, gamma, beta, mean, inv_std, n, channels, y);
  return cudaGetLastError();
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
