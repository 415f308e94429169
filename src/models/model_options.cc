#include "models/model_options.h"

#include "fmt/format.h"
#include "support/status_macros.h"

namespace spillway::models {

absl::Status RequirePositive(std::string_view option, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("option '{}' must be positive, got {}", option, value));
}

absl::Status RequireInRange(std::string_view option, int64_t value, int64_t limit) {
  RETURN_IF_ERROR(RequirePositive(option, value));
  if (value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("option '{}' must be at most {}, got {}", option, limit, value));
}

absl::Status ValidateImageOptions(const ModelOptions& options) {
  RETURN_IF_ERROR(RequirePositive("batch", options.batch));
  RETURN_IF_ERROR(RequirePositive("height", options.height));
  RETURN_IF_ERROR(RequirePositive("width", options.width));
  RETURN_IF_ERROR(RequirePositive("in_channels", options.in_channels));
  if (options.classes.has_value()) RETURN_IF_ERROR(RequirePositive("classes", *options.classes));
  return absl::OkStatus();
}

int64_t ClassCount(const ModelOptions& options, int64_t model_default) {
  return options.classes.value_or(model_default);
}

absl::StatusOr<double> DropoutProbability(const ModelOptions& options, double model_default) {
  const double p = options.dropout.value_or(model_default);
  // Written so that NaN fails too.
  if (!(p >= 0.0 && p < 1.0)) {
    return absl::InvalidArgumentError(
        fmt::format("option 'dropout' must lie in [0, 1), got {}", p));
  }
  return p;
}

}  // namespace spillway::models
