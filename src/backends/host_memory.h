// Aligned allocation of plain host memory, shared by the CPU-side backends.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace spillway::backends {

// `bytes` rounded up to kTensorAlignment and allocated at that alignment.
// ResourceExhausted, naming the size, when the allocation fails.
absl::StatusOr<void*> AllocateAligned(int64_t bytes, std::string_view what);
void FreeAligned(void* memory);

}  // namespace spillway::backends
