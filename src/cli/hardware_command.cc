// `spillway hardware`: the built-in hardware profiles, or one profile (a
// preset or a JSON file) in full, so a custom file can be checked before a
// plan uses it.
#include <memory>
#include <string>

#include "analysis/hardware.h"
#include "cli/commands.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "nlohmann/json.hpp"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::cli {
namespace {

struct HardwareFlags {
  std::string profile;  // empty: list the presets
  bool json = false;
};

// "15.7 TFLOP/s", "100 GFLOP/s".
std::string Rate(double per_second, std::string_view unit) {
  return fmt::format("{}{}/s", FormatCount(per_second), unit);
}

std::string Link(const analysis::HardwareProfile& profile) {
  if (profile.h2d_bandwidth == profile.d2h_bandwidth) return Rate(profile.h2d_bandwidth, "B");
  return fmt::format("h2d {}, d2h {}", Rate(profile.h2d_bandwidth, "B"),
                     Rate(profile.d2h_bandwidth, "B"));
}

std::string Microseconds(double seconds) { return fmt::format("{:g} us", seconds * 1e6); }

std::string Percent(double fraction) { return fmt::format("{:g}%", fraction * 100); }

std::string Peak(double flops) { return flops > 0 ? Rate(flops, "FLOP") : "none (runs as fp32)"; }

void PrintList(std::ostream& out) {
  fmt::print(out, "{:<18} {:<10} {:<13} {:<10} {}\n", "name", "memory", "fp32 peak", "memory bw",
             "link each way");
  for (const analysis::HardwareProfile& profile : analysis::HardwarePresets()) {
    fmt::print(out, "{:<18} {:<10} {:<13} {:<10} {}\n", profile.name,
               FormatBytes(profile.device_memory_bytes), Rate(profile.fp32_flops, "FLOP"),
               Rate(profile.memory_bandwidth, "B"), Link(profile));
    fmt::print(out, "    {}\n", profile.description);
  }
}

void PrintProfile(std::ostream& out, const analysis::HardwareProfile& profile) {
  fmt::print(out, "Name              {}\n", profile.name);
  if (!profile.description.empty()) fmt::print(out, "Description       {}\n", profile.description);
  fmt::print(out, "Device memory     {}, {} reserved: default budget {}\n",
             FormatBytes(profile.device_memory_bytes), FormatBytes(profile.reserved_bytes),
             FormatBytes(profile.default_budget_bytes()));
  fmt::print(out, "Peak compute      fp32 {}, tf32 {}, fp16 {}; {} sustained\n",
             Peak(profile.fp32_flops), Peak(profile.tf32_flops), Peak(profile.fp16_flops),
             Percent(profile.compute_efficiency));
  fmt::print(out, "Memory bandwidth  {}; {} sustained\n", Rate(profile.memory_bandwidth, "B"),
             Percent(profile.memory_efficiency));
  fmt::print(out, "Launch overhead   {} per kernel\n", Microseconds(profile.launch_overhead_s));
  fmt::print(out, "Host to device    {}, {} per copy\n", Rate(profile.h2d_bandwidth, "B"),
             Microseconds(profile.h2d_latency_s));
  fmt::print(out, "Device to host    {}, {} per copy\n", Rate(profile.d2h_bandwidth, "B"),
             Microseconds(profile.d2h_latency_s));
  fmt::print(out, "Copy engines      {}{}\n", profile.copy_engines,
             profile.copy_engines == 2 ? " (the two directions overlap)" : " (one copy at a time)");
}

}  // namespace

CommandRunner AddHardwareCommand(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("hardware", "List the built-in hardware profiles, or show one in full");
  auto flags = std::make_shared<HardwareFlags>();
  command->add_option("profile", flags->profile,
                      "A preset name or a profile JSON file to show (checking the file)");
  command->add_flag("--json", flags->json,
                    "Print JSON: a list of profiles, or the one profile as a file would hold it");
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    if (!flags->profile.empty()) {
      ASSIGN_OR_RETURN(const analysis::HardwareProfile profile,
                       analysis::LoadHardwareProfile(flags->profile));
      if (flags->json) {
        out << analysis::HardwareProfileToJson(profile) << "\n";
      } else {
        PrintProfile(out, profile);
      }
      return absl::OkStatus();
    }
    if (flags->json) {
      // Each element is a valid profile file, to copy and edit into a custom one.
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const analysis::HardwareProfile& profile : analysis::HardwarePresets()) {
        list.push_back(nlohmann::ordered_json::parse(analysis::HardwareProfileToJson(profile)));
      }
      out << list.dump(2) << "\n";
      return absl::OkStatus();
    }
    PrintList(out);
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
