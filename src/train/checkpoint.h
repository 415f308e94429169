// Checkpoints: the whole persistent state of a training run (parameters,
// optimizer state, batch-norm running statistics), the step, and the seed that
// with the step determines every random number still to come (data, dropout).
//
// File format (docs/training.md), all integers little-endian:
//   "SPILLWAY-CKPT" (13 bytes), u32 version (1),
//   u64 model fingerprint, u64 step, u64 seed, u32 tensor count,
//   per tensor: string name, string kind ("param", "buffer", "state"),
//     string dtype ("f32", "i64"), u32 rank, i64 dims[rank], u64 byte count,
//     bytes (a string is a u32 length and its bytes),
//   u64 FNV-1a 64 of every byte before it.
// A checkpoint is written through WriteFileAtomically (support/file_io.h):
// a temporary file, flushed to disk and renamed over <path>, so a crash
// leaves either the old checkpoint or the new one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::train {

inline constexpr uint32_t kCheckpointVersion = 1;

struct CheckpointTensor {
  std::string name;
  ir::ValueKind kind = ir::ValueKind::kParameter;
  ir::TensorType type;
  std::vector<std::byte> bytes;
};

struct Checkpoint {
  uint64_t fingerprint = 0;
  int64_t step = 0;  // steps completed
  uint64_t seed = 0;
  std::vector<CheckpointTensor> tensors;  // in value id order
};

// FNV-1a 64, continuing from `hash` (start with kFnvOffset).
inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
uint64_t Fnv1a(std::span<const std::byte> bytes, uint64_t hash = kFnvOffset);

// The values a checkpoint holds: every graph input of kind parameter, buffer
// or optimizer state, in id order.
std::vector<ir::ValueId> PersistentValues(const ir::Graph& graph);

// A hash of the names, kinds and types of the persistent values: equal for
// the same model, options and optimizer.
uint64_t ModelFingerprint(const ir::Graph& graph);

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& checkpoint);

// The largest checkpoint ReadCheckpoint reads: 64 GiB of parameters,
// buffers and optimizer state.
inline constexpr int64_t kMaxCheckpointBytes = int64_t{64} << 30;

// Errors name the file and the problem: missing, not a checkpoint, another
// version, truncated, corrupt (checksum), malformed.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// The same from a checkpoint's bytes; `path` names it in errors. Any bytes
// give a Checkpoint or an error, never a read outside them (fuzzed:
// src/train/fuzz).
absl::StatusOr<Checkpoint> ParseCheckpoint(std::string_view contents, const std::string& path);

// FailedPrecondition naming the first difference (a tensor missing, extra, or
// of another type) if the checkpoint was not saved from this graph.
absl::Status CheckCheckpointMatches(const Checkpoint& checkpoint, const ir::Graph& graph);

}  // namespace spillway::train
