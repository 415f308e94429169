// spillway: plan and run deep-network training under a device memory budget.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/commands.h"
#include "support/status_macros.h"

namespace {

// Bad input of any kind (flags, sizes, models) exits with 2 and one line.
constexpr int kUsageError = 2;

// The CPU backend's kernels run on OpenMP threads, which by default spin
// while they wait for work. The runtime's copy streams and the other kernel
// threads then lose their cores to spinning threads: a ResNet-50 step took
// 2.3x as long on a busy 2-core machine (docs/results.md). OpenMP reads its
// wait policy once, when the library loads, before main; so when the user has
// not chosen one, choose passive waiting and start again with it. Failing to
// re-execute only costs speed.
void PreferPassiveOpenMpWaiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace

int main(int argc, char** argv) {
  PreferPassiveOpenMpWaiting(argv);
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
      spillway::cli::AddForwardCommand(app),
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
