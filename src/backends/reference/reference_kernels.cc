#include "backends/reference/reference_kernels.h"

#include "backends/reference/ops.h"
#include "fmt/format.h"

namespace spillway::backends::reference {

template <typename T>
absl::Status RunReferenceKernel(const KernelCall& call) {
  switch (call.node.op) {
#define SPILLWAY_DISPATCH_REFERENCE_KERNEL(name, text) \
  case ir::OpKind::k##name:                            \
    return Run##name<T>(call);
    SPILLWAY_KERNEL_OPS(SPILLWAY_DISPATCH_REFERENCE_KERNEL)
#undef SPILLWAY_DISPATCH_REFERENCE_KERNEL
#define SPILLWAY_REFUSE_PLANNING_OP(name, text) case ir::OpKind::k##name:
    SPILLWAY_PLANNING_OPS(SPILLWAY_REFUSE_PLANNING_OP)
#undef SPILLWAY_REFUSE_PLANNING_OP
    return absl::FailedPreconditionError(
        fmt::format("node '{}': {} is a planning-only op and has no kernel", call.node.name,
                    ir::OpName(call.node.op)));
  }
  return absl::InternalError("an op kind outside the registry");
}

template absl::Status RunReferenceKernel<float>(const KernelCall& call);
template absl::Status RunReferenceKernel<double>(const KernelCall& call);

}  // namespace spillway::backends::reference
