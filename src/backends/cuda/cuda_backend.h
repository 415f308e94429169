// The CUDA backend: the Program's three streams as CUDA streams, its events
// as CUDA events, the arena as one cudaMalloc, spilled tensors in pinned host
// memory, and kernels on the device: cuDNN convolutions, cuBLAS matrix
// products and its own kernels for the rest (cuda_ops.h), every one
// deterministic.
//
// It runs the ops of the ResNets (convolutions, batch norm, pooling, the
// loss, SGD and the element-wise ops) in f32. CheckSupported refuses every
// other node by name before a step starts, so a Program it cannot run fails
// at once with a message, not mid-step (docs/backends.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace spillway::backends::cuda {

struct CudaBackendOptions {
  int device = 0;  // the CUDA device ordinal
  // Convolutions on TF32 tensor cores (cuDNN's tensor-op math); matrix
  // products stay fp32 either way, as PyTorch's defaults.
  bool tf32 = false;
  // Only algorithms cuDNN reports deterministic (the default, which makes
  // every policy train bitwise like `none`); false takes cuDNN's first
  // choice whatever it is.
  bool deterministic = true;
  // The most workspace a convolution's algorithm may use, and no more than
  // the Program's workspace region where the plan reserved one (a GPU
  // hardware profile, program/workspaces.h); the kernels' scratch is that
  // region (and a convolution's padded copy of x the instruction's scratch
  // buffer), or else the backend's own, allocated before the first step,
  // outside the arena.
  int64_t workspace_limit = int64_t{64} << 20;
};

// The number of CUDA devices, or why there are none usable here (no driver,
// no device): one line, for `--backend cuda` and for tests that skip.
absl::StatusOr<int> CountDevices();

// Whether the CUDA backend runs `node` of `graph` (its CheckSupported): its
// op, f32 floating tensors, and the shapes and attributes its libraries take;
// Unimplemented saying what it lacks (for an op it has no kernel for, listing
// those it has). Needs no device.
absl::Status CudaSupports(const ir::Graph& graph, const ir::Node& node);
// Whether the CUDA backend has a kernel for `op` at all.
bool CudaHasKernel(ir::OpKind op);

class CudaBackend final : public Backend {
 public:
  // Fails with FailedPrecondition, saying why, where no usable device exists.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  int64_t alignment() const override { return 256; }  // cudaMalloc's

  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override;
  void FreeDevice(void* memory) override;
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override;
  void FreeHost(void* memory) override;
  AvailableMemory Available() const override;

  absl::Status CheckSupported(const ir::Graph& graph, const ir::Node& node) const override;
  absl::Status Prepare(const program::Program& program) override;
  absl::Status PrepareKernel(const KernelCall& call) override;
  std::string KernelSummary() const override;
  absl::Status RecordEvent(program::Stream stream, program::EventId event) override;
  absl::Status WaitEvent(program::Stream stream, program::EventId event) override;

  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override;
  absl::Status Copy(program::Stream stream, void* destination, const void* source,
                    int64_t bytes) override;
  absl::Status SynchronizeStream(program::Stream stream) override;
  absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) override;
  absl::Status Download(void* host_destination, const void* device_source, int64_t bytes) override;

 private:
  struct Handles;  // streams, events, library handles, behind a pointer: no CUDA types here
  explicit CudaBackend(int device);
  // Makes this backend's device current on the calling thread.
  absl::Status Use() const;

  int device_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace spillway::backends::cuda
