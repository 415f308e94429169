#include "session/option_flags.h"

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "support/check.h"

namespace spillway::session {

namespace {

// Keep in step with cli::AddWorkloadFlags (cli/workload_flags.cc).
constexpr std::array<std::pair<std::string_view, std::string_view>, 15> kFlags = {{
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

}  // namespace

std::string_view ModelOptionFlag(std::string_view option) {
  for (const auto& [name, flag] : kFlags) {
    if (name == option) return flag;
  }
  SPILLWAY_CHECK(false, "model option without a command-line flag");
  return {};
}

std::optional<std::string_view> ModelOptionOfFlag(std::string_view flag) {
  for (const auto& [name, spelt] : kFlags) {
    if (spelt == flag) return name;
  }
  return std::nullopt;
}

}  // namespace spillway::session
