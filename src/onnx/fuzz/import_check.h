// What the ONNX import fuzzer checks, shared by the libFuzzer target
// (import_fuzzer.cc) and the test that replays its corpus in every build
// (corpus_replay_test.cc), so a corpus input means the same to both.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/importer.h"

namespace spillway::onnx::fuzz {

// The options every input is imported under: the defaults, --loss
// cross-entropy, and an --input-shape for the first graph input that doubles
// the batch and, for images, the spatial extent (found by parsing `bytes`;
// absent when they do not parse or have no such input).
std::vector<ImportOptions> OptionVariants(std::string_view bytes);

// Imports `bytes` under `options`. Returns whether the model was imported
// (false: the importer returned an error, which any input may cause), or an
// Internal error naming the broken invariant when an imported model is
// inconsistent: the graph fails ir::VerifyGraph, a parameter or buffer lacks
// an initial value of its type's byte size, an initial value names no
// parameter or buffer, or the loss is not a single scalar output.
absl::StatusOr<bool> ImportAndCheck(std::string_view bytes, const ImportOptions& options);

}  // namespace spillway::onnx::fuzz
