#include "backends/cpu/direct_kernels.h"

namespace spillway::backends::cpu {

bool ProcessorRunsAvx512() {
#ifdef SPILLWAY_DIRECT_KERNELS_AVX512
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;  // not built: not an x86-64 target
#endif
}

absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads) {
#ifdef SPILLWAY_DIRECT_KERNELS_AVX512
  static const bool avx512 = ProcessorRunsAvx512();
  if (avx512) return avx512::RunDirectKernel(call, threads);
#endif
  return generic::RunDirectKernel(call, threads);
}

}  // namespace spillway::backends::cpu
