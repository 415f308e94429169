#include "support/units.h"

#include <array>
#include <cctype>
#include <charconv>
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

std::string FormatSignedPercent(double fraction) {
  const double tenths = std::round(1000.0 * fraction);
  return fmt::format("{:+.1f}%", (tenths == 0 ? 0.0 : tenths) / 10);
}

absl::StatusOr<int64_t> ParseBytes(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  // The number: digits with an optional fraction and exponent ("1.5", "4e9");
  // from_chars finds where it ends, and what follows is the unit.
  double value = 0;
  const char* end = trimmed.data() + trimmed.size();
  auto [stop, error] = std::from_chars(trimmed.data(), end, value, std::chars_format::general);
  const bool starts_with_digit =
      !trimmed.empty() &&
      (std::isdigit(static_cast<unsigned char>(trimmed.front())) || trimmed.front() == '.');
  if (!starts_with_digit || error == std::errc::invalid_argument) {
    return absl::InvalidArgumentError(fmt::format(
        "'{}' is not a size: expected a number of bytes (4096, 1e9) or e.g. 16GiB, 512MiB", text));
  }
  const std::string suffix = Lower(Trim(std::string_view(stop, static_cast<size_t>(end - stop))));
  static const std::array<std::pair<std::string_view, double>, 13> kSuffixes = {{
      {"", 1},
      {"b", 1},
      {"kib", 1024.0},
      {"mib", 1024.0 * 1024},
      {"gib", 1024.0 * 1024 * 1024},
      {"tib", 1024.0 * 1024 * 1024 * 1024},
      {"pib", 1024.0 * 1024 * 1024 * 1024 * 1024},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
      {"pb", 1e15},
      {"k", 1024.0},
  }};
  for (const auto& [name, scale] : kSuffixes) {
    if (suffix != name) continue;
    const double bytes = value * scale;
    // 2^63 is the first double past int64_t; from_chars says out of range
    // for a number beyond double's.
    if (error == std::errc::result_out_of_range || !(bytes < 0x1p63)) {
      return absl::InvalidArgumentError(fmt::format("size '{}' is too large", text));
    }
    // A size in a unit may land between bytes (1.1GB); a count of bytes must be whole.
    if (scale == 1 && bytes != std::floor(bytes)) {
      return absl::InvalidArgumentError(fmt::format(
          "'{}' is not a whole number of bytes: give bytes as an integer, or a unit (1.5GiB)",
          text));
    }
    return static_cast<int64_t>(std::floor(bytes));
  }
  return absl::InvalidArgumentError(fmt::format(
      "'{}' has an unknown unit '{}': use B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB or PB", text,
      suffix));
}

}  // namespace spillway
