// The reference kernel of each op, one function per OpKind, named after it
// (RunConv2d, RunBatchNormBackward, ...). Internal to backends/reference: the
// dispatcher (reference_kernels.cc) calls them; each group's file defines its
// ops and instantiates them for float and double.
#pragma once

#include "absl/status/status.h"
#include "backends/kernel.h"
#include "ir/op_kind.h"

namespace spillway::backends::reference {

#define SPILLWAY_DECLARE_REFERENCE_KERNEL(name, text) \
  template <typename T>                               \
  absl::Status Run##name(const KernelCall& call);
SPILLWAY_KERNEL_OPS(SPILLWAY_DECLARE_REFERENCE_KERNEL)
#undef SPILLWAY_DECLARE_REFERENCE_KERNEL

// Explicit instantiation for both element types, at the end of each group's file.
#define SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(name)               \
  template absl::Status Run##name<float>(const KernelCall& call); \
  template absl::Status Run##name<double>(const KernelCall& call)

}  // namespace spillway::backends::reference
