#include "backends/cuda/cuda_status.h"

#include <string>

#include "backends/cuda/cublas_library.h"
#include "fmt/format.h"

namespace spillway::backends::cuda {
namespace {

// cuBLAS's own words for a status, where the library is open (it is opened
// when the backend starts, so a status to name means it is).
const char* CublasStatusText(cublasStatus_t status) {
  const absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  return library.ok() ? (*library)->status_string(status) : "cuBLAS not open";
}

}  // namespace

absl::Status CheckCuda(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = fmt::format("{}: CUDA error {} ({})", what, cudaGetErrorName(error),
                                          cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CheckCudnn(cudnnStatus_t status, std::string_view what) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = fmt::format("{}: cuDNN error {} ({})", what, static_cast<int>(status),
                                          cudnnGetErrorString(status));
  switch (status) {
    case CUDNN_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUDNN_STATUS_NOT_SUPPORTED:
      return absl::UnimplementedError(message);
    case CUDNN_STATUS_NOT_INITIALIZED:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CheckCublas(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = fmt::format("{}: cuBLAS error {} ({})", what,
                                          static_cast<int>(status), CublasStatusText(status));
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::UnimplementedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace spillway::backends::cuda
