// Initial values of a training graph's persistent state: the given values
// (an imported model's weights) and, for everything else, values from a
// seed. The role of each parameter comes from the node that reads it:
//   convolution weights  Kaiming-uniform for ReLU: U(-b, b), b = sqrt(6 / fan_in),
//                        fan_in = KH * KW * C_in / groups (OHWI)
//   linear weights       U(-b, b), b = 1 / sqrt(in_features) (PyTorch's default)
//   embedding tables     U(-b, b) with standard deviation 0.02, b = 0.02 * sqrt(3)
//   biases, beta         0
//   batch/layer-norm gamma 1
//   running_mean 0, running_var 1; optimizer state 0; Adam's step counter
//   kAdamInitialStep.
// Any other parameter of rank 2 or more is initialized like an embedding, of
// lower rank with 0. Every parameter draws from its own counter-based stream,
// keyed by the seed and its name, so the same seed gives the same bytes on
// every machine and a parameter's values do not depend on the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::train {

// Adam's step counter holds the 1-based number of the update that reads it:
// bias correction divides by 1 - beta^step, which must not be 0.
inline constexpr int64_t kAdamInitialStep = 1;

// Parameter and buffer name -> its bytes in the IR's layout.
using NamedValues = std::map<std::string, std::vector<std::byte>>;

// Refuses a graph whose persistent values and inputs (what InitialState and
// one batch hold on the host) exceed the machine's available memory, before
// anything is allocated: ResourceExhausted naming both sizes.
absl::Status CheckStateFitsHost(const ir::Graph& graph);

// The bytes of every persistent value (PersistentValues(graph)): a parameter
// or buffer named in `given` starts from those bytes, every other value from
// the seed. Errors: a name in `given` that is no parameter or buffer of the
// graph, or bytes of another size than its type's (both named); a value drawn
// from the seed that is not f32 (Adam's i64 step aside).
absl::StatusOr<std::map<ir::ValueId, std::vector<std::byte>>> InitialState(
    const ir::Graph& graph, uint64_t seed, const NamedValues& given = {});

}  // namespace spillway::train
