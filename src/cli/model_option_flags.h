// The command-line flag of each built-in model option: the one place that maps
// a models::ModelOptionInfo name (a ModelOptions field, "base_width") to the
// flag AddWorkloadFlags declares for it ("--base-width"). `spillway models`
// lists options by their flags; cli_test checks every listed flag parses.
#pragma once

#include <string_view>

namespace spillway::cli {

// "--base-width" for "base_width", "--layers" for "n_layer"; a CHECK failure
// for a name that has no flag (a model option added without one).
std::string_view ModelOptionFlag(std::string_view option);

}  // namespace spillway::cli
