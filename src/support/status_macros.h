// Early-return helpers for absl::Status and absl::StatusOr, which abseil's
// public headers do not provide.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway {

// Debian's abseil has its own string_view type, which std::string_view does not
// convert to implicitly; these bridge the two.
inline std::string_view StatusMessage(const absl::Status& status) {
  return {status.message().data(), status.message().size()};
}

// The same status with "context: " in front of its message.
inline absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  std::string message(context);
  message += ": ";
  message += StatusMessage(status);
  return absl::Status(status.code(), message);
}

}  // namespace spillway

#define SPILLWAY_CONCAT_INNER(a, b) a##b
#define SPILLWAY_CONCAT(a, b) SPILLWAY_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    ::absl::Status _spillway_status = (expr); \
    if (!_spillway_status.ok()) {             \
      return _spillway_status;                \
    }                                         \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  SPILLWAY_ASSIGN_OR_RETURN_IMPL(SPILLWAY_CONCAT(_spillway_statusor_, __LINE__), lhs, expr)

#define SPILLWAY_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) {                                     \
    return std::move(statusor).status();                    \
  }                                                         \
  lhs = *std::move(statusor)
