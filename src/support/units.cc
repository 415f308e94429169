#include "support/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fmt/format.h"

namespace spillway {
namespace {

std::string ThreeDigits(double value, std::string_view unit) {
  if (value >= 100) return fmt::format("{:.0f} {}", value, unit);
  if (value >= 10) return fmt::format("{:.1f} {}", value, unit);
  return fmt::format("{:.2f} {}", value, unit);
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  constexpr std::array<std::string_view, 6> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 0)
    return "-" + FormatBytes(bytes == std::numeric_limits<int64_t>::min()
                                 ? std::numeric_limits<int64_t>::max()
                                 : -bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  value /= 1024;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  return ThreeDigits(value, kUnits[unit]);
}

std::string FormatCount(double count) {
  constexpr std::array<std::string_view, 6> kUnits = {"K", "M", "G", "T", "P", "E"};
  if (std::abs(count) < 1000) return fmt::format("{:.0f}", count);
  size_t unit = 0;
  double value = count / 1000;
  while (std::abs(value) >= 1000 && unit + 1 < kUnits.size()) {
    value /= 1000;
    ++unit;
  }
  return ThreeDigits(value, kUnits[unit]);
}

absl::StatusOr<int64_t> ParseBytes(std::string_view text) {
  std::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t split = 0;
  while (split < trimmed.size() &&
         (std::isdigit(static_cast<unsigned char>(trimmed[split])) || trimmed[split] == '.')) {
    ++split;
  }
  std::string_view number = trimmed.substr(0, split);
  std::string suffix = absl::AsciiStrToLower(absl::StripAsciiWhitespace(trimmed.substr(split)));
  static const std::array<std::pair<std::string_view, double>, 11> kSuffixes = {{
      {"", 1},
      {"b", 1},
      {"kib", 1024.0},
      {"mib", 1024.0 * 1024},
      {"gib", 1024.0 * 1024 * 1024},
      {"tib", 1024.0 * 1024 * 1024 * 1024},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
      {"k", 1024.0},
  }};
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a size: expected a number of bytes or e.g. 16GiB, 512MiB"));
  }
  for (const auto& [name, scale] : kSuffixes) {
    if (suffix == name) {
      double bytes = std::floor(value * scale);
      if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat("size '", text, "' is too large"));
      }
      return static_cast<int64_t>(bytes);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an unknown unit '", suffix,
                                                 "': use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"));
}

}  // namespace spillway
