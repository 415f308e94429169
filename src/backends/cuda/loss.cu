// Cross-entropy over rows of logits, and its gradient. A row's log-sum-exp is
// one thread's loop over its classes, in order. The mean over rows, and the
// count of rows that count, are summed over chunks of consecutive rows (one
// thread per chunk, its rows in order; program/workspace_sizes.h fixes the
// chunks by the row count alone), then over the chunks in order by one
// thread: deterministic, with a few kilobytes of scratch whatever the rows.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/element_math.h"
#include "backends/cuda/launch.cuh"
#include "program/workspace_sizes.h"

namespace spillway::backends::cuda {
namespace {

// The scratch: per chunk a double sum and an int64 count, then the total count.
struct Scratch {
  double* sums;
  int64_t* counts;
  int64_t* total_count;
};

Scratch Carve(void* memory, int64_t chunks) {
  Scratch scratch;
  scratch.sums = static_cast<double*>(memory);
  scratch.counts = reinterpret_cast<int64_t*>(scratch.sums + chunks);
  scratch.total_count = scratch.counts + chunks;
  return scratch;
}

// "none": each row's loss (0 where ignored) is the output.
__global__ void RowLosses(const float* logits, const void* labels, CrossEntropy s, float* loss) {
  for (int64_t r = GridStart(); r < s.rows; r += GridStride()) {
    const int64_t label = LabelAt(labels, s.labels_i32, r);
    loss[r] = label == s.ignore_index ? 0.0f : RowLoss(logits, label, s, r);
  }
}

// Per chunk: the sum of its counted rows' losses (with `with_losses`) and
// their count.
__global__ void ChunkTotals(const float* logits, const void* labels, CrossEntropy s,
                            bool with_losses, int64_t chunks, double* sums, int64_t* counts) {
  for (int64_t k = GridStart(); k < chunks; k += GridStride()) {
    LossChunkTotals(logits, labels, s, with_losses, k, &sums[k], &counts[k]);
  }
}

// The chunks' totals in chunk order: the mean loss (0 if no row counts) where
// `loss` is given, and the count.
__global__ void FinishTotals(const double* sums, const int64_t* counts, int64_t chunks, float* loss,
                             int64_t* total_count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  *total_count = FinishLossTotals(sums, counts, chunks, loss);
}

__global__ void LossGradient(const float* dloss, const float* logits, const void* labels,
                             CrossEntropy s, const int64_t* counted, float* dlogits) {
  for (int64_t r = GridStart(); r < s.rows; r += GridStride()) {
    LossGradientRow(dloss, logits, labels, s, s.mean ? *counted : 0, r, dlogits);
  }
}

}  // namespace

cudaError_t LaunchCrossEntropyLoss(const float* logits, const void* labels,
                                   const CrossEntropy& settings, float* loss, void* scratch_memory,
                                   cudaStream_t stream) {
  if (settings.rows == 0) {
    if (!settings.mean) return cudaSuccess;
    return cudaMemsetAsync(loss, 0, sizeof(float), stream);
  }
  if (settings.classes < 1) return cudaErrorInvalidValue;
  if (!settings.mean) {
    RowLosses<<<Blocks(settings.rows), kThreads, 0, stream>>>(logits, labels, settings, loss);
    return cudaGetLastError();
  }
  const int64_t chunks = program::LossChunks(settings.rows);
  const Scratch scratch = Carve(scratch_memory, chunks);
  ChunkTotals<<<Blocks(chunks), kThreads, 0, stream>>>(logits, labels, settings,
                                                       /*with_losses=*/true, chunks, scratch.sums,
                                                       scratch.counts);
  FinishTotals<<<1, 1, 0, stream>>>(scratch.sums, scratch.counts, chunks, loss,
                                    scratch.total_count);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyLossBackward(const float* dloss, const float* logits,
                                           const void* labels, const CrossEntropy& settings,
                                           float* dlogits, void* scratch_memory,
                                           cudaStream_t stream) {
  if (settings.rows == 0) return cudaSuccess;
  if (settings.classes < 1) return cudaErrorInvalidValue;
  const int64_t chunks = program::LossChunks(settings.rows);
  const Scratch scratch = Carve(scratch_memory, chunks);
  if (settings.mean) {
    ChunkTotals<<<Blocks(chunks), kThreads, 0, stream>>>(logits, labels, settings,
                                                         /*with_losses=*/false, chunks,
                                                         scratch.sums, scratch.counts);
    FinishTotals<<<1, 1, 0, stream>>>(scratch.sums, scratch.counts, chunks, nullptr,
                                      scratch.total_count);
  }
  LossGradient<<<Blocks(settings.rows), kThreads, 0, stream>>>(dloss, logits, labels, settings,
                                                               scratch.total_count, dlogits);
  return cudaGetLastError();
}

}  // namespace spillway::backends::cuda
