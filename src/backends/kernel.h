// What a kernel sees: the node it runs (op and attributes) and, for each of
// its inputs and outputs, the tensor's type and where its bytes are.
//
// Every backend (the reference kernels, the CPU backend, the CUDA backend)
// runs nodes through this one shape of call, and the op-test harness
// (backends/testing/op_test.h) compares them through it.
//
// Contract, for every kernel:
// - `inputs` and `outputs` follow the node's inputs and outputs in order.
// - An output with null `data` is not wanted: the kernel must not write it.
//   A recomputation asks only for the value it rebuilds.
// - An output may alias an input: in-place outputs (optimizer updates, the
//   running statistics of batch norm) always do, and an op whose registry
//   entry sets `may_overwrite_inputs` may be handed an input's buffer as its
//   first output. Kernels read element i of every input before writing
//   element i of the output.
// - A recomputed batch norm in training mode gets two extra inputs, its saved
//   mean and inverse standard deviation (after its own inputs, in the order
//   program::ReadValue gives; `SavedStatisticsOf` names them), and null
//   running statistics. It must normalize with the saved statistics, give
//   bitwise the output of the first run, and update nothing else.
// - Results are deterministic: the same inputs give bitwise the same outputs,
//   whatever the buffers' addresses (they are 64-byte aligned) and however
//   often the kernel runs, for a given thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "ir/graph.h"

namespace spillway::backends {

// Buffers handed to kernels start at multiples of this many bytes.
inline constexpr int64_t kTensorAlignment = 64;

struct TensorRef {
  const ir::TensorType* type = nullptr;
  void* data = nullptr;  // null: absent (an unwanted output, a skipped input)

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  int64_t num_elements() const;
};

// What changes from one run of a node to the next.
struct KernelContext {
  // The training step. Dropout mixes it into its seed, so the mask changes
  // every step and is the same when a step recomputes it.
  uint64_t step = 0;
};

struct KernelCall;

// A recomputed batch norm's saved statistics, the reads the Program puts
// after its inputs; nullopt for any other call. Kernels read them by name
// here, not by position.
struct SavedStatistics {
  const TensorRef* mean = nullptr;
  const TensorRef* inv_std = nullptr;
};
std::optional<SavedStatistics> SavedStatisticsOf(const KernelCall& call);

struct KernelCall {
  const ir::Node& node;
  std::span<const TensorRef> inputs;
  std::span<const TensorRef> outputs;
  KernelContext context;
  // The Program's kernel workspace (program/workspaces.h), device memory the
  // kernel may use as scratch while it runs, as large as the largest any node
  // of the step declared; null (0 bytes) where the Program reserves none and
  // the backend keeps its own scratch.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  // The instruction's own scratch buffer (program/workspaces.h: a
  // convolution's padded copy of x), device memory in the arena for this
  // kernel alone; null (0 bytes) where the Program gives it none.
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
};

}  // namespace spillway::backends
