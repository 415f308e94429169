// libFuzzer target: mutated bytes through the node-link graph reader (--graph);
// see file_checks.h for what must hold and docs/fuzzing.md for how to run it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/file_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return spillway::fuzz::AbortIfBroken(spillway::fuzz::CheckNodeLinkText(
      std::string_view(reinterpret_cast<const char*>(data), size)));
}
