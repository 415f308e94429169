#include "backends/kernel.h"

#include "support/check.h"

namespace spillway::backends {

int64_t TensorRef::num_elements() const {
  SPILLWAY_CHECK(type != nullptr, "a tensor without a type");
  std::optional<int64_t> count = ir::NumElements(type->shape);
  SPILLWAY_CHECK(count.has_value(), "a tensor whose element count overflows");
  return *count;
}

}  // namespace spillway::backends
