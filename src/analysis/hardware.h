// A hardware profile: what the cost model and the simulator need to know about
// a machine. Profiles are small JSON files (docs/hardware.md lists the fields
// and the sources of every preset's figures); presets are compiled in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway::analysis {

// Which arithmetic convolutions and matrix products use. fp32 is what the
// kernels compute today; the tensor-core modes are there so that plans for
// mixed-precision training can be made with the right compute rate.
enum class MathMode : uint8_t { kFp32, kTf32, kFp16 };
std::string_view MathModeName(MathMode mode);  // "fp32", "tf32", "fp16"
std::optional<MathMode> ParseMathMode(std::string_view name);

struct HardwareProfile {
  std::string name;
  std::string description;  // the part and how it is attached, with the source of the figures

  int64_t device_memory_bytes = 0;
  // Kept back from the default budget: CUDA context, library handles and
  // workspaces the plan does not see.
  int64_t reserved_bytes = 0;
  // The most workspace one kernel may use on this device's kernels (cuDNN's
  // convolutions; program/workspaces.h): the planner reserves the largest any
  // node declares at the top of the arena, inside the budget. 0: the kernels
  // keep their scratch themselves (the CPU backend). The GPU presets: 64 MiB.
  int64_t workspace_limit_bytes = 0;

  // Peak dense rates of convolutions and matrix products, FLOP/s; a mode the
  // part lacks is 0. `compute_efficiency` is the fraction of peak that large
  // kernels reach in practice in fp32; `tf32_efficiency` and
  // `fp16_efficiency` the same on the tensor cores (0: compute_efficiency).
  // The GPU presets' are fitted to published training throughput
  // (docs/hardware.md).
  double fp32_flops = 0;
  double tf32_flops = 0;
  double fp16_flops = 0;
  double compute_efficiency = 1.0;
  double tf32_efficiency = 0;
  double fp16_efficiency = 0;

  // Device memory bandwidth (bytes/s) for memory-bound ops, and the fraction
  // of it that streaming kernels reach.
  double memory_bandwidth = 0;
  double memory_efficiency = 1.0;

  double launch_overhead_s = 0;  // per kernel

  // The link to host memory, each way: sustained bytes/s and per-copy latency.
  double d2h_bandwidth = 0;
  double h2d_bandwidth = 0;
  double d2h_latency_s = 0;
  double h2d_latency_s = 0;
  // 2: the two directions overlap; 1: one copy at a time, either way.
  int copy_engines = 2;

  // The default budget: device memory less the reserve.
  int64_t default_budget_bytes() const { return device_memory_bytes - reserved_bytes; }
  // Peak rate for a math mode, 0 if the part has none.
  double peak_flops(MathMode mode) const;
  // The fraction of that peak large kernels reach in the mode.
  double efficiency(MathMode mode) const;

  bool operator==(const HardwareProfile&) const = default;
};

// Checks every field's range (positive rates, efficiencies in (0, 1], a
// reserve smaller than the memory, one or two copy engines). Parsing calls it;
// so does the cost model, since a profile built in code skips parsing.
absl::Status ValidateHardwareProfile(const HardwareProfile& profile);

// Parses a profile from JSON text. Errors name the missing or bad field.
absl::StatusOr<HardwareProfile> ParseHardwareProfile(std::string_view json_text);
std::string HardwareProfileToJson(const HardwareProfile& profile);

// The built-in profiles, in a stable order.
const std::vector<HardwareProfile>& HardwarePresets();

// The largest hardware profile file LoadHardwareProfile reads (a profile is
// a few hundred bytes).
inline constexpr int64_t kMaxHardwareProfileBytes = int64_t{1} << 20;

// A preset by name, or else a JSON file at that path. Errors list the presets.
absl::StatusOr<HardwareProfile> LoadHardwareProfile(std::string_view name_or_path);

}  // namespace spillway::analysis
