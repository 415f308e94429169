#include "backends/kernel.h"

#include "ir/op_kind.h"
#include "support/check.h"

namespace spillway::backends {

std::optional<SavedStatistics> SavedStatisticsOf(const KernelCall& call) {
  const size_t inputs = call.node.inputs.size();
  if (call.node.op != ir::OpKind::kBatchNorm || call.inputs.size() != inputs + 2) {
    return std::nullopt;
  }
  return SavedStatistics{.mean = &call.inputs[inputs], .inv_std = &call.inputs[inputs + 1]};
}

int64_t TensorRef::num_elements() const {
  SPILLWAY_CHECK(type != nullptr, "a tensor without a type");
  std::optional<int64_t> count = ir::NumElements(type->shape);
  SPILLWAY_CHECK(count.has_value(), "a tensor whose element count overflows");
  return *count;
}

}  // namespace spillway::backends
