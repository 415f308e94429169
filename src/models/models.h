// The model zoo: every forward graph Spillway can build without an ONNX file,
// by name. Each graph ends in a scalar loss, its only output.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"

namespace spillway::models {

struct ModelOptionInfo {
  std::string name;           // the ModelOptions field, as SetModelOption spells it
  std::string default_value;  // for this model
  std::string description;
};

struct ModelInfo {
  std::string name;
  std::string description;
  std::vector<ModelOptionInfo> options;  // the options this model reads
};

// Builds the forward graph of a model: NotFound for an unknown name (listing
// the known ones), InvalidArgument for a bad option (naming it) or a size the
// model cannot take (naming the layer that fails).
absl::StatusOr<ir::Graph> BuildModel(std::string_view name, const ModelOptions& options);

// Every model, in a fixed order, for `spillway models`.
std::vector<ModelInfo> ListModels();

// An option a user gave explicitly: the ModelOptions field it sets, and how
// the user wrote it (empty: as `spell` writes the field).
struct GivenOption {
  std::string field;
  std::string spelt;
};

// Refuses options given explicitly that `model` does not read (defaults are
// never refused): InvalidArgument naming the first such option and the ones
// the model reads, each written by `spell` (a front end's flag names; the
// ModelOptions field names by default). NotFound for an unknown model.
absl::Status CheckOptionsApply(
    std::string_view model, const std::vector<GivenOption>& given,
    const std::function<std::string(std::string_view)>& spell = [](std::string_view name) {
      return std::string(name);
    });

// Sets one option from text, as the CLI passes `--option name=value`:
// InvalidArgument for an unknown option or a value that does not parse.
absl::Status SetModelOption(ModelOptions& options, std::string_view name, std::string_view value);

}  // namespace spillway::models
