#include "backends/host_memory.h"

#include <algorithm>
#include <cstdlib>

#include "backends/kernel.h"
#include "fmt/format.h"
#include "support/units.h"

namespace spillway::backends {

absl::StatusOr<void*> AllocateAligned(int64_t bytes, std::string_view what) {
  if (bytes < 0)
    return absl::InvalidArgumentError(fmt::format("{}: negative size {}", what, bytes));
  const int64_t rounded =
      (std::max<int64_t>(bytes, 1) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* memory =
      std::aligned_alloc(static_cast<size_t>(kTensorAlignment), static_cast<size_t>(rounded));
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(
        fmt::format("{}: could not allocate {} of host memory", what, FormatBytes(bytes)));
  }
  return memory;
}

void FreeAligned(void* memory) { std::free(memory); }

}  // namespace spillway::backends
