#include "backends/reference/reference_kernels.h"

#include "backends/reference/ops.h"

namespace spillway::backends::reference {

template <typename T>
absl::Status RunReferenceKernel(const KernelCall& call) {
  switch (call.node.op) {
#define SPILLWAY_DISPATCH_REFERENCE_KERNEL(name, text) \
  case ir::OpKind::k##name:                            \
    return Run##name<T>(call);
    SPILLWAY_ALL_OPS(SPILLWAY_DISPATCH_REFERENCE_KERNEL)
#undef SPILLWAY_DISPATCH_REFERENCE_KERNEL
  }
  return absl::InternalError("an op kind outside the registry");
}

template absl::Status RunReferenceKernel<float>(const KernelCall& call);
template absl::Status RunReferenceKernel<double>(const KernelCall& call);

}  // namespace spillway::backends::reference
