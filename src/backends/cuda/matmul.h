// Matrix products through cuBLAS: matmul (batched, transposed, scaled, with
// a batch that is either the output's or broadcast whole), linear and
// linear's weight gradient. Row-major operands are handed to column-major
// cuBLAS as their transposes (C^T = B^T A^T), so nothing is copied. Plain
// fp32 (cuBLAS's default math: no TF32); cuBLAS gives the same bits on every
// run on one GPU model (no atomics unless asked for, which nothing here does).
#pragma once

#include <cublas_v2.h>

#include "absl/status/status.h"
#include "backends/cuda/cublas_library.h"
#include "backends/kernel.h"

namespace spillway::backends::cuda {

// Whether RunMatMul can run the node's shapes (which broadcasts it handles);
// Unimplemented saying why not.
absl::Status MatMulSupports(const ir::TensorType& a, const ir::TensorType& b,
                            const ir::TensorType& y);

// cuBLAS as the backend holds it: the opened library and a handle.
struct Cublas {
  const CublasLibrary* library = nullptr;
  cublasHandle_t handle = nullptr;
};

// Each runs `call` on the handle's stream.
absl::Status RunMatMul(const Cublas& blas, const KernelCall& call);
absl::Status RunLinear(const Cublas& blas, const KernelCall& call);
absl::Status RunLinearBackwardWeight(const Cublas& blas, const KernelCall& call);

}  // namespace spillway::backends::cuda
