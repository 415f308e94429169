#include "support/option_check.h"

#include <charconv>
#include <cmath>
#include <system_error>

#include "fmt/format.h"

namespace spillway {
namespace {

// "NAME must be WHAT, got 'TEXT'", the text cut short if it is long.
absl::Status MustBe(std::string_view name, std::string_view what, std::string_view text) {
  constexpr size_t kShown = 40;
  const std::string shown =
      text.size() > kShown ? fmt::format("{}...", text.substr(0, kShown)) : std::string(text);
  return absl::InvalidArgumentError(
      fmt::format("{}{}must be {}, got '{}'", name, name.empty() ? "" : " ", what, shown));
}

std::string FormatBound(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{}", value);
}

bool InRange(double value, const NumberRange& range) {
  if (!std::isfinite(value)) return false;
  if (range.min_included ? value < range.min : value <= range.min) return false;
  if (range.max_included ? value > range.max : value >= range.max) return false;
  return true;
}

}  // namespace

std::string DescribeIntegerRange(int64_t min, int64_t max) {
  if (max == kMaxInt64 && min == 1) return "a positive integer";
  if (max == kMaxInt64 && min == 0) return "a non-negative integer";
  if (max == kMaxInt64) return fmt::format("an integer of at least {}", min);
  return fmt::format("an integer from {} to {}", min, max);
}

std::string DescribeNumberRange(const NumberRange& range) {
  const bool unbounded_above = std::isinf(range.max);
  if (unbounded_above && range.min == 0) {
    return range.min_included ? "a non-negative number" : "a positive number";
  }
  if (unbounded_above && std::isinf(range.min)) return "a finite number";
  return fmt::format("a number in {}{}, {}{}", range.min_included ? '[' : '(',
                     FormatBound(range.min), FormatBound(range.max),
                     range.max_included && !unbounded_above ? ']' : ')');
}

absl::Status CheckInteger(std::string_view name, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return MustBe(name, DescribeIntegerRange(min, max), fmt::format("{}", value));
}

absl::Status CheckNumber(std::string_view name, double value, const NumberRange& range) {
  if (InRange(value, range)) return absl::OkStatus();
  return MustBe(name, DescribeNumberRange(range), fmt::format("{}", value));
}

absl::Status CheckNotEmpty(std::string_view name, std::string_view value) {
  if (value.find_first_not_of(" \t\n\r\f\v") != std::string_view::npos) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("{}{}must not be empty", name, name.empty() ? "" : " "));
}

absl::StatusOr<int64_t> ParseInteger(std::string_view name, std::string_view text, int64_t min,
                                     int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  // from_chars takes no leading '+' or blanks: exactly the decimal integers.
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) {
    return MustBe(name, DescribeIntegerRange(min, max), text);
  }
  if (value < min || value > max) return MustBe(name, DescribeIntegerRange(min, max), text);
  return value;
}

absl::StatusOr<double> ParseNumber(std::string_view name, std::string_view text,
                                   const NumberRange& range) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  // from_chars reports a number beyond double's range as out of range; it
  // reads "inf" and "nan", which InRange refuses.
  if (text.empty() || error != std::errc() || stop != end || !InRange(value, range)) {
    return MustBe(name, DescribeNumberRange(range), text);
  }
  return value;
}

}  // namespace spillway
