// The CUDA backend: the Program's three streams as CUDA streams, its events
// as CUDA events, the arena as one cudaMalloc, spilled tensors in pinned host
// memory, and kernels on the device.
//
// What it runs so far: memory, streams, events and copies in full, and the
// element-wise kernels in cuda_kernels.cu (f32, same-shape operands).
// CheckSupported refuses every other node by name before a step starts, so a
// Program it cannot run fails at once with a message, not mid-step. cuDNN
// convolutions, cuBLAS matrix products and the remaining ops are the next
// step (docs/backends.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace spillway::backends::cuda {

struct CudaBackendOptions {
  int device = 0;  // the CUDA device ordinal
};

// The number of CUDA devices, or why there are none usable here (no driver,
// no device): one line, for `--backend cuda` and for tests that skip.
absl::StatusOr<int> CountDevices();

// Whether the CUDA backend has a kernel for `node` (its CheckSupported):
// Unimplemented, listing what it runs, if not. Needs no device.
absl::Status CudaSupports(const ir::Node& node);

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
  absl::Status RecordEvent(program::Stream stream, program::EventId event) override;
  absl::Status WaitEvent(program::Stream stream, program::EventId event) override;

  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override;
  absl::Status Copy(program::Stream stream, void* destination, const void* source,
                    int64_t bytes) override;
  absl::Status SynchronizeStream(program::Stream stream) override;
  absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) override;
  absl::Status Download(void* host_destination, const void* device_source, int64_t bytes) override;

 private:
  struct Handles;  // the CUDA streams and events, behind a pointer: no CUDA types here
  explicit CudaBackend(int device);
  // Makes this backend's device current on the calling thread.
  absl::Status Use() const;

  int device_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace spillway::backends::cuda
