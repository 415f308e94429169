// The subcommands of `spillway`. Each registers itself on the app and returns
// the function that runs it once the command line has been parsed.
#pragma once

#include <functional>
#include <ostream>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace spillway::cli {

using CommandRunner = std::function<absl::Status(std::ostream& out)>;

CommandRunner AddModelsCommand(CLI::App& app);
CommandRunner AddInspectCommand(CLI::App& app);
CommandRunner AddHardwareCommand(CLI::App& app);
CommandRunner AddPlanCommand(CLI::App& app);
CommandRunner AddCompareCommand(CLI::App& app);
CommandRunner AddSweepCommand(CLI::App& app);
CommandRunner AddTrainCommand(CLI::App& app);
CommandRunner AddForwardCommand(CLI::App& app);
CommandRunner AddExportCommand(CLI::App& app);
CommandRunner AddProfileCommand(CLI::App& app);

}  // namespace spillway::cli
