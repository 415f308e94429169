// Trained values back into the ONNX model they came from: `spillway export`.
//
// The importer made every initializer a parameter or buffer named as in the
// file (importer.h); the exporter writes new values into those initializers
// and leaves everything else in the model as it was: nodes, inputs, outputs,
// metadata, other initializers. Values are in the IR's layout; convolution
// weights (ImportedModel::ohwi_initializers) are transposed back to OIHW.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/importer.h"

namespace spillway::onnx {

// The model `onnx_bytes` with `values` (by initializer name, IR layout, f32)
// in place of its initializers' data, serialized. `ohwi_initializers` is
// what ImportModel reported for the same bytes. Errors: a name that is no float
// initializer of the model, a value of another size, an initializer stored
// as external data (not supported yet), or a model over protobuf's 2 GiB.
absl::StatusOr<std::string> ExportTrainedValues(
    std::string_view onnx_bytes, const std::set<std::string>& ohwi_initializers,
    const std::map<std::string, std::vector<std::byte>>& values);

}  // namespace spillway::onnx
