#include "backends/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/direct_kernels.h"
#include "backends/cpu/onednn_kernels.h"
#include "backends/host_memory.h"
#include "backends/reference/reference_kernels.h"
#include "support/status_macros.h"

namespace spillway::backends::cpu {

// Each call goes to the first of oneDNN, the direct kernels and the reference
// kernels that takes it.
class CpuBackend::Kernels {
 public:
  explicit Kernels(int threads) : threads_(std::max(1, threads)) {}

  absl::Status Run(const KernelCall& call) {
    // oneDNN (built with OpenMP) sizes its parallel regions by the calling
    // thread's OpenMP setting, and each stream has its own thread.
    omp_set_num_threads(threads_);
    ASSIGN_OR_RETURN(bool done, onednn_.Run(call));
    if (done) return absl::OkStatus();
    ASSIGN_OR_RETURN(done, RunDirectKernel(call, threads_));
    if (done) return absl::OkStatus();
    return reference::RunReferenceKernel<float>(call);
  }

  int64_t primitives_created() const { return onednn_.primitives_created(); }

 private:
  int threads_;
  OneDnnKernels onednn_;
};

CpuBackend::CpuBackend(CpuBackendOptions options)
    : options_(options), kernels_(std::make_unique<Kernels>(options.threads)) {}

CpuBackend::~CpuBackend() = default;

absl::StatusOr<void*> CpuBackend::AllocateDevice(int64_t bytes) {
  return AllocateAligned(bytes, "cpu device arena");
}

void CpuBackend::FreeDevice(void* memory) { FreeAligned(memory); }

absl::StatusOr<void*> CpuBackend::AllocateHost(int64_t bytes) {
  return AllocateAligned(bytes, "cpu host memory");
}

void CpuBackend::FreeHost(void* memory) { FreeAligned(memory); }

absl::Status CpuBackend::RunKernel(program::Stream /*stream*/, const KernelCall& call) {
  return kernels_->Run(call);
}

absl::Status CpuBackend::Copy(program::Stream /*stream*/, void* destination, const void* source,
                              int64_t bytes) {
  std::memcpy(destination, source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuBackend::Upload(void* device_destination, const void* host_source, int64_t bytes) {
  std::memcpy(device_destination, host_source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuBackend::Download(void* host_destination, const void* device_source,
                                  int64_t bytes) {
  std::memcpy(host_destination, device_source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

int64_t CpuBackend::primitives_created() const { return kernels_->primitives_created(); }

}  // namespace spillway::backends::cpu
