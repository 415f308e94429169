#include "backends/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "fmt/format.h"
#include "support/status_macros.h"

namespace spillway::backends::cuda {
namespace {

template <typename Function>
absl::Status Resolve(void* handle, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(handle, name));
  if (function == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("cuBLAS has no function {} ({})", name, dlerror()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CublasLibrary> Open() {
  const std::string file = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  // Never closed: the backend's handles live as long as the process may use
  // them.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("cannot open cuBLAS ({}): {}", file, dlerror()));
  }
  CublasLibrary library;
  RETURN_IF_ERROR(Resolve(handle, "cublasCreate_v2", library.create));
  RETURN_IF_ERROR(Resolve(handle, "cublasDestroy_v2", library.destroy));
  RETURN_IF_ERROR(Resolve(handle, "cublasSetStream_v2", library.set_stream));
  RETURN_IF_ERROR(Resolve(handle, "cublasGetStream_v2", library.get_stream));
  RETURN_IF_ERROR(Resolve(handle, "cublasSgemm_v2", library.sgemm));
  RETURN_IF_ERROR(Resolve(handle, "cublasSgemmStridedBatched", library.sgemm_strided_batched));
  RETURN_IF_ERROR(Resolve(handle, "cublasGetStatusString", library.status_string));
  return library;
}

}  // namespace

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(Open());
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace spillway::backends::cuda
