// Backends by name: the one place that knows which backends are built in, for
// the command line and for library users. A backend is made by name with the
// options every backend understands.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace spillway::backends {

struct BackendOptions {
  // Threads each kernel may use where the backend runs kernels on the host
  // (the cpu backend); results are bitwise reproducible for a given count.
  int threads = 1;
  // Convolutions on TF32 tensor cores (`--math-mode tf32`; matrix products
  // stay fp32, as PyTorch's defaults). Only the cuda backend has them; the
  // others refuse it.
  bool tf32 = false;
  // False allows nondeterministic algorithms where they are faster (cuda):
  // the same step may then give different bits from run to run, and the
  // policies no longer train bitwise alike. The host backends are always
  // deterministic.
  bool deterministic = true;
};

struct BackendInfo {
  std::string name;
  std::string description;  // one line, for --help
};

// Every backend built in, in a fixed order (the default first: cpu, or cuda
// in a build without the CPU backend).
const std::vector<BackendInfo>& ListBackends();

// The backends Spillway has that this build leaves out, each with the reason
// as its description (the cpu backend with SPILLWAY_CPU_BACKEND=OFF); empty
// in the default build.
const std::vector<BackendInfo>& ListLeftOutBackends();

// NotFound naming the known backends for an unknown name (and the reason for
// one this build leaves out); the backend's own
// error where it cannot start here (the cpu backend: a bad ISA variable).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name,
                                                     const BackendOptions& options);

}  // namespace spillway::backends
