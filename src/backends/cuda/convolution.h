// Convolutions through cuDNN: conv2d, conv2d_backward_data and
// conv2d_backward_weight of NHWC activations and OHWI filters (the IR's
// layouts, which cuDNN reads as they are: CUDNN_TENSOR_NHWC for both).
//
// The algorithm is chosen once per node from cuDNN's heuristics, which rank
// the algorithms for the shapes without running anything, so the choice is
// the same on every run: the first that cuDNN reports deterministic and that
// needs no more workspace than the limit. Math is plain fp32 (CUDNN_FMA_MATH:
// no TF32), as the `fp32` math mode means, or TF32 tensor-op math for `tf32`;
// with deterministic algorithms not required, cuDNN's first choice is taken.
//
// cuDNN's tensors hold at most 2^31 elements; a larger activation (the large
// images Spillway exists for) is convolved in slices of the batch, the
// largest that divide it and fit, the filter gradient accumulated over the
// slices in order.
//
// cuDNN pads both sides of an axis alike. A convolution padded otherwise
// (U-Net's 2x2 up-convolutions, padded on the bottom and the right) runs an
// image at a time on a copy of x with its padding written out as zeros, in
// the workspace after the algorithm's part (program/workspaces.h declares
// it): the forward and the filter gradient read x through the copy; the input
// gradient is computed into the copy (with the accumulator placed in it
// first) and its window copied out to dx.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/kernel.h"

namespace spillway::backends::cuda {

// How convolutions may run: the most workspace an algorithm may use, the
// math (plain fp32, or TF32 tensor cores), and whether only deterministic
// algorithms may be chosen.
struct ConvolutionSettings {
  int64_t workspace_limit = 0;
  bool tf32 = false;
  bool deterministic = true;
};

// The bytes of the padded copy of x the convolution of `call` runs on; 0
// where its padding is the same on both sides of each axis.
int64_t PaddedCopyBytes(const KernelCall& call);

class CudnnConvolution {
 public:
  // For the convolution node of `call` (only the types are read). Fails with
  // Unimplemented where cuDNN cannot run it (an image too large for one
  // slice, no algorithm within the settings' limit, which is for the
  // algorithm alone: a padded copy is apart from it).
  static absl::StatusOr<std::unique_ptr<CudnnConvolution>> Create(
      cudnnHandle_t handle, const KernelCall& call, const ConvolutionSettings& settings);
  ~CudnnConvolution();
  CudnnConvolution(const CudnnConvolution&) = delete;
  CudnnConvolution& operator=(const CudnnConvolution&) = delete;

  // The workspace the chosen algorithm needs, in bytes.
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // The padded copy of x it runs on (PaddedCopyBytes); 0 where it runs on x.
  int64_t copy_bytes() const { return copy_bytes_; }
  // "backward filter: algo 1 (deterministic), 2 slices of the batch", for reports.
  const std::string& description() const { return description_; }

  // Runs the call (same shapes as at Create) on the handle's stream, with
  // `workspace` of at least workspace_bytes() and, where copy_bytes() is not
  // 0, `copy` of that many bytes.
  absl::Status Run(cudnnHandle_t handle, const KernelCall& call, void* workspace, void* copy) const;

 private:
  struct Descriptors;
  CudnnConvolution();

  std::unique_ptr<Descriptors> descriptors_;
  int64_t workspace_bytes_ = 0;
  int64_t copy_bytes_ = 0;
  std::string description_;
};

}  // namespace spillway::backends::cuda
