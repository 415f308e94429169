#include "backends/cpu/direct_kernels.h"

namespace spillway::backends::cpu {

bool ProcessorRunsAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads) {
  static const bool avx512 = ProcessorRunsAvx512();
  return avx512 ? avx512::RunDirectKernel(call, threads) : generic::RunDirectKernel(call, threads);
}

}  // namespace spillway::backends::cpu
