#include "analysis/hardware.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <system_error>
#include <type_traits>
#include <variant>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "support/check.h"
#include "support/file_io.h"
#include "support/json_text.h"
#include "support/status_macros.h"

namespace spillway::analysis {
namespace {

// Ordered so that a profile written out reads in the order of the struct.
using Json = nlohmann::ordered_json;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// The values a field accepts.
enum class Range : uint8_t {
  kText,
  kPositive,
  kNonNegative,
  kFraction,         // (0, 1]
  kUnsetOrFraction,  // 0 (unset), or (0, 1]
  kCopyEngines,
};

std::string_view RangeText(Range range) {
  switch (range) {
    case Range::kText:
      return "text";
    case Range::kPositive:
      return "positive";
    case Range::kNonNegative:
      return "zero or more";
    case Range::kFraction:
      return "in (0, 1]";
    case Range::kUnsetOrFraction:
      return "0 (unset) or in (0, 1]";
    case Range::kCopyEngines:
      return "1 or 2";
  }
  return "?";
}

using Member = std::variant<std::string HardwareProfile::*, int64_t HardwareProfile::*,
                            double HardwareProfile::*, int HardwareProfile::*>;

struct Field {
  std::string_view name;
  Member member;
  std::string_view unit;
  Range range;
  bool required;
};

// One table drives parsing, validation and writing, so the three cannot
// disagree about which fields exist. Rates default to "none", efficiencies to
// 1, overheads to 0: a minimal profile names the memory and the bandwidths.
const std::vector<Field>& Fields() {
  static const std::vector<Field>* const fields = new std::vector<Field>{
      {"name", &HardwareProfile::name, "text", Range::kText, true},
      {"description", &HardwareProfile::description, "text", Range::kText, false},
      {"device_memory_bytes", &HardwareProfile::device_memory_bytes, "bytes", Range::kPositive,
       true},
      {"reserved_bytes", &HardwareProfile::reserved_bytes, "bytes", Range::kNonNegative, false},
      {"workspace_limit_bytes", &HardwareProfile::workspace_limit_bytes, "bytes",
       Range::kNonNegative, false},
      {"fp32_flops", &HardwareProfile::fp32_flops, "FLOP/s", Range::kPositive, true},
      {"tf32_flops", &HardwareProfile::tf32_flops, "FLOP/s", Range::kNonNegative, false},
      {"fp16_flops", &HardwareProfile::fp16_flops, "FLOP/s", Range::kNonNegative, false},
      {"compute_efficiency", &HardwareProfile::compute_efficiency, "fraction of peak",
       Range::kFraction, false},
      {"tf32_efficiency", &HardwareProfile::tf32_efficiency, "fraction of peak",
       Range::kUnsetOrFraction, false},
      {"fp16_efficiency", &HardwareProfile::fp16_efficiency, "fraction of peak",
       Range::kUnsetOrFraction, false},
      {"memory_bandwidth", &HardwareProfile::memory_bandwidth, "bytes/s", Range::kPositive, true},
      {"memory_efficiency", &HardwareProfile::memory_efficiency, "fraction of peak",
       Range::kFraction, false},
      {"launch_overhead_s", &HardwareProfile::launch_overhead_s, "seconds", Range::kNonNegative,
       false},
      {"d2h_bandwidth", &HardwareProfile::d2h_bandwidth, "bytes/s", Range::kPositive, true},
      {"h2d_bandwidth", &HardwareProfile::h2d_bandwidth, "bytes/s", Range::kPositive, true},
      {"d2h_latency_s", &HardwareProfile::d2h_latency_s, "seconds", Range::kNonNegative, false},
      {"h2d_latency_s", &HardwareProfile::h2d_latency_s, "seconds", Range::kNonNegative, false},
      {"copy_engines", &HardwareProfile::copy_engines, "engines", Range::kCopyEngines, false},
  };
  return *fields;
}

std::string FieldNames() {
  std::vector<std::string_view> names;
  for (const Field& field : Fields()) names.push_back(field.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string PresetNames() {
  std::vector<std::string_view> names;
  for (const HardwareProfile& preset : HardwarePresets()) names.push_back(preset.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// A JSON value as it appears in a message, cut short so that a whole object
// pasted by mistake does not flood the terminal.
std::string Quote(const Json& value) {
  constexpr size_t kMaxChars = 40;
  std::string text = value.dump();
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

absl::Status OutOfRange(const Field& field, std::string_view got) {
  return absl::InvalidArgumentError(fmt::format("field '{}' must be {} ({}), got {}", field.name,
                                                RangeText(field.range), field.unit, got));
}

bool InRange(Range range, double value) {
  switch (range) {
    case Range::kText:
      return true;
    case Range::kPositive:
      return value > 0;
    case Range::kNonNegative:
      return value >= 0;
    case Range::kFraction:
      return value > 0 && value <= 1;
    case Range::kUnsetOrFraction:
      return value >= 0 && value <= 1;
    case Range::kCopyEngines:
      return value == 1 || value == 2;
  }
  return false;
}

absl::Status CheckField(const HardwareProfile& profile, const Field& field) {
  return std::visit(
      [&](auto member) -> absl::Status {
        const auto& value = profile.*member;
        using T = std::remove_cvref_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (field.name == "name" && value.empty()) {
            return absl::InvalidArgumentError("field 'name' must not be empty");
          }
          return absl::OkStatus();
        } else {
          const double number = static_cast<double>(value);
          if (!std::isfinite(number) || !InRange(field.range, number)) {
            return OutOfRange(field, fmt::format("{}", value));
          }
          return absl::OkStatus();
        }
      },
      field.member);
}

// Byte counts may be written 16e9 as well as 16000000000, but must be whole.
absl::StatusOr<int64_t> ReadWholeNumber(const Field& field, const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          fmt::format("field '{}' is too large for 64 bits, got {}", field.name, Quote(value)));
    }
    return static_cast<int64_t>(number);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double number = value.get<double>();
    // 2^63 is the first double past int64's range.
    constexpr double kLimit = 9223372036854775808.0;
    if (std::isfinite(number) && std::floor(number) == number) {
      if (number < kLimit && number >= -kLimit) return static_cast<int64_t>(number);
      return absl::InvalidArgumentError(
          fmt::format("field '{}' is too large for 64 bits, got {}", field.name, Quote(value)));
    }
  }
  return absl::InvalidArgumentError(fmt::format("field '{}' must be a whole number ({}), got {}",
                                                field.name, field.unit, Quote(value)));
}

absl::Status ReadField(const Field& field, const Json& value, HardwareProfile& profile) {
  return std::visit(
      [&](auto member) -> absl::Status {
        auto& target = profile.*member;
        using T = std::remove_cvref_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!value.is_string()) {
            return absl::InvalidArgumentError(
                fmt::format("field '{}' must be a string, got {}", field.name, Quote(value)));
          }
          target = value.get<std::string>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!value.is_number()) {
            return absl::InvalidArgumentError(fmt::format(
                "field '{}' must be a number ({}), got {}", field.name, field.unit, Quote(value)));
          }
          target = value.get<double>();
        } else {
          ASSIGN_OR_RETURN(const int64_t number, ReadWholeNumber(field, value));
          if (number < std::numeric_limits<T>::min() || number > std::numeric_limits<T>::max()) {
            return OutOfRange(field, Quote(value));
          }
          target = static_cast<T>(number);
        }
        return absl::OkStatus();
      },
      field.member);
}

// Parsing without the "hardware profile" context, which the callers add.
absl::StatusOr<HardwareProfile> ParseProfile(std::string_view json_text) {
  ASSIGN_OR_RETURN(const Json root, ParseStrictJson(json_text));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        fmt::format("must be a JSON object of fields, got {}", Quote(root)));
  }
  // Unknown fields are errors: a misspelt optional field would otherwise be
  // dropped silently and its default used.
  for (const auto& item : root.items()) {
    bool known = false;
    for (const Field& field : Fields()) known = known || field.name == item.key();
    if (!known) {
      return absl::InvalidArgumentError(
          fmt::format("unknown field '{}'; the fields are {}", item.key(), FieldNames()));
    }
  }
  HardwareProfile profile;
  for (const Field& field : Fields()) {
    const auto it = root.find(std::string(field.name));
    if (it == root.end()) {
      if (field.required) {
        return absl::InvalidArgumentError(
            fmt::format("missing field '{}' ({})", field.name, field.unit));
      }
      continue;
    }
    RETURN_IF_ERROR(ReadField(field, *it, profile));
  }
  RETURN_IF_ERROR(ValidateHardwareProfile(profile));
  return profile;
}

// Figures and their sources are in docs/hardware.md; keep the two in step.
// The GPU presets share a derating where nothing was measured: large
// cuDNN/cuBLAS kernels reach roughly 60-70% of the datasheet peak, streaming
// kernels about 80% of the HBM bandwidth, a kernel launch costs about 5 us and
// a copy about 10 us. The efficiencies that published ResNet-50 training
// throughput pins down (the V100's fp32, every tf32 and fp16 one) are fitted
// to it by bench/gpu_calibration.py and checked there on other workloads (the
// V100 PCIe preset borrows the SXM2 fits; GH200 has no published figure and
// keeps the shared derating for every mode).
std::vector<HardwareProfile> MakePresets() {
  constexpr double kGpuComputeEfficiency = 0.65;
  constexpr double kV100Fp32Efficiency = 0.809;
  constexpr double kGpuMemoryEfficiency = 0.8;
  constexpr double kGpuLaunchOverhead = 5e-6;
  constexpr double kCopyLatency = 10e-6;
  // What the CUDA backend lets one convolution use (CudaBackendOptions).
  constexpr int64_t kGpuWorkspaceLimit = 64 * kMiB;
  std::vector<HardwareProfile> presets;
  presets.push_back({
      .name = "v100-16g-nvlink2",
      .description = "NVIDIA V100 SXM2 16 GB in an IBM Power System AC922, NVLink 2.0 to "
                     "POWER9 (75 GB/s each way nominal, about 68 measured); the machine class "
                     "of Imai et al., IEEE BigData 2020. NVIDIA V100 datasheet",
      .device_memory_bytes = 16160 * kMiB,
      .reserved_bytes = 512 * kMiB,
      .workspace_limit_bytes = kGpuWorkspaceLimit,
      .fp32_flops = 15.7e12,
      .tf32_flops = 0,
      .fp16_flops = 125e12,
      .compute_efficiency = kV100Fp32Efficiency,
      .fp16_efficiency = 0.474,
      .memory_bandwidth = 900e9,
      .memory_efficiency = kGpuMemoryEfficiency,
      .launch_overhead_s = kGpuLaunchOverhead,
      .d2h_bandwidth = 68e9,
      .h2d_bandwidth = 68e9,
      .d2h_latency_s = kCopyLatency,
      .h2d_latency_s = kCopyLatency,
      .copy_engines = 2,
  });
  presets.push_back({
      .name = "v100-16g-pcie3",
      .description = "NVIDIA V100 PCIe 16 GB on PCIe 3.0 x16 (15.75 GB/s each way nominal, "
                     "about 12 sustained). NVIDIA V100 datasheet",
      .device_memory_bytes = 16160 * kMiB,
      .reserved_bytes = 512 * kMiB,
      .workspace_limit_bytes = kGpuWorkspaceLimit,
      .fp32_flops = 14e12,
      .tf32_flops = 0,
      .fp16_flops = 112e12,
      .compute_efficiency = kV100Fp32Efficiency,
      .fp16_efficiency = 0.474,
      .memory_bandwidth = 900e9,
      .memory_efficiency = kGpuMemoryEfficiency,
      .launch_overhead_s = kGpuLaunchOverhead,
      .d2h_bandwidth = 12e9,
      .h2d_bandwidth = 12e9,
      .d2h_latency_s = kCopyLatency,
      .h2d_latency_s = kCopyLatency,
      .copy_engines = 2,
  });
  presets.push_back({
      .name = "a100-40g-pcie4",
      .description = "NVIDIA A100 PCIe 40 GB on PCIe 4.0 x16 (31.5 GB/s each way nominal, "
                     "about 25 sustained). NVIDIA A100 datasheet",
      .device_memory_bytes = 40536 * kMiB,
      .reserved_bytes = 1 * kGiB,
      .workspace_limit_bytes = kGpuWorkspaceLimit,
      .fp32_flops = 19.5e12,
      .tf32_flops = 156e12,
      .fp16_flops = 312e12,
      .compute_efficiency = kGpuComputeEfficiency,
      .tf32_efficiency = 0.275,
      .fp16_efficiency = 0.328,
      .memory_bandwidth = 1555e9,
      .memory_efficiency = kGpuMemoryEfficiency,
      .launch_overhead_s = kGpuLaunchOverhead,
      .d2h_bandwidth = 25e9,
      .h2d_bandwidth = 25e9,
      .d2h_latency_s = kCopyLatency,
      .h2d_latency_s = kCopyLatency,
      .copy_engines = 2,
  });
  presets.push_back({
      .name = "h100-80g-pcie5",
      .description = "NVIDIA H100 PCIe 80 GB on PCIe 5.0 x16 (63 GB/s each way nominal, "
                     "about 50 sustained). NVIDIA H100 datasheet",
      .device_memory_bytes = 81559 * kMiB,
      .reserved_bytes = 1 * kGiB,
      .workspace_limit_bytes = kGpuWorkspaceLimit,
      .fp32_flops = 51e12,
      .tf32_flops = 378e12,
      .fp16_flops = 756.5e12,
      .compute_efficiency = kGpuComputeEfficiency,
      .tf32_efficiency = 0.137,
      .fp16_efficiency = 0.09,
      .memory_bandwidth = 2.0e12,
      .memory_efficiency = kGpuMemoryEfficiency,
      .launch_overhead_s = kGpuLaunchOverhead,
      .d2h_bandwidth = 50e9,
      .h2d_bandwidth = 50e9,
      .d2h_latency_s = kCopyLatency,
      .h2d_latency_s = kCopyLatency,
      .copy_engines = 2,
  });
  presets.push_back({
      .name = "h200-141g-pcie5",
      .description = "NVIDIA H200 SXM 141 GB (HGX H200) with its PCIe 5.0 x16 host link "
                     "(63 GB/s each way nominal, about 50 sustained). NVIDIA H200 datasheet",
      .device_memory_bytes = 143771 * kMiB,
      .reserved_bytes = 1 * kGiB,
      .workspace_limit_bytes = kGpuWorkspaceLimit,
      .fp32_flops = 67e12,
      .tf32_flops = 494.5e12,
      .fp16_flops = 989.5e12,
      .compute_efficiency = kGpuComputeEfficiency,
      .tf32_efficiency = 0.167,
      .fp16_efficiency = 0.098,
      .memory_bandwidth = 4.8e12,
      .memory_efficiency = kGpuMemoryEfficiency,
      .launch_overhead_s = kGpuLaunchOverhead,
      .d2h_bandwidth = 50e9,
      .h2d_bandwidth = 50e9,
      .d2h_latency_s = kCopyLatency,
      .h2d_latency_s = kCopyLatency,
      .copy_engines = 2,
  });
  presets.push_back({
      .name = "gh200-96g-c2c",
      .description = "NVIDIA GH200 Grace Hopper, 96 GB HBM3, NVLink-C2C to the Grace CPU "
                     "(450 GB/s each way nominal; 375 host-to-device and 297 device-to-host "
                     "measured). NVIDIA GH200 datasheet",
      .device_memory_bytes = 97871 * kMiB,
      .reserved_bytes = 1 * kGiB,
      .workspace_limit_bytes = kGpuWorkspaceLimit,
      .fp32_flops = 67e12,
      .tf32_flops = 494e12,
      .fp16_flops = 990e12,
      .compute_efficiency = kGpuComputeEfficiency,
      .memory_bandwidth = 4.0e12,
      .memory_efficiency = kGpuMemoryEfficiency,
      .launch_overhead_s = kGpuLaunchOverhead,
      .d2h_bandwidth = 297e9,
      .h2d_bandwidth = 375e9,
      .d2h_latency_s = kCopyLatency,
      .h2d_latency_s = kCopyLatency,
      .copy_engines = 2,
  });
  // A 2-core x86-64 VM running the CPU backend, calibrated there (see
  // docs/hardware.md): "device" memory is a budget inside host RAM and a
  // memcpy to another arena stands in for the link, sharing the cores and
  // the memory bandwidth with compute.
  presets.push_back({
      .name = "cpu",
      .description = "A 2-core x86-64 host (the development machine class) running the CPU "
                     "backend; memcpy stands in for the link. Compute rate calibrated on a "
                     "measured ResNet-50 step, memory bandwidth on a measured copy",
      .device_memory_bytes = 16 * kGiB,
      .reserved_bytes = 0,
      .fp32_flops = 180e9,
      .tf32_flops = 0,
      .fp16_flops = 0,
      .compute_efficiency = 0.6,
      .memory_bandwidth = 10e9,
      .memory_efficiency = 0.8,
      .launch_overhead_s = 1e-6,
      .d2h_bandwidth = 5e9,
      .h2d_bandwidth = 5e9,
      .d2h_latency_s = 1e-6,
      .h2d_latency_s = 1e-6,
      .copy_engines = 1,
  });
  for (const HardwareProfile& preset : presets) {
    SPILLWAY_CHECK(ValidateHardwareProfile(preset).ok(), "a hardware preset is out of range");
  }
  return presets;
}

}  // namespace

std::string_view MathModeName(MathMode mode) {
  switch (mode) {
    case MathMode::kFp32:
      return "fp32";
    case MathMode::kTf32:
      return "tf32";
    case MathMode::kFp16:
      return "fp16";
  }
  return "?";
}

std::optional<MathMode> ParseMathMode(std::string_view name) {
  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32, MathMode::kFp16}) {
    if (MathModeName(mode) == name) return mode;
  }
  return std::nullopt;
}

double HardwareProfile::efficiency(MathMode mode) const {
  const double mode_efficiency = mode == MathMode::kTf32   ? tf32_efficiency
                                 : mode == MathMode::kFp16 ? fp16_efficiency
                                                           : 0;
  return mode_efficiency > 0 ? mode_efficiency : compute_efficiency;
}

double HardwareProfile::peak_flops(MathMode mode) const {
  switch (mode) {
    case MathMode::kFp32:
      return fp32_flops;
    case MathMode::kTf32:
      return tf32_flops;
    case MathMode::kFp16:
      return fp16_flops;
  }
  return 0;
}

absl::Status ValidateHardwareProfile(const HardwareProfile& profile) {
  for (const Field& field : Fields()) RETURN_IF_ERROR(CheckField(profile, field));
  if (profile.reserved_bytes >= profile.device_memory_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("field 'reserved_bytes' ({}) must be less than device_memory_bytes ({})",
                    profile.reserved_bytes, profile.device_memory_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<HardwareProfile> ParseHardwareProfile(std::string_view json_text) {
  absl::StatusOr<HardwareProfile> profile = ParseProfile(json_text);
  if (!profile.ok()) return Annotate(profile.status(), "hardware profile");
  return profile;
}

std::string HardwareProfileToJson(const HardwareProfile& profile) {
  Json json = Json::object();
  for (const Field& field : Fields()) {
    std::visit([&](auto member) { json[std::string(field.name)] = profile.*member; }, field.member);
  }
  return json.dump(2);
}

const std::vector<HardwareProfile>& HardwarePresets() {
  static const std::vector<HardwareProfile>* const presets =
      new std::vector<HardwareProfile>(MakePresets());
  return *presets;
}

absl::StatusOr<HardwareProfile> LoadHardwareProfile(std::string_view name_or_path) {
  for (const HardwareProfile& preset : HardwarePresets()) {
    if (preset.name == name_or_path) return preset;
  }
  const std::string path(name_or_path);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    return absl::NotFoundError(
        fmt::format("no hardware preset or profile file '{}'; the presets are {}", name_or_path,
                    PresetNames()));
  }
  ASSIGN_OR_RETURN(const std::string text,
                   ReadFileToString(path, kMaxHardwareProfileBytes, "hardware profile"));
  absl::StatusOr<HardwareProfile> profile = ParseProfile(text);
  if (!profile.ok()) {
    return Annotate(profile.status(), fmt::format("hardware profile '{}'", name_or_path));
  }
  return profile;
}

}  // namespace spillway::analysis
