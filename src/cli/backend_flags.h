// --backend and --threads, shared by the commands that run kernels (train,
// forward): making the backend, and saying which code paths it took.
#pragma once

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "nlohmann/json.hpp"

namespace spillway::cli {

struct BackendFlags {
  std::string backend = "cpu";
  int threads = 2;
};

void AddBackendFlags(CLI::App& command, BackendFlags& flags);

// The backend the flags name, from the registry (backends/registry.h). The
// CPU backend's ISA switches (ONEDNN_MAX_CPU_ISA, SPILLWAY_DIRECT_KERNELS) are
// checked first, so a bad value is a one-line error rather than a silent default.
absl::StatusOr<std::unique_ptr<backends::Backend>> MakeBackend(const BackendFlags& flags);

// "cpu, 2 threads, oneDNN 2.6.3 on avx512_core, direct kernels avx512", or "reference".
std::string DescribeBackend(const BackendFlags& flags);

// The CPU backend's direct-kernel path ("avx512", "avx2", "generic") for
// these flags; empty for another backend or when it cannot be told.
std::string DirectKernelPath(const BackendFlags& flags);

// {"backend", "threads", "onednn_version", "onednn_isa", "direct_kernels"}:
// the configuration bits are reproducible for (docs/training.md). The last
// three are null for the reference backend.
nlohmann::ordered_json BackendToJson(const BackendFlags& flags);

}  // namespace spillway::cli
