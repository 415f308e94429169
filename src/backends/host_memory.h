// Aligned allocation of plain host memory, shared by the CPU-side backends.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway::backends {

// `bytes` rounded up to kTensorAlignment and allocated at that alignment.
// ResourceExhausted, naming the size, when the allocation fails.
absl::StatusOr<void*> AllocateAligned(int64_t bytes, std::string_view what);
void FreeAligned(void* memory);

// The host memory this process can still use: /proc/meminfo's MemAvailable,
// lowered to the cgroup's limit less its usage where a cgroup (v2) sets one;
// nullopt where neither can be read.
std::optional<int64_t> AvailableHostBytes();

// ResourceExhausted, naming `what` and both sizes, when `bytes` is more than
// AvailableHostBytes(); OK when it fits or nothing can be read.
absl::Status CheckHostMemory(int64_t bytes, std::string_view what);

}  // namespace spillway::backends
