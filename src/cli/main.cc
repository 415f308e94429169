// spillway: plan and run deep-network training under a device memory budget.
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/commands.h"
#include "cli/option_validators.h"
#include "fmt/format.h"
#include "support/status_macros.h"

namespace {

// Bad input of any kind (flags, sizes, models, files, a budget no plan fits)
// exits with 2 and one line; a failure of the machine (a disk full, a kernel
// failing, a bug) exits with 1 and one line giving the reason.
constexpr int kUsageError = 2;
constexpr int kMachineError = 1;

int ExitCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
      return kMachineError;
    default:
      return kUsageError;
  }
}

void PrintError(std::string_view message) {
  std::fprintf(stderr, "spillway: error: %.*s\n", static_cast<int>(message.size()), message.data());
}

std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands({})) names.push_back(command->get_name());
  return names;
}

// `spillway bogus`: CLI11 would only say that a command is required.
bool RefuseUnknownCommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  const std::vector<std::string> names = CommandNames(app);
  for (const std::string& name : names) {
    if (name == argv[1]) return false;
  }
  const std::string guess = spillway::cli::ClosestMatch(argv[1], names);
  PrintError(fmt::format("unknown command '{}'{}; the commands are {}", argv[1],
                         guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess),
                         fmt::join(names, ", ")));
  return true;
}

// The command that was being parsed when CLI11 gave up, for its flags.
const CLI::App* ParsedCommand(const CLI::App& app) {
  for (const CLI::App* command : app.get_subcommands({})) {
    if (command->parsed()) return command;
  }
  return &app;
}

// CLI11's "The following arguments were not expected: 3 --n-layer" becomes
// one line per the first stray argument, with a suggestion for a misspelt flag.
std::string DescribeExtras(const CLI::App& app, std::string_view what) {
  std::string_view rest;
  for (std::string_view prefix : {"The following arguments were not expected: ",
                                  "The following argument was not expected: "}) {
    if (what.substr(0, prefix.size()) == prefix) rest = what.substr(prefix.size());
  }
  if (rest.empty()) return std::string(what);
  std::vector<std::string> extras;
  while (!rest.empty()) {
    const size_t space = rest.find(' ');
    extras.emplace_back(rest.substr(0, space));
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  }
  const CLI::App* command = ParsedCommand(app);
  const std::string where =
      command == &app ? "spillway" : fmt::format("spillway {}", command->get_name());
  for (const std::string& extra : extras) {
    if (extra.size() < 2 || extra[0] != '-') continue;
    const std::string flag = extra.substr(0, extra.find('='));
    std::vector<std::string> flags;
    for (const CLI::Option* option : command->get_options()) {
      for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
    }
    const std::string guess = spillway::cli::ClosestMatch(flag, flags);
    return fmt::format("{} has no option '{}'{} (see '{} --help')", where, flag,
                       guess.empty() ? "" : fmt::format("; did you mean '{}'?", guess), where);
  }
  // CLI11 lists the strays last first.
  return fmt::format("{}: unexpected argument '{}' (see '{} --help')", where, extras.back(), where);
}

// CLI11 writes a validator's message after the flag ("--batch: must be a
// positive integer, got '0'"); the rules' own wording reads as one sentence.
std::string DescribeParseError(const CLI::App& app, const CLI::ParseError& error) {
  std::string what = error.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) return DescribeExtras(app, what);
  const size_t joint = what.find(": must ");
  if (joint != std::string::npos && what.rfind("--", 0) == 0) what.erase(joint, 1);
  return what;
}

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

// The planner builds and drops a Program per candidate, tens of megabytes
// each on deep graphs. glibc serves allocations past its mmap threshold
// (adaptive, at most 32 MiB) with fresh mappings and gives them back on
// free, so on a 1000-layer GPT-2 every candidate's instruction list was
// faulted in page by page: 54.6 million minor faults and 127 s of kernel
// time in a run the 300 s safety net stopped at 334 s (docs/results.md,
// "Planning time"). Keeping
// blocks up to 1 GiB in the heap, and the heap's free top up to 1 GiB,
// reuses them instead. Left to the user where they tune malloc themselves.
void KeepLargeBlocksInTheHeap() {
  for (const char* variable :
       {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}) {
    if (std::getenv(variable) != nullptr) return;
  }
  constexpr int kOneGiB = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
}

}  // namespace

int main(int argc, char** argv) {
  PreferPassiveOpenMpWaiting(argv);
  KeepLargeBlocksInTheHeap();
  CLI::App app{
      "Spillway trains deep networks whose activations do not fit in GPU memory: it decides per "
      "tensor whether to keep, spill or recompute it.",
      "spillway"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "spillway 0.1.0");
  std::vector<spillway::cli::CommandRunner> commands = {
      spillway::cli::AddModelsCommand(app),   spillway::cli::AddInspectCommand(app),
      spillway::cli::AddHardwareCommand(app), spillway::cli::AddPlanCommand(app),
      spillway::cli::AddCompareCommand(app),  spillway::cli::AddSweepCommand(app),
      spillway::cli::AddTrainCommand(app),    spillway::cli::AddForwardCommand(app),
      spillway::cli::AddExportCommand(app),   spillway::cli::AddProfileCommand(app),
  };
  if (RefuseUnknownCommand(app, argc, argv)) return kUsageError;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    PrintError(DescribeParseError(app, e));
    return kUsageError;
  }
  for (const spillway::cli::CommandRunner& run : commands) {
    absl::Status status;
    try {
      status = run(std::cout);
    } catch (const std::bad_alloc&) {
      // The commands check their sizes against the machine before they
      // allocate; this is the net under what those checks cannot foresee.
      PrintError("out of host memory");
      return kMachineError;
    }
    if (!status.ok()) {
      PrintError(spillway::StatusMessage(status));
      return ExitCodeOf(status);
    }
  }
  std::cout.flush();
  if (!std::cout) {
    PrintError(fmt::format("cannot write the output: {}", std::strerror(errno)));
    return kMachineError;
  }
  return 0;
}
