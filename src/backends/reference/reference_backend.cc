#include "backends/reference/reference_backend.h"

#include <cstring>

#include "backends/host_memory.h"
#include "backends/reference/reference_kernels.h"

namespace spillway::backends::reference {

absl::StatusOr<void*> ReferenceBackend::AllocateDevice(int64_t bytes) {
  return AllocateAligned(bytes, "reference device memory");
}
void ReferenceBackend::FreeDevice(void* memory) { FreeAligned(memory); }

absl::StatusOr<void*> ReferenceBackend::AllocateHost(int64_t bytes) {
  return AllocateAligned(bytes, "reference host memory");
}
void ReferenceBackend::FreeHost(void* memory) { FreeAligned(memory); }

AvailableMemory ReferenceBackend::Available() const {
  const std::optional<int64_t> bytes = AvailableHostBytes();
  return {.device_bytes = bytes, .host_bytes = bytes, .shared = true};
}

absl::Status ReferenceBackend::RunKernel(program::Stream /*stream*/, const KernelCall& call) {
  return RunReferenceKernel<float>(call);
}

absl::Status ReferenceBackend::Copy(program::Stream /*stream*/, void* destination,
                                    const void* source, int64_t bytes) {
  std::memcpy(destination, source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status ReferenceBackend::Upload(void* device_destination, const void* host_source,
                                      int64_t bytes) {
  std::memcpy(device_destination, host_source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status ReferenceBackend::Download(void* host_destination, const void* device_source,
                                        int64_t bytes) {
  std::memcpy(host_destination, device_source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

}  // namespace spillway::backends::reference
