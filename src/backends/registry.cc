#include "backends/registry.h"

#include <functional>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
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

absl::StatusOr<std::unique_ptr<Backend>> MakeCpu(const BackendOptions& options) {
  RETURN_IF_ERROR(cpu::CheckCpuIsaEnvironment());
  return std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{.threads = options.threads});
}

absl::StatusOr<std::unique_ptr<Backend>> MakeReference(const BackendOptions& /*options*/) {
  return std::make_unique<reference::ReferenceBackend>();
}

#ifdef SPILLWAY_WITH_CUDA
absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(const BackendOptions& /*options*/) {
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> backend, cuda::CudaBackend::Create({}));
  return std::unique_ptr<Backend>(std::move(backend));
}
#endif

const std::vector<Entry>& Registry() {
  static const std::vector<Entry>* entries = new std::vector<Entry>{
      {{"cpu", "oneDNN and OpenMP loops on the host"}, MakeCpu},
      {{"reference", "plain reference kernels, slow; for checking numbers"}, MakeReference},
#ifdef SPILLWAY_WITH_CUDA
      {{"cuda", "an NVIDIA GPU; runs element-wise ops only so far"}, MakeCuda},
#endif
  };
  return *entries;
}

}  // namespace

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
  return absl::NotFoundError(
      fmt::format("unknown backend '{}'; the backends are {}", name, fmt::join(names, ", ")));
}

}  // namespace spillway::backends
