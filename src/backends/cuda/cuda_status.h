// CUDA, cuDNN and cuBLAS statuses as absl::Status errors that name what was
// being done. Errors of the device (a kernel that faulted) are Internal;
// running out of memory is ResourceExhausted; no device or driver is
// FailedPrecondition; a shape or setting the library does not run is
// Unimplemented. Internal to backends/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string_view>

#include "absl/status/status.h"

namespace spillway::backends::cuda {

absl::Status CheckCuda(cudaError_t error, std::string_view what);
absl::Status CheckCudnn(cudnnStatus_t status, std::string_view what);
absl::Status CheckCublas(cublasStatus_t status, std::string_view what);

}  // namespace spillway::backends::cuda
