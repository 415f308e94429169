// A Backend that runs the reference kernels in float: slow and simple. Tests
// of the runtime use it where they need a real backend but not speed.
#pragma once

#include "backends/backend.h"

namespace spillway::backends::reference {

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override;
  void FreeDevice(void* memory) override;
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override;
  void FreeHost(void* memory) override;
  // Device and host memory are the machine's memory.
  AvailableMemory Available() const override;
  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override;
  absl::Status Copy(program::Stream stream, void* destination, const void* source,
                    int64_t bytes) override;
  absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) override;
  absl::Status Download(void* host_destination, const void* device_source, int64_t bytes) override;
};

}  // namespace spillway::backends::reference
