#include <cstdio>
#include <string>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/direct_kernels.h"
#include "support/check.h"

namespace spillway::backends::cpu {

absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads) {
  // Chosen once: oneDNN's ISA is fixed for the process, and the environment
  // was checked before the first kernel (CheckCpuIsaEnvironment).
  static const DirectKernelIsa isa = [] {
    absl::StatusOr<DirectKernelIsa> selected = SelectDirectKernelIsa();
    if (!selected.ok()) {
      std::fprintf(stderr, "spillway: %s\n", std::string(selected.status().message()).c_str());
    }
    SPILLWAY_CHECK(selected.ok(), "the ISA environment was checked (CheckCpuIsaEnvironment)");
    return *selected;
  }();
  return RunDirectKernel(isa, call, threads);
}

absl::StatusOr<bool> RunDirectKernel(DirectKernelIsa isa, const KernelCall& call, int threads) {
  SPILLWAY_CHECK(CanRunDirectKernelIsa(isa), "the direct-kernel build runs on this processor");
  switch (isa) {
#ifdef SPILLWAY_DIRECT_KERNELS_X86
    case DirectKernelIsa::kAvx512:
      return avx512::RunDirectKernel(call, threads);
    case DirectKernelIsa::kAvx2:
      return avx2::RunDirectKernel(call, threads);
#endif
    default:
      return generic::RunDirectKernel(call, threads);
  }
}

}  // namespace spillway::backends::cpu
