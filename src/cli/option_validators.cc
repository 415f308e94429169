#include "cli/option_validators.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace spillway::cli {
namespace {

// CLI11 prefixes a validator's message with the flag ("--batch: "); main()
// joins the two into "--batch must be ...".
std::string MessageOf(const absl::Status& status) {
  return status.ok() ? std::string() : std::string(status.message());
}

// Levenshtein distance, for suggestions.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

CLI::Validator Integer(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) {
        return MessageOf(ParseInteger("", text, min, max).status());
      },
      DescribeIntegerRange(min, max));
}

CLI::Validator Number(const NumberRange& range) {
  return CLI::Validator(
      [range](std::string& text) { return MessageOf(ParseNumber("", text, range).status()); },
      DescribeNumberRange(range));
}

CLI::Validator NotEmpty() {
  return CLI::Validator([](std::string& text) { return MessageOf(CheckNotEmpty("", text)); },
                        "not empty");
}

std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace spillway::cli
