// The backend interface: what the runtime (src/runtime) needs from a device to
// execute a Program. It is small on purpose; the CPU backend
// (backends/cpu), the reference backend (backends/reference, for tests) and
// the CUDA backend implement it.
//
// Streams and events. The runtime gives each of the Program's three streams
// its own host thread and calls the backend from that thread, in the
// stream's order. Where the Program orders two streams by an event, the
// runtime calls `RecordEvent` on the recording stream and, once that call
// has returned, `WaitEvent` on the waiting one; the host thread of the
// waiting stream waits only for the record to be issued, never for the
// device work before it:
// - A synchronous backend (the CPU) finishes the work before `RunKernel` or
//   `Copy` returns, so an event is complete when it is recorded: the
//   defaults, which do nothing, are right for it.
// - An asynchronous backend (CUDA) enqueues the work on the stream's device
//   queue and returns; it implements the events with device events (made in
//   `Prepare`, one per Program event), and `SynchronizeStream`, which the
//   runtime calls only where the host itself must wait: before capturing a
//   value, before giving host memory back to its pool, at the commit point
//   and at the end of a step.
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
#include <string>
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

  // The alignment the backend's kernels need of every device buffer; a
  // Program whose alignment (program.h) is not a multiple of it is refused.
  virtual int64_t alignment() const { return kTensorAlignment; }

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

  // Whether the backend can run `node` of `graph` (its op, dtypes and
  // attributes): Unimplemented saying what it lacks. The runtime asks for
  // every node a Program computes before allocating anything, so an
  // unsupported op is refused by name, not met mid-step. The CPU and
  // reference backends run every op (each has a reference kernel, checked at
  // compile time), so the default says yes.
  virtual absl::Status CheckSupported(const ir::Graph& /*graph*/, const ir::Node& /*node*/) const {
    return absl::OkStatus();
  }

  // Called once per Program, after the arena is allocated and before any
  // step: make the Program's events (program.num_events of them), caches,
  // handles. Nothing to do by default.
  virtual absl::Status Prepare(const program::Program& /*program*/) { return absl::OkStatus(); }

  // Called after Prepare once for each of the Program's kernel calls (each
  // compute and recompute instruction), as RunKernel will get it but for the
  // step: choose what runs it and build what that needs (the CPU backend
  // builds its oneDNN primitives here), so that choice is made, and can be
  // reported, before the first step. Nothing to do by default.
  virtual absl::Status PrepareKernel(const KernelCall& /*call*/) { return absl::OkStatus(); }

  // One line on what runs the calls PrepareKernel has seen for the last
  // Program, for a person to read ("oneDNN 97 calls, direct loops 122,
  // reference 0"); empty where there is nothing to say.
  virtual std::string KernelSummary() const { return {}; }

  // Marks the point in `stream` that `event` stands for: the event completes
  // when the stream's work issued so far is done.
  virtual absl::Status RecordEvent(program::Stream /*stream*/, program::EventId /*event*/) {
    return absl::OkStatus();
  }
  // Makes `stream`'s work issued from now on wait, on the device, for
  // `event`, whose RecordEvent has returned. The host does not wait.
  virtual absl::Status WaitEvent(program::Stream /*stream*/, program::EventId /*event*/) {
    return absl::OkStatus();
  }

  // Runs (or enqueues) one node on a stream.
  virtual absl::Status RunKernel(program::Stream stream, const KernelCall& call) = 0;

  // Copies between device and host memory on a copy stream (or within the
  // device, on the compute stream).
  virtual absl::Status Copy(program::Stream stream, void* destination, const void* source,
                            int64_t bytes) = 0;

  // Optional for synchronous backends: the host waits until the stream's
  // enqueued work is done; reports its first error.
  virtual absl::Status SynchronizeStream(program::Stream /*stream*/) { return absl::OkStatus(); }

  // Moves bytes between the host and device memory outside a step (the input
  // batch, parameters for checkpoints); blocking.
  virtual absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) = 0;
  virtual absl::Status Download(void* host_destination, const void* device_source,
                                int64_t bytes) = 0;
};

}  // namespace spillway::backends
