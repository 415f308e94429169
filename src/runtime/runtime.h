// The runtime: executes a Program on a Backend, one training step at a time.
//
// - Three streams (compute, device-to-host, host-to-device), each a host
//   thread that runs its instructions in the Program's order. They
//   synchronise only through the Program's events.
// - Device memory is one arena, allocated once with exactly the Program's
//   arena size; every device buffer lives at its planned offset. Nothing else
//   is allocated on the device, so a Program whose arena fits the budget
//   cannot exceed it. The high-water mark (the end of the highest device
//   buffer resident at any time) is measured while the step runs; over a
//   whole step it reaches the end of the arena, which proves the placement.
//   What depends on timing is the peak of resident bytes.
// - Host buffers (spilled tensors) have no alloc or free instructions: a
//   block of the host pool is taken when the spill that fills it runs, and
//   given back after the last fetch that reads it. Blocks are reused from
//   step to step.
// - A step is transactional. Parameters and optimizer state are written only
//   by the update nodes, which run after every copy of the step has finished
//   (the runtime checks the Program allows it when it is created); before the
//   first of them runs, the compute stream confirms that no stream has failed.
//   Batch-norm running statistics, which the forward pass updates in place,
//   are saved before the step and restored if it fails. A failed step
//   returns the first error, and leaves every persistent value as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "program/program.h"

namespace spillway::runtime {

// Failures to inject into the next step, for tests: the n-th (0-based) copy
// of the step, or the n-th host allocation of the step, fails. -1: none.
struct FaultInjection {
  int64_t fail_copy = -1;
  int64_t fail_host_allocation = -1;
};

struct StepOptions {
  uint64_t step = 0;  // the training step: dropout's masks depend on it
  FaultInjection faults;
  // Values to copy out while the step runs, right after they are written
  // (gradients and other intermediates that the Program frees before the end).
  std::vector<ir::ValueId> capture;
  // Time every node the compute stream runs (not its recomputations): the
  // wall time of the backend's RunKernel call, which on the CPU backend is
  // the kernel's (it runs synchronously). `spillway profile` uses it.
  bool time_nodes = false;
  // Record when each instruction ran (StepResult::timeline).
  bool record_timeline = false;
};

struct StepResult {
  double seconds = 0;               // wall time of the whole step
  double compute_seconds = 0;       // compute stream busy
  double recompute_seconds = 0;     // of which re-running forward nodes
  int64_t bytes_to_host = 0;        // spilled
  int64_t bytes_to_device = 0;      // fetched back
  int64_t arena_high_water = 0;     // end of the highest resident device buffer
  int64_t peak_resident_bytes = 0;  // most device bytes resident at once
  int64_t peak_host_bytes = 0;      // most host-pool bytes in use at once
  std::map<ir::ValueId, std::vector<std::byte>> captured;
  // With StepOptions::time_nodes: seconds per node id, -1 for a node the
  // compute stream did not run as itself (a recomputation is not timed).
  std::vector<double> node_seconds;
  // With StepOptions::record_timeline: when each instruction of the Program
  // ran, in its order, on the host's clock: a compute or copy from just
  // before the backend is asked to run it to just after it returns, an alloc
  // when it is made, a free when its bytes are released (once the copies it
  // waits for have ended). On the CPU backend, whose kernels and copies run
  // on their stream's thread before the call returns, these are the
  // instruction's own times; a backend that only enqueues work would need
  // its device's timers instead.
  std::vector<program::InstructionTiming> timeline;
};

class Runtime {
 public:
  // Checks that the Program can be run here: its arena fits `budget_bytes`,
  // the arena and host pool fit the memory the backend has available, it
  // verifies (program/verifier.h), the backend runs every node and its
  // alignment divides the Program's. Then allocates the arena and prepares
  // the backend (its events).
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(const program::Program& program,
                                                         backends::Backend& backend,
                                                         int64_t budget_bytes);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The bytes of a persistent value (parameter, optimizer state, buffer, the
  // step's inputs) or of a graph output after a step. Sizes must match.
  absl::Status Write(ir::ValueId value, std::span<const std::byte> bytes);
  absl::Status Read(ir::ValueId value, std::span<std::byte> bytes) const;

  // Runs one step. On error, persistent values are as they were before it.
  absl::StatusOr<StepResult> RunStep(const StepOptions& options);

  const program::Program& program() const { return program_; }
  int64_t arena_bytes() const { return program_.arena_bytes; }

 private:
  class Impl;
  Runtime(const program::Program& program, std::unique_ptr<Impl> impl);
  const program::Program& program_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spillway::runtime
