#include "cli/backend_flags.h"

#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/registry.h"
#include "cli/option_validators.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "support/status_macros.h"

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
  command.add_option("--backend", flags.backend, fmt::format("{}", fmt::join(descriptions, "; ")))
      ->check(CLI::IsMember(names))
      ->capture_default_str();
  command
      .add_option("--threads", flags.threads,
                  fmt::format("Threads per kernel on the cpu backend, 1 to {}; results are bitwise "
                              "reproducible for a given count and ISA path (docs/training.md)",
                              kMaxThreads))
      ->check(Integer(1, kMaxThreads))
      ->capture_default_str();
}

absl::StatusOr<std::unique_ptr<backends::Backend>> MakeBackend(const BackendFlags& flags) {
  return backends::MakeBackend(flags.backend, {.threads = flags.threads});
}

std::string DescribeBackend(const BackendFlags& flags) {
  if (flags.backend != "cpu") return flags.backend;
  absl::StatusOr<backends::cpu::CpuIsaPaths> paths = backends::cpu::DescribeCpuIsaPaths();
  if (!paths.ok()) return fmt::format("cpu, {} threads", flags.threads);
  return fmt::format("cpu, {} threads, oneDNN {} on {}, direct kernels {}", flags.threads,
                     paths->onednn_version, paths->onednn_isa, paths->direct_kernels);
}

std::string DirectKernelPath(const BackendFlags& flags) {
  if (flags.backend != "cpu") return "";
  absl::StatusOr<backends::cpu::CpuIsaPaths> paths = backends::cpu::DescribeCpuIsaPaths();
  return paths.ok() ? paths->direct_kernels : "";
}

nlohmann::ordered_json BackendToJson(const BackendFlags& flags) {
  nlohmann::ordered_json json = {{"backend", flags.backend},
                                 {"threads", flags.threads},
                                 {"onednn_version", nullptr},
                                 {"onednn_isa", nullptr},
                                 {"direct_kernels", nullptr}};
  if (flags.backend != "cpu") return json;
  absl::StatusOr<backends::cpu::CpuIsaPaths> paths = backends::cpu::DescribeCpuIsaPaths();
  if (!paths.ok()) return json;
  json["onednn_version"] = paths->onednn_version;
  json["onednn_isa"] = paths->onednn_isa;
  json["direct_kernels"] = paths->direct_kernels;
  return json;
}

}  // namespace spillway::cli
