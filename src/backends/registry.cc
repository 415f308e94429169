#include "backends/registry.h"

#include <functional>

#ifndef SPILLWAY_NO_CPU_BACKEND
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#endif
#ifdef SPILLWAY_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#include "backends/reference/reference_backend.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "support/status_macros.h"

namespace spillway::backends {
namespace {

using Factory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)>;

struct Entry {
  BackendInfo info;
  Factory make;
};

// A host backend computes in fp32 only.
absl::Status RefuseTf32(std::string_view backend, const BackendOptions& options) {
  if (!options.tf32) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "the {} backend computes in fp32 only; TF32 (--math-mode tf32) is the cuda backend's",
      backend));
}

#ifndef SPILLWAY_NO_CPU_BACKEND
absl::StatusOr<std::unique_ptr<Backend>> MakeCpu(const BackendOptions& options) {
  RETURN_IF_ERROR(RefuseTf32("cpu", options));
  RETURN_IF_ERROR(cpu::CheckCpuIsaEnvironment());
  return std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{.threads = options.threads});
}
#endif

absl::StatusOr<std::unique_ptr<Backend>> MakeReference(const BackendOptions& options) {
  RETURN_IF_ERROR(RefuseTf32("reference", options));
  return std::make_unique<reference::ReferenceBackend>();
}

#ifdef SPILLWAY_WITH_CUDA
absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(const BackendOptions& options) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::CudaBackend> backend,
      cuda::CudaBackend::Create({.tf32 = options.tf32, .deterministic = options.deterministic}));
  return std::unique_ptr<Backend>(std::move(backend));
}

Entry CudaEntry() {
  return {
      {"cuda",
       "an NVIDIA GPU: cuDNN, cuBLAS and kernels of its own; the ResNets' and VGG's ops so far"},
      MakeCuda};
}
#endif

// The default first: cpu, or in a build without it (SPILLWAY_CPU_BACKEND=OFF,
// the GPU-check build) cuda where it is built, else reference.
const std::vector<Entry>& Registry() {
  // Unformatted: clang-format indents a list that starts with a conditional entry oddly.
  // clang-format off
  static const std::vector<Entry>* entries = new std::vector<Entry>{
#ifndef SPILLWAY_NO_CPU_BACKEND
      {{"cpu", "oneDNN and OpenMP loops on the host"}, MakeCpu},
#elif defined(SPILLWAY_WITH_CUDA)
      CudaEntry(),
#endif
      {{"reference", "plain reference kernels, slow; for checking numbers"}, MakeReference},
#if defined(SPILLWAY_WITH_CUDA) && !defined(SPILLWAY_NO_CPU_BACKEND)
      CudaEntry(),
#endif
  };
  // clang-format on
  return *entries;
}

}  // namespace

const std::vector<BackendInfo>& ListLeftOutBackends() {
  static const std::vector<BackendInfo>* infos = new std::vector<BackendInfo>{
#ifdef SPILLWAY_NO_CPU_BACKEND
      {"cpu", "this build has no CPU backend (SPILLWAY_CPU_BACKEND=OFF)"},
#endif
  };
  return *infos;
}

const std::vector<BackendInfo>& ListBackends() {
  static const std::vector<BackendInfo>* infos = [] {
    auto* list = new std::vector<BackendInfo>;
    for (const Entry& entry : Registry()) list->push_back(entry.info);
    return list;
  }();
  return *infos;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name,
                                                     const BackendOptions& options) {
  std::vector<std::string_view> names;
  for (const Entry& entry : Registry()) {
    if (entry.info.name == name) return entry.make(options);
    names.push_back(entry.info.name);
  }
  for (const BackendInfo& left_out : ListLeftOutBackends()) {
    if (left_out.name == name) {
      return absl::NotFoundError(fmt::format("unknown backend '{}': {}; the backends are {}", name,
                                             left_out.description, fmt::join(names, ", ")));
    }
  }
  return absl::NotFoundError(
      fmt::format("unknown backend '{}'; the backends are {}", name, fmt::join(names, ", ")));
}

}  // namespace spillway::backends
