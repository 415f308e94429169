#include "backends/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

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

namespace {

// The first integer in a small text file ("max" and unreadable: nullopt).
std::optional<int64_t> ReadInteger(const char* path) {
  std::ifstream file(path);
  int64_t value = 0;
  if (!(file >> value)) return std::nullopt;
  return value;
}

std::optional<int64_t> MemAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> AvailableHostBytes() {
  std::optional<int64_t> available = MemAvailableBytes();
  const std::optional<int64_t> limit = ReadInteger("/sys/fs/cgroup/memory.max");
  const std::optional<int64_t> usage = ReadInteger("/sys/fs/cgroup/memory.current");
  if (limit && usage) {
    const int64_t left = std::max<int64_t>(*limit - *usage, 0);
    available = available ? std::min(*available, left) : left;
  }
  return available;
}

}  // namespace spillway::backends

namespace spillway::backends {

absl::Status CheckHostMemory(int64_t bytes, std::string_view what) {
  const std::optional<int64_t> available = AvailableHostBytes();
  if (!available || bytes <= *available) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      fmt::format("{} need {} of host memory but this machine has {} available; lower the batch "
                  "or the model's sizes",
                  what, FormatBytes(bytes), FormatBytes(*available)));
}

}  // namespace spillway::backends
