// What runs each op on the CUDA backend: cuDNN for convolutions, cuBLAS for
// matrix products, the backend's own kernels (cuda_kernels.h) for the rest.
// Internal to backends/cuda; CudaBackend owns one.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "backends/cuda/convolution.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/matmul.h"
#include "backends/kernel.h"

namespace spillway::backends::cuda {

// The geometry the pooling and reduction kernels take, from a call's
// attributes and shapes; the op tests also run the kernels' element
// arithmetic (element_math.h) with them on the host.
PoolGeometry MakePoolGeometry(const ir::AttrMap& attrs, const ir::Shape& x, const ir::Shape& y);
absl::StatusOr<ReduceGeometry> MakeReduceGeometry(const KernelCall& call);
CrossEntropy MakeCrossEntropy(const ir::AttrMap& attrs, const TensorRef& logits,
                              const TensorRef& labels);
// The activation a gelu, sigmoid, tanh, leaky_relu or clip node (or its
// gradient) computes, with its attributes; an error for any other op or an
// unknown gelu form.
absl::StatusOr<ActivationParams> MakeActivation(const ir::Node& node);

// The lines a softmax or log_softmax node (or its gradient) computes along
// its axis, for x's shape; an error for any other op, an axis outside x, or
// a causal softmax not along the last axis.
absl::StatusOr<SoftmaxGeometry> MakeSoftmaxGeometry(const ir::Node& node, const ir::Shape& x);

// Strided views of a transpose's input in its output's order, of a slice's
// window in its input (or, for slice_backward, in its gradient), and of an
// operand broadcast to an output shape; errors for attributes that do not
// fit the shapes, and for tensors of rank above kMaxStridedRank.
absl::StatusOr<StridedView> MakeStridedView(std::span<const int64_t> extent,
                                            std::span<const int64_t> strides, int64_t base);
absl::StatusOr<StridedView> MakeTransposeView(const ir::AttrMap& attrs, const ir::Shape& x);
absl::StatusOr<StridedView> MakeSliceView(const ir::AttrMap& attrs, const ir::Shape& x);
absl::StatusOr<StridedView> MakeBroadcastView(const ir::Shape& operand, const ir::Shape& out);
// Where x [n, h, w, c] lies in its copy with `pads` [top, left, bottom,
// right] of zeros around each image: how a convolution with padding cuDNN
// cannot describe (one side unlike the other) runs on a padded copy.
absl::StatusOr<StridedView> MakePaddedWindowView(const ir::Shape& x, std::span<const int64_t> pads);
// A concat's axis in its output y, and where input x (of y's rank) lies in y
// when it starts `offset` along that axis.
absl::StatusOr<int64_t> ConcatAxis(const ir::AttrMap& attrs, const ir::Shape& y);
absl::StatusOr<StridedView> MakeConcatView(int64_t axis, const ir::Shape& x, const ir::Shape& y,
                                           int64_t offset);
// The resize from x [n, h, w, c] to y [n, out_h, out_w, c] (for the backward
// op, x is dx's shape and y dy's).
ResizeGeometry MakeResizeGeometry(const ir::AttrMap& attrs, const ir::Shape& x, const ir::Shape& y);

// An adam_update node's hyperparameters (the reference kernel's defaults).
absl::StatusOr<AdamSettings> MakeAdamSettings(const ir::AttrMap& attrs);

class CudaOps {
 public:
  // The handles are the backend's; convolutions run as `convolution` says.
  CudaOps(cudnnHandle_t cudnn, const Cublas& cublas, const ConvolutionSettings& convolution);
  ~CudaOps();
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // Before a step, for each call it will run: chooses the convolution
  // algorithms and checks that the Program's workspace holds what each
  // kernel needs (convolution workspaces, batch norm's partial sums, the
  // loss's per-chunk sums). A call without a workspace (the op tests run
  // kernels one by one) uses scratch of the backend's own, grown to fit
  // here or in Run.
  absl::Status Prepare(const KernelCall& call);

  // Enqueues `call` on `stream`.
  absl::Status Run(cudaStream_t stream, const KernelCall& call);

  // "cuDNN 158 convolutions (12 shapes), cuBLAS 3, own kernels 342; 24.0 MiB
  // of scratch": what ran the calls prepared since the last Clear.
  std::string Summary() const;
  // Forgets the counts (a new Program); keeps the convolutions and scratch.
  void ClearCounts();

  // Device scratch held now, outside the Program's arena.
  int64_t scratch_bytes() const { return scratch_bytes_; }

 private:
  enum class Library { kCudnn, kCublas, kOwn };
  absl::StatusOr<const CudnnConvolution*> Convolution(const KernelCall& call);
  // Where `call`'s kernel keeps the `needed` bytes of its scratch: the
  // Program's workspace where the call carries one, else the backend's own,
  // grown to fit.
  absl::StatusOr<void*> Scratch(const KernelCall& call, int64_t needed);
  absl::Status EnsureScratch(int64_t bytes);
  // Where a convolution's algorithm workspace and its padded copy of x (if
  // it runs on one) go: the Program's workspace and the instruction's
  // scratch buffer, or without either (the op tests) the backend's own
  // scratch, the copy after the workspace.
  struct ConvolutionMemory {
    void* workspace = nullptr;
    void* copy = nullptr;
  };
  absl::StatusOr<ConvolutionMemory> MemoryFor(const KernelCall& call,
                                              const CudnnConvolution& convolution);

  cudnnHandle_t cudnn_;
  Cublas cublas_;
  ConvolutionSettings convolution_settings_;
  // By shapes and attributes: nodes alike share one.
  absl::flat_hash_map<std::string, std::unique_ptr<CudnnConvolution>> convolutions_;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  int64_t calls_[3] = {0, 0, 0};  // prepared calls per Library
};

}  // namespace spillway::backends::cuda
