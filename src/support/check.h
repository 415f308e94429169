// CHECK for broken invariants: a bug in Spillway, never bad user input (which
// gets an absl::Status). Aborts with the condition, place and message.
#pragma once

#include <string_view>

namespace spillway::internal {
[[noreturn]] void CheckFailed(std::string_view condition, std::string_view file, int line,
                              std::string_view message);
}  // namespace spillway::internal

#define SPILLWAY_CHECK(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      ::spillway::internal::CheckFailed(#cond, __FILE__, __LINE__, "" __VA_ARGS__); \
    }                                                                               \
  } while (false)
