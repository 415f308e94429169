// Direct loops for the memory-bound ops of CNN training that oneDNN does not
// fit: batch norm (ours must save the inverse standard deviation and
// recompute bitwise; oneDNN's saves the variance), max-pool backward (oneDNN's
// needs the forward's argmax workspace), residual adds, gradient
// accumulation, bias gradients, global average pooling and SGD.
//
// The loops run over NHWC tensors with the channel axis innermost, so they
// vectorize, and on OpenMP threads. Per-channel sums are accumulated in
// double over fixed blocks of rows and the blocks combined in order, so the
// results are the same bits for any thread count and any buffer address.
#pragma once

#include "absl/status/statusor.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/kernel.h"

namespace spillway::backends::cpu {

// Whether a direct kernel takes the call: an op it has a loop for, every
// tensor f32, and, for add and add_n, inputs of the output's shape, for
// reduce_sum, every axis but the last. The one test, for every build.
bool DirectKernelTakes(const KernelCall& call);

// Runs the call if DirectKernelTakes it; false, having done nothing,
// otherwise. `threads` is the OpenMP team size. Uses the
// build SelectDirectKernelIsa chooses (cpu_isa.h), once per process.
absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads);

// The same with a given build, which must be runnable (CanRunDirectKernelIsa):
// for the tests that every build gives the same bits.
absl::StatusOr<bool> RunDirectKernel(DirectKernelIsa isa, const KernelCall& call, int threads);

// The builds of direct_kernels.cc, one namespace per instruction set
// (CMakeLists.txt; avx2 and avx512 only where SPILLWAY_DIRECT_KERNELS_X86 is
// defined, on x86-64).
namespace generic {
absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads);
}  // namespace generic
namespace avx2 {
absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads);
}  // namespace avx2
namespace avx512 {
absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads);
}  // namespace avx512

}  // namespace spillway::backends::cpu
