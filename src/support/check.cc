#include "support/check.h"

#include <cstdio>
#include <cstdlib>

namespace spillway::internal {

void CheckFailed(std::string_view condition, std::string_view file, int line,
                 std::string_view message) {
  std::fprintf(stderr, "spillway: internal error: CHECK(%.*s) failed at %.*s:%d%s%.*s\n",
               static_cast<int>(condition.size()), condition.data(), static_cast<int>(file.size()),
               file.data(), line, message.empty() ? "" : ": ", static_cast<int>(message.size()),
               message.data());
  std::abort();
}

}  // namespace spillway::internal
