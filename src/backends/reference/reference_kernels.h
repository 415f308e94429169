// Reference kernels: one plain implementation of every op in the registry,
// written to be read and checked, not to be fast. They back the tests: the
// op-test harness compares every backend with them, and runs them in double
// precision for finite-difference gradient checks.
//
// `T` is the floating-point type of the op's f32 tensors: float to compare
// with a backend, double for gradient checks. Integer tensors (labels, token
// indices, Adam's step counter) keep their own dtype. Activations are NHWC;
// the layouts and semantics are those of docs/ops.md, and the kernel contract
// is backends/kernel.h's.
#pragma once

#include "absl/status/status.h"
#include "backends/kernel.h"

namespace spillway::backends::reference {

// Runs call.node with T as the element type of its f32 tensors. Errors: the
// node's op or attributes are not supported (named), or a tensor is missing.
template <typename T>
absl::Status RunReferenceKernel(const KernelCall& call);

extern template absl::Status RunReferenceKernel<float>(const KernelCall& call);
extern template absl::Status RunReferenceKernel<double>(const KernelCall& call);

}  // namespace spillway::backends::reference
