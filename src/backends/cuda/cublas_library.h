// cuBLAS, opened when the CUDA backend starts rather than when the program
// does. Linked normally, libcublasLt is mapped and relocated at every start
// of every command, about 200 MiB of resident memory and a tenth of a second
// even for `spillway models`; opened here, only a run on the GPU pays it.
// The functions the backend calls, resolved once (thread-safe).
#pragma once

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace spillway::backends::cuda {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasGetStream_v2) get_stream = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// libcublas.so.<the major version built against>, from the library path;
// FailedPrecondition saying what is missing where it cannot be opened.
absl::StatusOr<const CublasLibrary*> LoadCublas();

}  // namespace spillway::backends::cuda
