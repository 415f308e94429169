// The scratch the CUDA backend's own kernels need, as functions of shapes
// alone: the planner declares it per node before planning
// (program/workspaces.h) and the kernels (backends/cuda) carve it out of the
// workspace the Program reserves, so both read these same formulas.
//
// Plain C++17 with no dependencies, so that the CUDA kernels can include it;
// the kernels call the chunkings on the device too.
#pragma once

#include <cstdint>

#include "support/host_device.h"

namespace spillway::program {

// Batch norm sums each channel over chunks of rows, at least
// kBatchNormMinChunkRows each and at most kBatchNormMaxChunks of them (enough
// blocks to fill a large GPU, few partial sums to add); the chunking depends
// on the row count alone, so the order of every sum is fixed by the shape.
inline constexpr int64_t kBatchNormMinChunkRows = 512;
inline constexpr int64_t kBatchNormMaxChunks = 1024;

struct BatchNormChunking {
  int64_t rows_per_chunk = 1;
  int64_t chunks = 1;
};

SPILLWAY_HOST_DEVICE constexpr BatchNormChunking ChunkBatchNormRows(int64_t rows) {
  int64_t chunks = (rows + kBatchNormMinChunkRows - 1) / kBatchNormMinChunkRows;
  chunks = chunks < 1 ? 1 : (chunks > kBatchNormMaxChunks ? kBatchNormMaxChunks : chunks);
  BatchNormChunking chunking;
  chunking.rows_per_chunk = rows < 1 ? 1 : (rows + chunks - 1) / chunks;
  chunking.chunks = rows < 1 ? 1 : (rows + chunking.rows_per_chunk - 1) / chunking.rows_per_chunk;
  return chunking;
}

// Two double partial sums per (chunk, channel), then three floats per channel.
SPILLWAY_HOST_DEVICE constexpr int64_t BatchNormScratchBytes(int64_t rows, int64_t channels) {
  return ChunkBatchNormRows(rows).chunks * channels * 2 * 8 + 3 * channels * 4;
}

// The cross-entropy's rows are summed, and counted, in at most
// kLossMaxChunks chunks of consecutive rows (one thread each, the chunk's rows
// in order), then the chunks in order: a double sum and an int64 count per
// chunk, and the total count.
inline constexpr int64_t kLossMaxChunks = 4096;

SPILLWAY_HOST_DEVICE constexpr int64_t LossChunkRows(int64_t rows) {
  return rows <= kLossMaxChunks ? 1 : (rows + kLossMaxChunks - 1) / kLossMaxChunks;
}
SPILLWAY_HOST_DEVICE constexpr int64_t LossChunks(int64_t rows) {
  return rows < 1 ? 1 : (rows + LossChunkRows(rows) - 1) / LossChunkRows(rows);
}
SPILLWAY_HOST_DEVICE constexpr int64_t CrossEntropyScratchBytes(int64_t rows) {
  return LossChunks(rows) * (8 + 8) + 8;
}

}  // namespace spillway::program
