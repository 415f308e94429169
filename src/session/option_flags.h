// The command-line flag of each built-in model option: the one place that maps
// a models::ModelOptionInfo name (a ModelOptions field, "base_width") to the
// flag the CLI declares for it ("--base-width"). Errors name options by these
// flags, from the CLI and from the Python module alike (whose keywords are
// the flags without dashes: base_width). `spillway models` lists options by
// their flags; cli_test checks every listed flag parses.
#pragma once

#include <optional>
#include <string_view>

namespace spillway::session {

// "--base-width" for "base_width", "--layers" for "n_layer"; a CHECK failure
// for a name that has no flag (a model option added without one).
std::string_view ModelOptionFlag(std::string_view option);

// The other way: "base_width" for "--base-width"; nullopt for a flag that is
// not a model option's.
std::optional<std::string_view> ModelOptionOfFlag(std::string_view flag);

}  // namespace spillway::session
