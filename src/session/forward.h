// What a forward pass is fed (`spillway forward`): every graph input from a
// .npy file or drawn from the seed, and the parameters and buffers from a
// checkpoint, the ONNX file or the seed. Inputs are in the framework's order
// (NCHW for images) in files and in the IR's layout once read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "session/workload.h"
#include "support/npy.h"

namespace spillway::session {

// One graph input's bytes in the IR's layout, and where they came from.
struct InputValue {
  std::vector<std::byte> bytes;
  std::string source;  // the file, or "seed N"
};

// The .npy type of an IR dtype: f32 and i64 have one; nullopt otherwise.
std::optional<NpyDType> NpyTypeOf(ir::DType dtype);

// Every kInput value of the graph, by name: those `given` as NAME=FILE.npy
// (the file's shape and dtype must be the input's, in ONNX order), the rest
// drawn from `seed` (floats uniform in [-1, 1), integers below the classes of
// the loss or the rows of the embedding that reads them). One-line errors
// name the input, its expected type and what the file holds.
absl::StatusOr<std::map<std::string, InputValue>> GatherInputs(
    const ir::Graph& graph, const std::vector<std::string>& given, int64_t seed);

// Parameters and buffers by name: a checkpoint's (if `checkpoint` is not
// empty), else the ONNX file's (moved out of `workload`), else a built-in
// model's initialized from the spec's seed.
absl::StatusOr<std::map<std::string, std::vector<std::byte>>> ModelValues(
    Workload& workload, const WorkloadSpec& spec, const std::string& checkpoint);

}  // namespace spillway::session
