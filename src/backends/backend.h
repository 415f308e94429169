// The backend interface: what the runtime (src/runtime) needs from a device to
// execute a Program. It is small on purpose; the CPU backend
// (backends/cpu), the reference backend (backends/reference, for tests) and
// the CUDA backend implement it.
//
// The runtime gives each of the Program's three streams its own host thread
// and calls the backend from that thread, in the stream's order. It keeps the
// Program's events itself, so a backend needs no event objects:
// - A synchronous backend (the CPU) finishes the work before `RunKernel` or
//   `Copy` returns.
// - An asynchronous backend (CUDA) enqueues the work on the stream's device
//   queue and returns; it must then implement `SynchronizeStream`, which the
//   runtime calls before it records an event that other streams wait on, and
//   at the end of a step.
//
// Memory: the runtime allocates device memory exactly once per Program, the
// arena, with the Program's planned size, and places every device buffer at
// its planned offset inside it. Host memory holds spilled tensors; on CUDA it
// must be pinned so that copies overlap with compute. Before allocating, the
// runtime checks the arena and the host pool against what the backend says is
// available, so an oversized Program fails with a message instead of being
// killed by the kernel.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/kernel.h"
#include "program/program.h"

namespace spillway::backends {

// The memory a Program may use on a backend, read before the runtime
// allocates anything: free device memory and available host memory in bytes
// (nullopt where unknown), and whether the two are one pool (the CPU
// backend's device memory is host memory).
struct AvailableMemory {
  std::optional<int64_t> device_bytes;
  std::optional<int64_t> host_bytes;
  bool shared = false;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;

  // Device memory, aligned to kTensorAlignment. The runtime makes one call
  // per Program, for the arena.
  virtual absl::StatusOr<void*> AllocateDevice(int64_t bytes) = 0;
  virtual void FreeDevice(void* memory) = 0;

  // Host memory for spilled tensors, aligned to kTensorAlignment.
  virtual absl::StatusOr<void*> AllocateHost(int64_t bytes) = 0;
  virtual void FreeHost(void* memory) = 0;

  // What is free now. Allocation alone does not tell: Linux overcommits, and
  // an arena larger than the machine fails only when its pages are touched,
  // by the kernel killing the process. Unknown by default.
  virtual AvailableMemory Available() const { return {}; }

  // Runs (or enqueues) one node on a stream.
  virtual absl::Status RunKernel(program::Stream stream, const KernelCall& call) = 0;

  // Copies between device and host memory on a copy stream (or within the
  // device, on the compute stream).
  virtual absl::Status Copy(program::Stream stream, void* destination, const void* source,
                            int64_t bytes) = 0;

  // Optional for synchronous backends: waits until the stream's enqueued work
  // is done and reports its first error.
  virtual absl::Status SynchronizeStream(program::Stream /*stream*/) { return absl::OkStatus(); }

  // Moves bytes between the host and device memory outside a step (the input
  // batch, parameters for checkpoints); blocking.
  virtual absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) = 0;
  virtual absl::Status Download(void* host_destination, const void* device_source,
                                int64_t bytes) = 0;
};

}  // namespace spillway::backends
