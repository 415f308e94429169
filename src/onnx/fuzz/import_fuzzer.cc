// libFuzzer target: mutated model bytes go through the ONNX importer under
// every option variant; an imported model must satisfy import_check.h's
// invariants. docs/fuzzing.md says how to build and run it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "absl/status/statusor.h"
#include "onnx/fuzz/import_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const spillway::onnx::ImportOptions& options : spillway::onnx::fuzz::OptionVariants(bytes)) {
    const absl::StatusOr<bool> checked = spillway::onnx::fuzz::ImportAndCheck(bytes, options);
    if (!checked.ok()) {
      std::fprintf(stderr, "%s\n", checked.status().ToString().c_str());
      std::abort();
    }
  }
  return 0;
}
