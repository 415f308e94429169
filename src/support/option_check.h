// The rules for option values, and the one wording every error about them
// uses: "--batch must be a positive integer, got '0'".
//
// The command line applies them to the text of each flag before converting it
// (so an integer too large for its type is an error, never a clamped or
// wrapped value), and the libraries' option structs apply them to the values
// they are given (so every front end gets the same errors). `name` is the
// option as the command line spells it; an empty name leaves it out ("must be
// a positive integer, got '0'"), for callers that prefix it themselves.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway {

inline constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// An interval of real numbers; the bounds are finite or infinite, included or not.
struct NumberRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_included = true;
  bool max_included = true;
};
inline constexpr NumberRange kPositiveNumber{0, std::numeric_limits<double>::infinity(), false,
                                             true};
inline constexpr NumberRange kNonNegativeNumber{0, std::numeric_limits<double>::infinity(), true,
                                                true};
// Probabilities and momenta: [0, 1).
inline constexpr NumberRange kFraction{0, 1, true, false};

// The range in words: "a positive integer", "a non-negative integer", "an
// integer from 1 to 1024"; "a positive number", "a number in [0, 1)".
std::string DescribeIntegerRange(int64_t min, int64_t max);
std::string DescribeNumberRange(const NumberRange& range);

// `value` in [min, max], or InvalidArgument "NAME must be <range>, got VALUE".
absl::Status CheckInteger(std::string_view name, int64_t value, int64_t min,
                          int64_t max = kMaxInt64);
// `value` finite and in `range` (NaN and infinities never are).
absl::Status CheckNumber(std::string_view name, double value, const NumberRange& range);
// `value` not empty (nor only blanks): "NAME must not be empty".
absl::Status CheckNotEmpty(std::string_view name, std::string_view value);

// Decimal integer text ("42", "-1"; no fraction, exponent or trailing text)
// that fits in int64_t and lies in [min, max].
absl::StatusOr<int64_t> ParseInteger(std::string_view name, std::string_view text, int64_t min,
                                     int64_t max = kMaxInt64);
// A finite decimal number ("0.01", "1e-3") in `range`.
absl::StatusOr<double> ParseNumber(std::string_view name, std::string_view text,
                                   const NumberRange& range);

}  // namespace spillway
