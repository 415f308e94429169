// Cross-entropy over rows of logits, and its gradient: one thread per row
// (a row's log-sum-exp is one thread's loop over its classes, in order), and
// the mean over rows added by one thread in row order.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "program/workspace_sizes.h"

namespace spillway::backends::cuda {
namespace {

__device__ inline int64_t LabelAt(const void* labels, bool labels_i32, int64_t row) {
  return labels_i32 ? static_cast<const int32_t*>(labels)[row]
                    : static_cast<const int64_t*>(labels)[row];
}

// log(sum(exp(row))), computed around the row's maximum, the sum in double.
__device__ inline float LogSumExp(const float* row, int64_t classes) {
  float largest = row[0];
  for (int64_t c = 1; c < classes; ++c) largest = row[c] > largest ? row[c] : largest;
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += expf(row[c] - largest);
  return largest + static_cast<float>(log(sum));
}

// Each row's loss (0 where ignored) and whether it counts.
__global__ void RowLosses(const float* logits, const void* labels, CrossEntropy s, float* row_loss,
                          int32_t* counted) {
  for (int64_t r = GridStart(); r < s.rows; r += GridStride()) {
    const int64_t label = LabelAt(labels, s.labels_i32, r);
    if (label == s.ignore_index) {
      row_loss[r] = 0.0f;
      counted[r] = 0;
      continue;
    }
    const float* row = logits + r * s.classes;
    row_loss[r] = label < 0 || label >= s.classes ? NAN : LogSumExp(row, s.classes) - row[label];
    counted[r] = 1;
  }
}

// loss[0] = the mean of the counted rows' losses (0 if none counts).
__global__ void MeanLoss(const float* row_loss, const int32_t* counted, int64_t rows, float* loss) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float total = 0.0f;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (counted[r] == 0) continue;
    total += row_loss[r];
    ++count;
  }
  loss[0] = count > 0 ? total / static_cast<float>(count) : 0.0f;
}

// The number of rows that count, for the mean's gradient.
__global__ void CountRows(const void* labels, CrossEntropy s, int64_t* count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t counted = 0;
  for (int64_t r = 0; r < s.rows; ++r) {
    if (LabelAt(labels, s.labels_i32, r) != s.ignore_index) ++counted;
  }
  *count = counted;
}

__global__ void LossGradient(const float* dloss, const float* logits, const void* labels,
                             CrossEntropy s, const int64_t* counted, float* dlogits) {
  for (int64_t r = GridStart(); r < s.rows; r += GridStride()) {
    const int64_t label = LabelAt(labels, s.labels_i32, r);
    const float* row = logits + r * s.classes;
    float* grad = dlogits + r * s.classes;
    if (label == s.ignore_index) {
      for (int64_t c = 0; c < s.classes; ++c) grad[c] = 0.0f;
      continue;
    }
    const bool valid = label >= 0 && label < s.classes;
    const float scale = s.mean ? dloss[0] / static_cast<float>(*counted) : dloss[r];
    const float log_sum = LogSumExp(row, s.classes);
    for (int64_t c = 0; c < s.classes; ++c) {
      const float probability = expf(row[c] - log_sum);
      grad[c] = valid ? scale * (c == label ? probability - 1.0f : probability) : NAN;
    }
  }
}

// The scratch: a float loss and an int32 flag per row, then (8-aligned) a count.
struct Scratch {
  float* row_loss;
  int32_t* counted;
  int64_t* count;
};

Scratch Carve(void* memory, int64_t rows) {
  Scratch scratch;
  scratch.row_loss = static_cast<float*>(memory);
  scratch.counted = reinterpret_cast<int32_t*>(scratch.row_loss + rows);
  char* end = reinterpret_cast<char*>(scratch.counted + rows);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(end) + 7) & ~uintptr_t{7};
  scratch.count = reinterpret_cast<int64_t*>(aligned);
  return scratch;
}

}  // namespace

size_t CrossEntropyScratchBytes(int64_t rows) {
  return static_cast<size_t>(program::CrossEntropyScratchBytes(rows));
}

cudaError_t LaunchCrossEntropyLoss(const float* logits, const void* labels,
                                   const CrossEntropy& settings, float* loss, void* scratch_memory,
                                   cudaStream_t stream) {
  if (settings.rows == 0) {
    if (!settings.mean) return cudaSuccess;
    return cudaMemsetAsync(loss, 0, sizeof(float), stream);
  }
  if (settings.classes < 1) return cudaErrorInvalidValue;
  const Scratch scratch = Carve(scratch_memory, settings.rows);
  // With "none" the rows' losses are the output itself.
  float* row_loss = settings.mean ? scratch.row_loss : loss;
  RowLosses<<<Blocks(settings.rows), kThreads, 0, stream>>>(logits, labels, settings, row_loss,
                                                            scratch.counted);
  if (settings.mean) MeanLoss<<<1, 1, 0, stream>>>(row_loss, scratch.counted, settings.rows, loss);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyLossBackward(const float* dloss, const float* logits,
                                           const void* labels, const CrossEntropy& settings,
                                           float* dlogits, void* scratch_memory,
                                           cudaStream_t stream) {
  if (settings.rows == 0) return cudaSuccess;
  if (settings.classes < 1) return cudaErrorInvalidValue;
  const Scratch scratch = Carve(scratch_memory, settings.rows);
  CountRows<<<1, 1, 0, stream>>>(labels, settings, scratch.count);
  LossGradient<<<Blocks(settings.rows), kThreads, 0, stream>>>(dloss, logits, labels, settings,
                                                               scratch.count, dlogits);
  return cudaGetLastError();
}

}  // namespace spillway::backends::cuda
