#include "support/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "fmt/format.h"

namespace spillway {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string ThreeDigits(double value, std::string_view unit) {
  if (value >= 100) return fmt::format("{:.0f} {}", value, unit);
  if (value >= 10) return fmt::format("{:.1f} {}", value, unit);
  return fmt::format("{:.2f} {}", value, unit);
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  constexpr std::array<std::string_view, 6> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 0) {
    std::string positive = FormatBytes(bytes == std::numeric_limits<int64_t>::min()
                                           ? std::numeric_limits<int64_t>::max()
                                           : -bytes);
    positive.insert(positive.begin(), '-');
    return positive;
  }
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
  std::string_view trimmed = Trim(text);
  size_t split = 0;
  while (split < trimmed.size() &&
         (std::isdigit(static_cast<unsigned char>(trimmed[split])) || trimmed[split] == '.')) {
    ++split;
  }
  std::string_view number = trimmed.substr(0, split);
  std::string suffix = Lower(Trim(trimmed.substr(split)));
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
  const std::string number_text(number);
  char* end = nullptr;
  if (!number.empty()) value = std::strtod(number_text.c_str(), &end);
  if (number.empty() || end != number_text.c_str() + number_text.size()) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' is not a size: expected a number of bytes or e.g. 16GiB, 512MiB", text));
  }
  for (const auto& [name, scale] : kSuffixes) {
    if (suffix == name) {
      double bytes = std::floor(value * scale);
      if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(fmt::format("size '{}' is too large", text));
      }
      return static_cast<int64_t>(bytes);
    }
  }
  return absl::InvalidArgumentError(fmt::format(
      "'{}' has an unknown unit '{}': use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", text, suffix));
}

}  // namespace spillway
