#include "cli/backend_flags.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "cli/option_validators.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace spillway::cli {

// A thread count far beyond any machine is a typo, not a request.
constexpr int kMaxThreads = 1024;

void AddBackendFlags(CLI::App& command, BackendFlags& flags) {
  std::vector<std::string> names;
  std::vector<std::string> descriptions;
  for (const backends::BackendInfo& info : backends::ListBackends()) {
    names.push_back(info.name);
    descriptions.push_back(fmt::format("{} ({})", info.name, info.description));
  }
  // A build without the default backend (cpu, with SPILLWAY_CPU_BACKEND=OFF)
  // defaults to the first it has, and `--backend cpu` says why it is missing.
  if (std::find(names.begin(), names.end(), flags.backend) == names.end()) {
    flags.backend = names.front();
  }
  CLI::Option* backend = command.add_option("--backend", flags.backend,
                                            fmt::format("{}", fmt::join(descriptions, "; ")));
  for (const backends::BackendInfo& left_out : backends::ListLeftOutBackends()) {
    backend->check(CLI::Validator(
        [left_out, names](const std::string& value) {
          return value == left_out.name ? fmt::format("{}; the backends are {}",
                                                      left_out.description, fmt::join(names, ", "))
                                        : std::string();
        },
        /*validator_desc=*/""));
  }
  backend->check(CLI::IsMember(names))->capture_default_str();
  command
      .add_option("--threads", flags.threads,
                  fmt::format("Threads per kernel on the cpu backend, 1 to {}; results are bitwise "
                              "reproducible for a given count and ISA path (docs/training.md)",
                              kMaxThreads))
      ->check(Integer(1, kMaxThreads))
      ->capture_default_str();
  command
      .add_option("--math-mode", flags.math_mode,
                  "fp32, or tf32: convolutions on TF32 tensor cores, matrix products in fp32 (the "
                  "cuda backend; PyTorch's defaults). The planner costs the step in the same mode")
      ->check(CLI::IsMember({"fp32", "tf32"}))
      ->capture_default_str();
  command.add_flag_callback(
      "--nondeterministic", [&flags] { flags.deterministic = false; },
      "Let the cuda backend pick nondeterministic algorithms where faster: the same step may give "
      "different bits from run to run, and policies no longer train bitwise alike (the cpu "
      "backend is always deterministic)");
}

}  // namespace spillway::cli
