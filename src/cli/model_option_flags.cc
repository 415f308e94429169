#include "cli/model_option_flags.h"

#include <array>
#include <string>
#include <utility>

#include "support/check.h"

namespace spillway::cli {

std::string_view ModelOptionFlag(std::string_view option) {
  // Keep in step with AddWorkloadFlags (workload_flags.cc).
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 15> kFlags = {{
      {"batch", "--batch"},
      {"height", "--height"},
      {"width", "--width"},
      {"in_channels", "--in-channels"},
      {"classes", "--classes"},
      {"base_width", "--base-width"},
      {"backbone", "--backbone"},
      {"depth", "--depth"},
      {"dropout", "--dropout"},
      {"seed", "--seed"},
      {"n_layer", "--layers"},
      {"n_head", "--heads"},
      {"d_model", "--d-model"},
      {"seq_len", "--seq-len"},
      {"vocab", "--vocab"},
  }};
  for (const auto& [name, flag] : kFlags) {
    if (name == option) return flag;
  }
  SPILLWAY_CHECK(false, "model option without a command-line flag");
  return {};
}

}  // namespace spillway::cli
