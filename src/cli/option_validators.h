// CLI11 validators that apply the library's option rules (support/option_check.h)
// to a flag's text before CLI11 converts it: an integer too large for its
// field is an error, never a clamped value, and NaN or an infinity is never a
// number. Every numeric flag of every command is checked through these.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "support/option_check.h"

namespace spillway::cli {

// A decimal integer in [min, max].
CLI::Validator Integer(int64_t min, int64_t max = kMaxInt64);
inline CLI::Validator PositiveInteger() { return Integer(1); }
inline CLI::Validator NonNegativeInteger() { return Integer(0); }

// A finite number in `range`.
CLI::Validator Number(const NumberRange& range);

// Text that is not empty or only blanks.
CLI::Validator NotEmpty();

// The closest of `candidates` to `word` if it is a likely misspelling (a few
// edits away), else empty: "did you mean" suggestions for flags and commands.
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace spillway::cli
