#include "backends/cuda/convolution.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_status.h"
#include "fmt/format.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "program/workspaces.h"
#include "support/status_macros.h"

// cuDNN 9 marks its descriptor-based convolution API deprecated in favour of
// the graph API; it is still shipped and supported, and it is what the
// convolutions here need (no fusion), so its warnings are silenced here only.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace spillway::backends::cuda {
namespace {

enum class Direction { kForward, kBackwardData, kBackwardFilter };

template <typename Handle, cudnnStatus_t (*kDestroy)(Handle)>
struct Destroyer {
  void operator()(Handle handle) const { kDestroy(handle); }
};
template <typename Handle, cudnnStatus_t (*kDestroy)(Handle)>
using Owned = std::unique_ptr<std::remove_pointer_t<Handle>, Destroyer<Handle, kDestroy>>;

using TensorDescriptor = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

// [N, H, W, C] of an activation.
struct Nhwc {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t image() const { return h * w * c; }
};

absl::StatusOr<Nhwc> AsNhwc(const ir::Shape& shape, std::string_view role) {
  if (shape.size() != 4) {
    return absl::InvalidArgumentError(fmt::format("{} must be NHWC (rank 4)", role));
  }
  return Nhwc{shape[0], shape[1], shape[2], shape[3]};
}

// The largest divisor of the batch whose slices of both activations cuDNN
// can describe (at most INT_MAX elements each); 0 if one image is too large.
int64_t SliceOfBatch(const Nhwc& x, const Nhwc& y) {
  const int64_t image = std::max(x.image(), y.image());
  for (int64_t slice = x.n; slice >= 1; --slice) {
    if (x.n % slice == 0 && slice * image <= INT_MAX) return slice;
  }
  return 0;
}

int Int(int64_t value) { return static_cast<int>(value); }

// The first algorithm of cuDNN's ranking that ran the heuristics' checks,
// fits the workspace limit and, unless allowed otherwise, is deterministic;
// -1 if none. Its workspace goes to `workspace`. One template for the three
// directions' result types, which have the same fields.
template <typename Perf, size_t kCount>
int FirstAcceptable(const std::array<Perf, kCount>& ranked, int returned,
                    const ConvolutionSettings& settings, size_t* workspace) {
  for (const Perf& perf : std::span(ranked).first(static_cast<size_t>(returned))) {
    if (perf.status == CUDNN_STATUS_SUCCESS &&
        (!settings.deterministic || perf.determinism == CUDNN_DETERMINISTIC) &&
        static_cast<int64_t>(perf.memory) <= settings.workspace_limit) {
      *workspace = perf.memory;
      return static_cast<int>(perf.algo);
    }
  }
  return -1;
}

// x's type, the forward's input, whichever way the node computes.
const ir::TensorType& ActivationInput(const KernelCall& call) {
  switch (call.node.op) {
    case ir::OpKind::kConv2dBackwardData:
      return *call.outputs[0].type;
    case ir::OpKind::kConv2dBackwardWeight:
      return *call.inputs[1].type;
    default:
      return *call.inputs[0].type;
  }
}

}  // namespace

int64_t PaddedCopyBytes(const KernelCall& call) {
  return program::PaddedCopyBytes(call.node, ActivationInput(call));
}

struct CudnnConvolution::Descriptors {
  Direction direction = Direction::kForward;
  Nhwc x;
  Nhwc y;
  int64_t slice = 1;  // images per cuDNN call
  TensorDescriptor x_descriptor;
  TensorDescriptor y_descriptor;
  FilterDescriptor filter;
  ConvolutionDescriptor convolution;
  int algorithm = 0;
  int64_t algorithm_bytes = 0;  // the algorithm's workspace
  // With padding cuDNN cannot describe, `x` is the padded copy's shape (and
  // cuDNN pads nothing); `window` is where a slice of the real x lies in the
  // copy.
  int64_t x_image = 0;  // elements of one image of the real x
  bool padded = false;
  StridedView window;
};

CudnnConvolution::CudnnConvolution() : descriptors_(std::make_unique<Descriptors>()) {}
CudnnConvolution::~CudnnConvolution() = default;

absl::StatusOr<std::unique_ptr<CudnnConvolution>> CudnnConvolution::Create(
    cudnnHandle_t handle, const KernelCall& call, const ConvolutionSettings& settings) {
  const ir::Node& node = call.node;
  std::unique_ptr<CudnnConvolution> convolution(new CudnnConvolution());
  Descriptors& d = *convolution->descriptors_;
  // Which operand is which: x and y are the forward's activations, w its
  // filter, whatever the direction computes.
  const ir::Shape* x_shape = nullptr;
  const ir::Shape* w_shape = nullptr;
  const ir::Shape* y_shape = nullptr;
  switch (node.op) {
    case ir::OpKind::kConv2d:  // x, w -> y
      d.direction = Direction::kForward;
      x_shape = &call.inputs[0].type->shape;
      w_shape = &call.inputs[1].type->shape;
      y_shape = &call.outputs[0].type->shape;
      break;
    case ir::OpKind::kConv2dBackwardData:  // dy, w -> dx
      d.direction = Direction::kBackwardData;
      x_shape = &call.outputs[0].type->shape;
      w_shape = &call.inputs[1].type->shape;
      y_shape = &call.inputs[0].type->shape;
      break;
    case ir::OpKind::kConv2dBackwardWeight:  // dy, x -> dw
      d.direction = Direction::kBackwardFilter;
      x_shape = &call.inputs[1].type->shape;
      w_shape = &call.outputs[0].type->shape;
      y_shape = &call.inputs[0].type->shape;
      break;
    default:
      return absl::InvalidArgumentError("not a convolution");
  }
  ASSIGN_OR_RETURN(d.x, AsNhwc(*x_shape, "x"));
  ASSIGN_OR_RETURN(d.y, AsNhwc(*y_shape, "y"));
  if (w_shape->size() != 4) return absl::InvalidArgumentError("w must be OHWI (rank 4)");
  const ir::AttrMap& attrs = node.attrs;
  const ir::IntList strides = *attrs.GetInts("strides", {1, 1});
  const ir::IntList pads = *attrs.GetInts("pads", {0, 0, 0, 0});
  const ir::IntList dilations = *attrs.GetInts("dilations", {1, 1});
  const int64_t groups = *attrs.GetInt("groups", 1);
  if (pads.size() != 4) {
    return absl::InvalidArgumentError("pads must be [top, left, bottom, right]");
  }
  // cuDNN's padding, the same on both sides; otherwise none, on a padded copy.
  d.padded = pads[0] != pads[2] || pads[1] != pads[3];
  const Nhwc unpadded = d.x;
  d.x_image = unpadded.image();
  std::array<int64_t, 2> cudnn_pads = {pads[0], pads[1]};
  if (d.padded) {
    d.x.h += pads[0] + pads[2];
    d.x.w += pads[1] + pads[3];
    cudnn_pads = {0, 0};
  }
  d.slice = SliceOfBatch(d.x, d.y);
  // A padded copy holds one image: the workspace it takes does not grow with
  // the batch.
  if (d.padded) d.slice = std::min<int64_t>(d.slice, 1);
  if (d.slice == 0) {
    return absl::UnimplementedError(
        fmt::format("one image of {} or {} elements is more than cuDNN describes (2^31 - 1)",
                    d.x.image(), d.y.image()));
  }

  cudnnTensorDescriptor_t raw_x = nullptr;
  RETURN_IF_ERROR(CheckCudnn(cudnnCreateTensorDescriptor(&raw_x), "a tensor descriptor"));
  d.x_descriptor.reset(raw_x);
  cudnnTensorDescriptor_t raw_y = nullptr;
  RETURN_IF_ERROR(CheckCudnn(cudnnCreateTensorDescriptor(&raw_y), "a tensor descriptor"));
  d.y_descriptor.reset(raw_y);
  cudnnFilterDescriptor_t raw_filter = nullptr;
  RETURN_IF_ERROR(CheckCudnn(cudnnCreateFilterDescriptor(&raw_filter), "a filter descriptor"));
  d.filter.reset(raw_filter);
  cudnnConvolutionDescriptor_t raw_convolution = nullptr;
  RETURN_IF_ERROR(
      CheckCudnn(cudnnCreateConvolutionDescriptor(&raw_convolution), "a convolution descriptor"));
  d.convolution.reset(raw_convolution);

  RETURN_IF_ERROR(
      CheckCudnn(cudnnSetTensor4dDescriptor(raw_x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                            Int(d.slice), Int(d.x.c), Int(d.x.h), Int(d.x.w)),
                 "describing x"));
  RETURN_IF_ERROR(
      CheckCudnn(cudnnSetTensor4dDescriptor(raw_y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                            Int(d.slice), Int(d.y.c), Int(d.y.h), Int(d.y.w)),
                 "describing y"));
  // OHWI is cuDNN's NHWC filter layout (K, R, S, C).
  const ir::Shape& w = *w_shape;
  RETURN_IF_ERROR(
      CheckCudnn(cudnnSetFilter4dDescriptor(raw_filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC,
                                            Int(w[0]), Int(w[3]), Int(w[1]), Int(w[2])),
                 "describing w"));
  RETURN_IF_ERROR(CheckCudnn(
      cudnnSetConvolution2dDescriptor(raw_convolution, Int(cudnn_pads[0]), Int(cudnn_pads[1]),
                                      Int(strides[0]), Int(strides[1]), Int(dilations[0]),
                                      Int(dilations[1]), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "describing the convolution"));
  RETURN_IF_ERROR(CheckCudnn(cudnnSetConvolutionGroupCount(raw_convolution, Int(groups)),
                             "setting the group count"));
  RETURN_IF_ERROR(
      CheckCudnn(cudnnSetConvolutionMathType(raw_convolution,
                                             settings.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
                 "setting the math type"));

  // cuDNN's heuristic ranking, best first, for the direction.
  int chosen = -1;
  size_t workspace = 0;
  int returned = 0;
  switch (d.direction) {
    case Direction::kForward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> ranked{};
      RETURN_IF_ERROR(CheckCudnn(cudnnGetConvolutionForwardAlgorithm_v7(
                                     handle, raw_x, raw_filter, raw_convolution, raw_y,
                                     static_cast<int>(ranked.size()), &returned, ranked.data()),
                                 "ranking forward algorithms"));
      chosen = FirstAcceptable(ranked, returned, settings, &workspace);
      break;
    }
    case Direction::kBackwardData: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> ranked{};
      RETURN_IF_ERROR(CheckCudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                     handle, raw_filter, raw_y, raw_convolution, raw_x,
                                     static_cast<int>(ranked.size()), &returned, ranked.data()),
                                 "ranking backward-data algorithms"));
      chosen = FirstAcceptable(ranked, returned, settings, &workspace);
      break;
    }
    case Direction::kBackwardFilter: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>
          ranked{};
      RETURN_IF_ERROR(CheckCudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                     handle, raw_x, raw_y, raw_convolution, raw_filter,
                                     static_cast<int>(ranked.size()), &returned, ranked.data()),
                                 "ranking backward-filter algorithms"));
      chosen = FirstAcceptable(ranked, returned, settings, &workspace);
      break;
    }
  }
  if (chosen < 0) {
    return absl::UnimplementedError(fmt::format(
        "cuDNN has no {}algorithm for these shapes within a {}-byte workspace ({} "
        "ranked)",
        settings.deterministic ? "deterministic " : "", settings.workspace_limit, returned));
  }
  d.algorithm = chosen;
  d.algorithm_bytes = static_cast<int64_t>(workspace);
  convolution->workspace_bytes_ = d.algorithm_bytes;
  if (d.padded) {
    ASSIGN_OR_RETURN(d.window,
                     MakePaddedWindowView({d.slice, unpadded.h, unpadded.w, unpadded.c}, pads));
    convolution->copy_bytes_ = PaddedCopyBytes(call);
  }
  static constexpr std::array<std::string_view, 3> kDirections = {"forward", "backward data",
                                                                  "backward filter"};
  convolution->description_ =
      fmt::format("{}: algorithm {}, {} of workspace, {} image(s) per call{}",
                  kDirections[static_cast<size_t>(d.direction)], chosen, workspace, d.slice,
                  d.padded ? ", on a padded copy of x" : "");
  return convolution;
}

absl::Status CudnnConvolution::Run(cudnnHandle_t handle, const KernelCall& call, void* workspace,
                                   void* padded_copy) const {
  const Descriptors& d = *descriptors_;
  const size_t workspace_size = static_cast<size_t>(d.algorithm_bytes);
  const int64_t slices = d.x.n / d.slice;
  // Elements per slice of the real x (not of a padded copy) and of y.
  const int64_t x_step = d.slice * d.x_image;
  const int64_t y_step = d.slice * d.y.image();
  const float one = 1.0f;
  const float zero = 0.0f;
  const bool accumulates = d.direction == Direction::kBackwardData && call.inputs.size() == 3;
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CheckCudnn(cudnnGetStream(handle, &stream), "the convolution's stream"));
  if (accumulates && call.inputs[2].data != call.outputs[0].data) {
    RETURN_IF_ERROR(CheckCuda(cudaMemcpyAsync(call.outputs[0].data, call.inputs[2].data,
                                              static_cast<size_t>(call.outputs[0].type->bytes()),
                                              cudaMemcpyDeviceToDevice, stream),
                              "copying the accumulator"));
  }
  // The padded copy of a slice of x: zeros, with the slice in its window.
  float* const copy = d.padded ? static_cast<float*>(padded_copy) : nullptr;
  if (d.padded && copy == nullptr) {
    return absl::InternalError("a convolution padded unevenly was given no padded copy of x");
  }
  const int64_t slice_copy_bytes = d.slice * d.x.image() * static_cast<int64_t>(sizeof(float));
  auto pad_into_copy = [&](const float* slice) -> absl::Status {
    RETURN_IF_ERROR(
        CheckCuda(cudaMemsetAsync(copy, 0, static_cast<size_t>(slice_copy_bytes), stream),
                  "zeroing the padded copy"));
    return CheckCuda(LaunchPlace(slice, copy, sizeof(float), d.window, x_step, stream),
                     "padding x");
  };
  for (int64_t k = 0; k < slices; ++k) {
    switch (d.direction) {
      case Direction::kForward: {
        const float* x = call.inputs[0].as<const float>() + k * x_step;
        if (d.padded) {
          RETURN_IF_ERROR(pad_into_copy(x));
          x = copy;
        }
        float* y = call.outputs[0].as<float>() + k * y_step;
        RETURN_IF_ERROR(CheckCudnn(
            cudnnConvolutionForward(handle, &one, d.x_descriptor.get(), x, d.filter.get(),
                                    call.inputs[1].data, d.convolution.get(),
                                    static_cast<cudnnConvolutionFwdAlgo_t>(d.algorithm), workspace,
                                    workspace_size, &zero, d.y_descriptor.get(), y),
            "convolving"));
        break;
      }
      case Direction::kBackwardData: {
        const float* dy = call.inputs[0].as<const float>() + k * y_step;
        float* dx = call.outputs[0].as<float>() + k * x_step;
        // With acc, dx holds it (copied in above, or its own buffer) and
        // cuDNN adds the product to it; through a padded copy, the copy
        // holds it, and its window is dx.
        if (d.padded && accumulates) RETURN_IF_ERROR(pad_into_copy(dx));
        RETURN_IF_ERROR(CheckCudnn(
            cudnnConvolutionBackwardData(handle, &one, d.filter.get(), call.inputs[1].data,
                                         d.y_descriptor.get(), dy, d.convolution.get(),
                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(d.algorithm),
                                         workspace, workspace_size, accumulates ? &one : &zero,
                                         d.x_descriptor.get(), d.padded ? copy : dx),
            "the input gradient"));
        if (d.padded) {
          RETURN_IF_ERROR(CheckCuda(LaunchGather(copy, dx, sizeof(float), d.window, x_step, stream),
                                    "cropping the input gradient"));
        }
        break;
      }
      case Direction::kBackwardFilter: {
        const float* dy = call.inputs[0].as<const float>() + k * y_step;
        const float* x = call.inputs[1].as<const float>() + k * x_step;
        if (d.padded) {
          RETURN_IF_ERROR(pad_into_copy(x));
          x = copy;
        }
        // The first slice writes the gradient, each later one adds to it.
        const float* beta = k == 0 ? &zero : &one;
        RETURN_IF_ERROR(CheckCudnn(
            cudnnConvolutionBackwardFilter(
                handle, &one, d.x_descriptor.get(), x, d.y_descriptor.get(), dy,
                d.convolution.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(d.algorithm),
                workspace, workspace_size, beta, d.filter.get(), call.outputs[0].data),
            "the filter gradient"));
        break;
      }
    }
  }
  if (d.direction == Direction::kForward && call.inputs.size() == 3) {
    const TensorRef& y = call.outputs[0];
    RETURN_IF_ERROR(CheckCuda(LaunchAddBias(y.as<float>(), call.inputs[2].as<const float>(),
                                            y.num_elements(), d.y.c, stream),
                              "adding the bias"));
  }
  return absl::OkStatus();
}

}  // namespace spillway::backends::cuda
