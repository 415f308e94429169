// The instruction-set paths of the CPU backend, and the switches that choose
// them, so that every path can be run and tested on any machine that has the
// widest one.
//
// - oneDNN generates its kernels for the widest ISA that both the processor
//   and its own environment variable ONEDNN_MAX_CPU_ISA allow (SSE41, AVX2,
//   AVX512_CORE, ...). That choice is made once per process.
// - The direct kernels (direct_kernels.h) are compiled once per ISA: a
//   generic baseline x86-64 build, an AVX2 (+FMA) build and an AVX-512 build.
//   By default they follow oneDNN: the widest build whose instructions
//   oneDNN's ISA includes, so ONEDNN_MAX_CPU_ISA=AVX2 restricts the whole
//   backend to AVX2 and ONEDNN_MAX_CPU_ISA=SSE41 to the generic build.
//   SPILLWAY_DIRECT_KERNELS=generic|avx2|avx512 forces one build.
//
// Every build gives the same bits (contraction into FMA is off); oneDNN's
// paths need not, so bitwise reproducibility is per configuration: thread
// count, oneDNN's ISA and version (docs/training.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway::backends::cpu {

// The builds of the direct kernels, narrowest first.
enum class DirectKernelIsa { kGeneric, kAvx2, kAvx512 };

std::string_view DirectKernelIsaName(DirectKernelIsa isa);  // "generic", "avx2", "avx512"
absl::StatusOr<DirectKernelIsa> ParseDirectKernelIsa(std::string_view name);

// Whether this binary has the build and this processor can run it.
bool CanRunDirectKernelIsa(DirectKernelIsa isa);

// Every build CanRunDirectKernelIsa, narrowest first (generic always).
std::vector<DirectKernelIsa> RunnableDirectKernelIsas();

// The build RunDirectKernel uses: SPILLWAY_DIRECT_KERNELS when set, else the
// widest build within oneDNN's ISA. An error names a bad or unrunnable value.
absl::StatusOr<DirectKernelIsa> SelectDirectKernelIsa();

// Checks the environment variables that choose ISA paths (ONEDNN_MAX_CPU_ISA,
// SPILLWAY_DIRECT_KERNELS), so that a typo is a clear error before any kernel
// runs rather than a silent default: oneDNN ignores a value it does not know.
absl::Status CheckCpuIsaEnvironment();

// What a run of the CPU backend used, for reports next to a checksum.
struct CpuIsaPaths {
  std::string onednn_version;  // "2.6.3"
  std::string onednn_isa;      // oneDNN's effective ISA: "avx512_core", "avx2", "sse41", ...
  std::string direct_kernels;  // DirectKernelIsaName of the selected build
};
absl::StatusOr<CpuIsaPaths> DescribeCpuIsaPaths();

}  // namespace spillway::backends::cpu
