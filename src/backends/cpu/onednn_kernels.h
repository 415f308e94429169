// The ops the CPU backend hands to oneDNN: convolution (forward and both
// backward ops), pooling (forward, and average pooling's backward), ReLU and
// GELU (forward and backward), matmul and linear (forward and the weight
// gradient).
//
// Each node shape gets a Plan, built once and cached under a key of the op,
// its attributes and its tensor types: the main primitive plus the reorders
// between our layouts (NHWC activations, OHWI weights) and the layouts the
// primitive prefers, with the reordered copies in a per-thread workspace.
// Creating oneDNN primitives costs milliseconds (JIT code generation), so a
// training step must find every plan in the cache after the first step.
//
// Threads: Debian's oneDNN 2.6 uses OpenMP and takes its thread count from
// omp_get_max_threads() of the calling thread, which the backend sets.
//
// Determinism: oneDNN's CPU primitives are run-to-run deterministic for a
// fixed shape and thread count. That includes the weight gradient of
// convolution, whose per-thread partial sums are reduced in a fixed order
// set by the thread count alone, and the matmul (its K-split partitions
// depend only on the shape and the thread count).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "backends/kernel.h"
#include "dnnl.hpp"

namespace spillway::backends::cpu {

// A node shape's primitives and reorders (defined in onednn_kernels.cc).
struct OneDnnPlan;

class OneDnnKernels {
 public:
  OneDnnKernels();
  ~OneDnnKernels();

  // Runs the call with oneDNN. False, having done nothing, when oneDNN does
  // not take this op, dtype or attribute combination (the caller falls back to
  // the reference kernel); an error when a primitive fails while it runs.
  absl::StatusOr<bool> Run(const KernelCall& call);

  // oneDNN primitives created so far (main primitives and reorders).
  int64_t primitives_created() const;

  // The implementation oneDNN runs the call's node shape with, as oneDNN names
  // it ("jit_1x1:avx2"), building the plan if needed; empty when oneDNN does
  // not take it. For tests that a defective implementation is avoided.
  std::string Implementation(const KernelCall& call);

 private:
  // The cached plan for the call's node shape, building it on first use; null
  // when oneDNN does not take it (remembered too, so it is tried once).
  std::shared_ptr<const OneDnnPlan> FindOrBuild(const KernelCall& call);
  std::shared_ptr<const OneDnnPlan> Build(const KernelCall& call);

  dnnl::engine engine_;
  mutable std::mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<const OneDnnPlan>> plans_;
  int64_t primitives_created_ = 0;
};

}  // namespace spillway::backends::cpu
