#include "backends/cpu/direct_kernels.h"

namespace spillway::backends::cpu {

// The builds of direct_kernels.cc (CMakeLists.txt compiles it once per
// instruction set).
namespace generic {
absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads);
}  // namespace generic
namespace avx512 {
absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads);
}  // namespace avx512

namespace {

bool HasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

}  // namespace

absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads) {
  static const bool avx512 = HasAvx512();
  return avx512 ? avx512::RunDirectKernel(call, threads) : generic::RunDirectKernel(call, threads);
}

}  // namespace spillway::backends::cpu
