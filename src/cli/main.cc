// spillway: plan and run deep-network training under a device memory budget.
#include <cstdio>
#include <iostream>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/commands.h"
#include "support/status_macros.h"

namespace {

// Bad input of any kind (flags, sizes, models) exits with 2 and one line.
constexpr int kUsageError = 2;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Spillway trains deep networks whose activations do not fit in GPU memory: it decides per "
      "tensor whether to keep, spill or recompute it.",
      "spillway"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "spillway 0.1.0");
  std::vector<spillway::cli::CommandRunner> commands = {
      spillway::cli::AddModelsCommand(app),   spillway::cli::AddInspectCommand(app),
      spillway::cli::AddHardwareCommand(app), spillway::cli::AddPlanCommand(app),
      spillway::cli::AddCompareCommand(app),  spillway::cli::AddTrainCommand(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "spillway: error: %s\n", e.what());
    std::fprintf(stderr, "Run 'spillway --help' for the commands and their options.\n");
    return kUsageError;
  }
  for (const spillway::cli::CommandRunner& run : commands) {
    const absl::Status status = run(std::cout);
    if (!status.ok()) {
      const std::string_view message = spillway::StatusMessage(status);
      std::fprintf(stderr, "spillway: error: %.*s\n", static_cast<int>(message.size()),
                   message.data());
      return kUsageError;
    }
  }
  return 0;
}
