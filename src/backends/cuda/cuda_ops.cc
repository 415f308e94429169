#include "backends/cuda/cuda_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/matmul.h"
#include "backends/strides.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "program/memory_layout.h"
#include "program/workspaces.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::backends::cuda {
namespace {

// The ops the backend runs, for CudaSupports and its message.
constexpr ir::OpKind kSupported[] = {
    ir::OpKind::kConv2d,
    ir::OpKind::kConv2dBackwardData,
    ir::OpKind::kConv2dBackwardWeight,
    ir::OpKind::kBatchNorm,
    ir::OpKind::kBatchNormBackward,
    ir::OpKind::kLayerNorm,
    ir::OpKind::kLayerNormBackward,
    ir::OpKind::kRelu,
    ir::OpKind::kReluBackward,
    ir::OpKind::kMaxPool,
    ir::OpKind::kMaxPoolBackward,
    ir::OpKind::kAvgPool,
    ir::OpKind::kAvgPoolBackward,
    ir::OpKind::kGlobalAvgPool,
    ir::OpKind::kGlobalAvgPoolBackward,
    ir::OpKind::kGelu,
    ir::OpKind::kGeluBackward,
    ir::OpKind::kSigmoid,
    ir::OpKind::kSigmoidBackward,
    ir::OpKind::kTanh,
    ir::OpKind::kTanhBackward,
    ir::OpKind::kLeakyRelu,
    ir::OpKind::kLeakyReluBackward,
    ir::OpKind::kClip,
    ir::OpKind::kClipBackward,
    ir::OpKind::kSoftmax,
    ir::OpKind::kSoftmaxBackward,
    ir::OpKind::kLogSoftmax,
    ir::OpKind::kLogSoftmaxBackward,
    ir::OpKind::kDropout,
    ir::OpKind::kDropoutBackward,
    ir::OpKind::kAdd,
    ir::OpKind::kSub,
    ir::OpKind::kMul,
    ir::OpKind::kDiv,
    ir::OpKind::kAddN,
    ir::OpKind::kMatMul,
    ir::OpKind::kLinear,
    ir::OpKind::kLinearBackwardWeight,
    ir::OpKind::kCrossEntropyLoss,
    ir::OpKind::kCrossEntropyLossBackward,
    ir::OpKind::kReduceSum,
    ir::OpKind::kReshape,
    ir::OpKind::kFlatten,
    ir::OpKind::kTranspose,
    ir::OpKind::kSlice,
    ir::OpKind::kSliceBackward,
    ir::OpKind::kConcat,
    ir::OpKind::kResizeBilinear,
    ir::OpKind::kResizeBilinearBackward,
    ir::OpKind::kResizeNearest,
    ir::OpKind::kResizeNearestBackward,
    ir::OpKind::kEmbedding,
    ir::OpKind::kEmbeddingBackward,
    ir::OpKind::kFill,
    ir::OpKind::kSgdUpdate,
    ir::OpKind::kAdamUpdate,
};

std::string SupportedNames() {
  std::vector<std::string_view> names;
  for (ir::OpKind op : kSupported) names.push_back(ir::OpName(op));
  return fmt::format("{}", fmt::join(names, ", "));
}

// The key under which alike convolutions share their cuDNN setup.
std::string ConvolutionKey(const KernelCall& call, int64_t limit) {
  std::string key = fmt::format("{} limit={} ", ir::OpName(call.node.op), limit);
  for (const TensorRef& operand : call.inputs) key += ir::TypeToString(*operand.type);
  key += ir::TypeToString(*call.outputs[0].type);
  for (const char* name : {"strides", "pads", "dilations"}) {
    key += fmt::format("{}={}", name, fmt::join(*call.node.attrs.GetInts(name, {}), ","));
  }
  key += fmt::format("groups={}", *call.node.attrs.GetInt("groups", 1));
  return key;
}

bool IsConvolution(ir::OpKind op) {
  return op == ir::OpKind::kConv2d || op == ir::OpKind::kConv2dBackwardData ||
         op == ir::OpKind::kConv2dBackwardWeight;
}

absl::Status Launched(cudaError_t error) { return CheckCuda(error, "launching the kernel"); }

// The n-th input as f32 data (null where the input is absent).
const float* In(const KernelCall& call, size_t index) {
  return index < call.inputs.size() ? call.inputs[index].as<const float>() : nullptr;
}
float* Out(const KernelCall& call, size_t index) {
  return index < call.outputs.size() ? call.outputs[index].as<float>() : nullptr;
}

// A fill value as the bits of the output's element type.
absl::StatusOr<uint64_t> FillBits(ir::DType dtype, double value) {
  switch (dtype) {
    case ir::DType::kF32: {
      const float f = static_cast<float>(value);
      uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof(f));
      return bits;
    }
    case ir::DType::kI32:
      return static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(value)));
    case ir::DType::kI64:
      return static_cast<uint64_t>(static_cast<int64_t>(value));
    case ir::DType::kBool:
      return uint64_t{value != 0.0 ? 1u : 0u};
    default:
      return absl::UnimplementedError(fmt::format(
          "fill of {} (the CUDA kernel fills f32, i32, i64, bool)", ir::DTypeName(dtype)));
  }
}

// The scratch the backend's own kernel for `call` takes (batch norm, the
// loss; 0 for the others), by the rule the planner declares it with.
int64_t OwnScratchBytes(const KernelCall& call) {
  absl::InlinedVector<const ir::TensorType*, 8> inputs;
  for (const TensorRef& input : call.inputs) inputs.push_back(input.type);
  return program::OwnKernelScratchBytes(call.node.op, inputs);
}

}  // namespace

absl::StatusOr<ActivationParams> MakeActivation(const ir::Node& node) {
  ActivationParams params;
  switch (node.op) {
    case ir::OpKind::kGelu:
    case ir::OpKind::kGeluBackward: {
      // Not moved out of the StatusOr: GCC 12 at -O3 then wrongly warns of an
      // uninitialized string.
      const absl::StatusOr<std::string> approximate_or =
          node.attrs.GetString("approximate", "none");
      if (!approximate_or.ok()) return approximate_or.status();
      const std::string& approximate = *approximate_or;
      if (approximate != "none" && approximate != "tanh") {
        return absl::InvalidArgumentError(
            fmt::format("gelu: unknown approximate \"{}\"", approximate));
      }
      params.kind = approximate == "tanh" ? Activation::kGeluTanh : Activation::kGelu;
      return params;
    }
    case ir::OpKind::kSigmoid:
    case ir::OpKind::kSigmoidBackward:
      params.kind = Activation::kSigmoid;
      return params;
    case ir::OpKind::kTanh:
    case ir::OpKind::kTanhBackward:
      params.kind = Activation::kTanh;
      return params;
    case ir::OpKind::kLeakyRelu:
    case ir::OpKind::kLeakyReluBackward: {
      params.kind = Activation::kLeakyRelu;
      ASSIGN_OR_RETURN(const double alpha, node.attrs.GetFloat("alpha", 0.01));
      params.alpha = static_cast<float>(alpha);
      return params;
    }
    case ir::OpKind::kClip:
    case ir::OpKind::kClipBackward: {
      params.kind = Activation::kClip;
      constexpr double kInf = std::numeric_limits<double>::infinity();
      ASSIGN_OR_RETURN(const double min, node.attrs.GetFloat("min", -kInf));
      ASSIGN_OR_RETURN(const double max, node.attrs.GetFloat("max", kInf));
      params.min = static_cast<float>(min);
      params.max = static_cast<float>(max);
      return params;
    }
    default:
      return absl::InvalidArgumentError(
          fmt::format("{} is not an activation", ir::OpName(node.op)));
  }
}

absl::StatusOr<SoftmaxGeometry> MakeSoftmaxGeometry(const ir::Node& node, const ir::Shape& x) {
  SoftmaxGeometry g;
  switch (node.op) {
    case ir::OpKind::kSoftmax:
    case ir::OpKind::kSoftmaxBackward:
      g.kind = SoftmaxKind::kSoftmax;
      break;
    case ir::OpKind::kLogSoftmax:
    case ir::OpKind::kLogSoftmaxBackward:
      g.kind = SoftmaxKind::kLogSoftmax;
      break;
    default:
      return absl::InvalidArgumentError(fmt::format("{} is not a softmax", ir::OpName(node.op)));
  }
  const auto rank = static_cast<int64_t>(x.size());
  ASSIGN_OR_RETURN(const int64_t given, node.attrs.GetInt("axis", -1));
  ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(given, rank));
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t extent = x[static_cast<size_t>(d)];
    if (d < axis) g.outer *= extent;
    if (d == axis) g.length = extent;
    if (d > axis) g.inner *= extent;
  }
  // Only the forward softmax masks: its gradient is 0 where y is.
  if (node.op == ir::OpKind::kSoftmax) {
    ASSIGN_OR_RETURN(const bool causal, node.attrs.GetBool("causal", false));
    if (causal) {
      if (rank < 2 || axis != rank - 1) {
        return absl::InvalidArgumentError(
            "a causal softmax runs along the last axis of [..., queries, keys]");
      }
      g.causal_queries = x[static_cast<size_t>(rank - 2)];
    }
  }
  return g;
}

absl::StatusOr<StridedView> MakeStridedView(std::span<const int64_t> extent,
                                            std::span<const int64_t> strides, int64_t base) {
  if (extent.size() > static_cast<size_t>(kMaxStridedRank) || strides.size() != extent.size()) {
    return absl::UnimplementedError(
        fmt::format("the CUDA backend indexes tensors of rank {} at most, not {}", kMaxStridedRank,
                    extent.size()));
  }
  StridedView view;
  view.rank = static_cast<int>(extent.size());
  std::copy(extent.begin(), extent.end(), view.extent);
  std::copy(strides.begin(), strides.end(), view.stride);
  view.base = base;
  return view;
}

absl::StatusOr<StridedView> MakeTransposeView(const ir::AttrMap& attrs, const ir::Shape& x) {
  ASSIGN_OR_RETURN(const ir::IntList perm, attrs.GetInts("perm"));
  if (perm.size() != x.size()) {
    return absl::InvalidArgumentError(fmt::format("perm [{}] does not permute the {} axes of {}",
                                                  fmt::join(perm, ", "), x.size(),
                                                  ir::ShapeToString(x)));
  }
  const std::vector<int64_t> dense = RowMajorStrides(x);
  std::vector<int64_t> extent(perm.size());
  std::vector<int64_t> strides(perm.size());
  std::vector<bool> seen(perm.size(), false);
  for (size_t d = 0; d < perm.size(); ++d) {
    const int64_t axis = perm[d];
    if (axis < 0 || axis >= static_cast<int64_t>(x.size()) || seen[static_cast<size_t>(axis)]) {
      return absl::InvalidArgumentError(fmt::format("perm [{}] is not a permutation of {} axes",
                                                    fmt::join(perm, ", "), x.size()));
    }
    seen[static_cast<size_t>(axis)] = true;
    extent[d] = x[static_cast<size_t>(axis)];
    strides[d] = dense[static_cast<size_t>(axis)];
  }
  return MakeStridedView(extent, strides, 0);
}

absl::StatusOr<StridedView> MakeSliceView(const ir::AttrMap& attrs, const ir::Shape& x) {
  ASSIGN_OR_RETURN(const SliceWindow window, ResolveSliceWindow(attrs, x));
  return MakeStridedView(window.shape, window.strides, window.base);
}

absl::StatusOr<StridedView> MakePaddedWindowView(const ir::Shape& x,
                                                 std::span<const int64_t> pads) {
  if (x.size() != 4 || pads.size() != 4) {
    return absl::InvalidArgumentError(
        fmt::format("padding {} needs an NHWC tensor and four pads", ir::ShapeToString(x)));
  }
  const std::array<int64_t, 4> padded = {x[0], x[1] + pads[0] + pads[2], x[2] + pads[1] + pads[3],
                                         x[3]};
  const std::vector<int64_t> strides = RowMajorStrides(padded);
  return MakeStridedView(x, strides, pads[0] * strides[1] + pads[1] * strides[2]);
}

absl::StatusOr<int64_t> ConcatAxis(const ir::AttrMap& attrs, const ir::Shape& y) {
  ASSIGN_OR_RETURN(const int64_t given, attrs.GetInt("axis"));
  return NormalizeAxis(given, static_cast<int64_t>(y.size()));
}

absl::StatusOr<StridedView> MakeConcatView(int64_t axis, const ir::Shape& x, const ir::Shape& y,
                                           int64_t offset) {
  if (x.size() != y.size() || axis < 0 || axis >= static_cast<int64_t>(y.size())) {
    return absl::InvalidArgumentError(fmt::format("concat input {} does not fit the output {}",
                                                  ir::ShapeToString(x), ir::ShapeToString(y)));
  }
  const std::vector<int64_t> strides = RowMajorStrides(y);
  return MakeStridedView(x, strides, offset * strides[static_cast<size_t>(axis)]);
}

ResizeGeometry MakeResizeGeometry(const ir::AttrMap& attrs, const ir::Shape& x,
                                  const ir::Shape& y) {
  ResizeGeometry g;
  g.n = x[0];
  g.h = x[1];
  g.w = x[2];
  g.c = x[3];
  g.out_h = y[1];
  g.out_w = y[2];
  g.align_corners = *attrs.GetBool("align_corners", false);
  return g;
}

absl::StatusOr<StridedView> MakeBroadcastView(const ir::Shape& operand, const ir::Shape& out) {
  if (!BroadcastsTo(operand, out)) {
    return absl::InvalidArgumentError(fmt::format(
        "{} does not broadcast to {}", ir::ShapeToString(operand), ir::ShapeToString(out)));
  }
  return MakeStridedView(out, BroadcastStrides(operand, out), 0);
}

absl::StatusOr<AdamSettings> MakeAdamSettings(const ir::AttrMap& attrs) {
  AdamSettings s;
  ASSIGN_OR_RETURN(s.lr, attrs.GetFloat("lr"));
  ASSIGN_OR_RETURN(s.beta1, attrs.GetFloat("beta1", 0.9));
  ASSIGN_OR_RETURN(s.beta2, attrs.GetFloat("beta2", 0.999));
  ASSIGN_OR_RETURN(s.epsilon, attrs.GetFloat("epsilon", 1e-8));
  ASSIGN_OR_RETURN(s.weight_decay, attrs.GetFloat("weight_decay", 0.0));
  ASSIGN_OR_RETURN(s.decoupled, attrs.GetBool("decoupled", true));
  return s;
}

PoolGeometry MakePoolGeometry(const ir::AttrMap& attrs, const ir::Shape& x, const ir::Shape& y) {
  const ir::IntList kernel = attrs.Ints("kernel");
  const ir::IntList strides = *attrs.GetInts("strides", kernel);
  const ir::IntList pads = *attrs.GetInts("pads", {0, 0, 0, 0});
  PoolGeometry g;
  g.n = x[0];
  g.h = x[1];
  g.w = x[2];
  g.c = x[3];
  g.out_h = y[1];
  g.out_w = y[2];
  g.kernel_h = kernel[0];
  g.kernel_w = kernel[1];
  g.stride_h = strides[0];
  g.stride_w = strides[1];
  g.pad_top = pads[0];
  g.pad_left = pads[1];
  g.count_include_pad = *attrs.GetBool("count_include_pad", false);
  return g;
}

absl::StatusOr<ReduceGeometry> MakeReduceGeometry(const KernelCall& call) {
  const ir::Shape& shape = call.inputs[0].type->shape;
  const int rank = static_cast<int>(shape.size());
  if (rank > kMaxReduceRank) {
    return absl::UnimplementedError(fmt::format(
        "reduce_sum over rank {} (the CUDA kernel takes up to {})", rank, kMaxReduceRank));
  }
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t axis : call.node.attrs.Ints("axes")) {
    reduced[static_cast<size_t>(axis < 0 ? axis + rank : axis)] = true;
  }
  ReduceGeometry g;
  int64_t stride = 1;
  std::vector<int64_t> strides(shape.size());
  for (int d = rank - 1; d >= 0; --d) {
    strides[static_cast<size_t>(d)] = stride;
    stride *= shape[static_cast<size_t>(d)];
  }
  for (int d = 0; d < rank; ++d) {
    const size_t axis = static_cast<size_t>(d);
    if (reduced[axis]) {
      g.reduced_extent[g.reduced_rank] = shape[axis];
      g.reduced_stride[g.reduced_rank++] = strides[axis];
    } else {
      g.kept_extent[g.kept_rank] = shape[axis];
      g.kept_stride[g.kept_rank++] = strides[axis];
    }
  }
  return g;
}

CrossEntropy MakeCrossEntropy(const ir::AttrMap& attrs, const TensorRef& logits,
                              const TensorRef& labels) {
  CrossEntropy settings;
  settings.rows = labels.num_elements();
  settings.classes = logits.type->shape.back();
  settings.ignore_index = *attrs.GetInt("ignore_index", -100);
  settings.mean = *attrs.GetString("reduction", "mean") == "mean";
  settings.labels_i32 = labels.type->dtype == ir::DType::kI32;
  return settings;
}

// The most workspace a convolution algorithm for `call` may use: the
// backend's limit, and no more than the Program's workspace where the call
// carries one (a padded copy of x is not in it, but in the instruction's
// scratch buffer).
int64_t ConvolutionLimit(const KernelCall& call, int64_t backend_limit) {
  if (call.workspace == nullptr) return backend_limit;
  return std::min(backend_limit, call.workspace_bytes);
}

bool CudaHasKernel(ir::OpKind op) {
  return std::find(std::begin(kSupported), std::end(kSupported), op) != std::end(kSupported);
}

absl::Status CudaSupports(const ir::Graph& graph, const ir::Node& node) {
  if (!CudaHasKernel(node.op)) {
    return absl::UnimplementedError(fmt::format(
        "the CUDA backend has no kernel for this op yet (it runs {})", SupportedNames()));
  }
  const auto type = [&](ir::ValueId id) -> const ir::TensorType& { return graph.value(id).type; };
  for (ir::ValueId id : node.inputs) {
    const ir::DType dtype = type(id).dtype;
    if (ir::IsFloating(dtype) && dtype != ir::DType::kF32) {
      return absl::UnimplementedError(
          fmt::format("the CUDA backend runs f32 tensors, not {}", ir::DTypeName(dtype)));
    }
  }
  const auto strided = [&](const ir::Shape& shape) -> absl::Status {
    if (shape.size() <= static_cast<size_t>(kMaxStridedRank)) return absl::OkStatus();
    return absl::UnimplementedError(
        fmt::format("the CUDA backend indexes tensors of rank {} at most", kMaxStridedRank));
  };
  switch (node.op) {
    case ir::OpKind::kAdd:
    case ir::OpKind::kSub:
    case ir::OpKind::kMul:
    case ir::OpKind::kDiv:
      if (type(node.outputs[0]).dtype != ir::DType::kF32) {
        return absl::UnimplementedError("the CUDA add, sub, mul and div take f32 tensors");
      }
      return strided(type(node.outputs[0]).shape);
    case ir::OpKind::kTranspose:
    case ir::OpKind::kSlice:
      return strided(type(node.inputs[0]).shape);
    case ir::OpKind::kSliceBackward:
    case ir::OpKind::kConcat:
      return strided(type(node.outputs[0]).shape);
    case ir::OpKind::kReluBackward:
    case ir::OpKind::kGeluBackward:
    case ir::OpKind::kSigmoidBackward:
    case ir::OpKind::kTanhBackward:
    case ir::OpKind::kLeakyReluBackward:
    case ir::OpKind::kClipBackward:
      if (type(node.inputs[0]).shape != type(node.inputs[1]).shape) {
        return absl::UnimplementedError(
            "the CUDA kernel takes operands of one shape (no broadcasting yet)");
      }
      break;
    case ir::OpKind::kAddN:
      // One launch sums every input, so the output may be written over any
      // of them and the order of the sum never depends on which.
      if (node.inputs.size() > static_cast<size_t>(kMaxAddNInputs)) {
        return absl::UnimplementedError(fmt::format("the CUDA add_n sums at most {} inputs, not {}",
                                                    kMaxAddNInputs, node.inputs.size()));
      }
      for (ir::ValueId id : node.inputs) {
        if (type(id).dtype != ir::DType::kF32) {
          return absl::UnimplementedError("the CUDA add_n sums f32 tensors");
        }
      }
      break;
    case ir::OpKind::kMatMul:
      return MatMulSupports(type(node.inputs[0]), type(node.inputs[1]), type(node.outputs[0]));
    case ir::OpKind::kReduceSum:
      if (type(node.inputs[0]).rank() > kMaxReduceRank) {
        return absl::UnimplementedError(
            fmt::format("the CUDA reduce_sum takes up to rank {}", kMaxReduceRank));
      }
      break;
    case ir::OpKind::kFill:
      return FillBits(type(node.outputs[0]).dtype, 0.0).status();
    default:
      break;
  }
  return absl::OkStatus();
}

CudaOps::CudaOps(cudnnHandle_t cudnn, const Cublas& cublas, const ConvolutionSettings& convolution)
    : cudnn_(cudnn), cublas_(cublas), convolution_settings_(convolution) {}

CudaOps::~CudaOps() {
  if (scratch_ != nullptr) cudaFree(scratch_);
}

absl::StatusOr<const CudnnConvolution*> CudaOps::Convolution(const KernelCall& call) {
  ConvolutionSettings settings = convolution_settings_;
  settings.workspace_limit = ConvolutionLimit(call, settings.workspace_limit);
  const std::string key = ConvolutionKey(call, settings.workspace_limit);
  auto it = convolutions_.find(key);
  if (it == convolutions_.end()) {
    ASSIGN_OR_RETURN(std::unique_ptr<CudnnConvolution> convolution,
                     CudnnConvolution::Create(cudnn_, call, settings));
    it = convolutions_.emplace(key, std::move(convolution)).first;
  }
  return it->second.get();
}

absl::StatusOr<void*> CudaOps::Scratch(const KernelCall& call, int64_t needed) {
  if (call.workspace != nullptr) {
    // The planner declared every node's need (program/workspaces.h) and the
    // Program reserved the largest: a shortfall is a planning bug.
    if (needed > call.workspace_bytes) {
      return absl::InternalError(
          fmt::format("the kernel needs {} of workspace and the Program reserves {}",
                      FormatBytes(needed), FormatBytes(call.workspace_bytes)));
    }
    return call.workspace;
  }
  RETURN_IF_ERROR(EnsureScratch(needed));
  return scratch_;
}

absl::StatusOr<CudaOps::ConvolutionMemory> CudaOps::MemoryFor(const KernelCall& call,
                                                              const CudnnConvolution& convolution) {
  const int64_t copy = convolution.copy_bytes();
  if (call.workspace == nullptr && call.scratch == nullptr) {
    // The copy after the workspace, at cudaMalloc's alignment.
    constexpr int64_t kAlignment = program::kArenaAlignment;
    const int64_t offset =
        (convolution.workspace_bytes() + kAlignment - 1) / kAlignment * kAlignment;
    RETURN_IF_ERROR(EnsureScratch(copy > 0 ? offset + copy : convolution.workspace_bytes()));
    return ConvolutionMemory{scratch_,
                             copy > 0 ? static_cast<std::byte*>(scratch_) + offset : nullptr};
  }
  ASSIGN_OR_RETURN(void* const workspace, Scratch(call, convolution.workspace_bytes()));
  // The planner declared the copy as the instruction's scratch
  // (program/workspaces.h): a shortfall is a planning bug.
  if (copy > call.scratch_bytes) {
    return absl::InternalError(
        fmt::format("the convolution needs {} for its padded copy of x and the Program gives it {} "
                    "of scratch",
                    FormatBytes(copy), FormatBytes(call.scratch_bytes)));
  }
  return ConvolutionMemory{workspace, copy > 0 ? call.scratch : nullptr};
}

absl::Status CudaOps::EnsureScratch(int64_t bytes) {
  if (bytes <= scratch_bytes_) return absl::OkStatus();
  // Only before a step (or between the op tests' kernels): cudaFree waits for
  // the device, so no kernel still reads the old scratch.
  if (scratch_ != nullptr) RETURN_IF_ERROR(CheckCuda(cudaFree(scratch_), "freeing scratch"));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  RETURN_IF_ERROR(CheckCuda(cudaMalloc(&scratch_, static_cast<size_t>(bytes)),
                            fmt::format("allocating {} of kernel scratch", FormatBytes(bytes))));
  scratch_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status CudaOps::Prepare(const KernelCall& call) {
  if (IsConvolution(call.node.op)) {
    ASSIGN_OR_RETURN(const CudnnConvolution* convolution, Convolution(call));
    RETURN_IF_ERROR(MemoryFor(call, *convolution).status());
  } else {
    RETURN_IF_ERROR(Scratch(call, OwnScratchBytes(call)).status());
  }
  const Library library =
      IsConvolution(call.node.op) ? Library::kCudnn
      : (call.node.op == ir::OpKind::kMatMul || call.node.op == ir::OpKind::kLinear ||
         call.node.op == ir::OpKind::kLinearBackwardWeight)
          ? Library::kCublas
          : Library::kOwn;
  ++calls_[static_cast<int>(library)];
  return absl::OkStatus();
}

void CudaOps::ClearCounts() { std::fill(std::begin(calls_), std::end(calls_), 0); }

std::string CudaOps::Summary() const {
  return fmt::format(
      "cuDNN {} calls ({} convolution setups), cuBLAS {}, own kernels {}; {} of "
      "scratch outside the arena",
      calls_[0], convolutions_.size(), calls_[1], calls_[2], FormatBytes(scratch_bytes_));
}

absl::Status CudaOps::Run(cudaStream_t stream, const KernelCall& call) {
  const ir::Node& node = call.node;
  // Batch norm and the loss keep sums in scratch; a convolution gets its
  // workspace below, once its setup is found.
  void* scratch = nullptr;
  if (const int64_t own = OwnScratchBytes(call); own > 0) {
    ASSIGN_OR_RETURN(scratch, Scratch(call, own));
  }
  const TensorRef& y = call.outputs[0];
  switch (node.op) {
    case ir::OpKind::kRelu:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(LaunchRelu(In(call, 0), y.as<float>(), y.num_elements(), stream));
    case ir::OpKind::kReluBackward:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(
          LaunchReluBackward(In(call, 0), In(call, 1), y.as<float>(), y.num_elements(), stream));
    case ir::OpKind::kAdd:
    case ir::OpKind::kSub:
    case ir::OpKind::kMul:
    case ir::OpKind::kDiv: {
      if (y.data == nullptr) return absl::OkStatus();
      const BinaryOp op = node.op == ir::OpKind::kAdd   ? BinaryOp::kAdd
                          : node.op == ir::OpKind::kSub ? BinaryOp::kSub
                          : node.op == ir::OpKind::kMul ? BinaryOp::kMul
                                                        : BinaryOp::kDiv;
      const ir::Shape& a = call.inputs[0].type->shape;
      const ir::Shape& b = call.inputs[1].type->shape;
      if (a == y.type->shape && b == y.type->shape) {
        return Launched(
            LaunchBinary(op, In(call, 0), In(call, 1), y.as<float>(), y.num_elements(), stream));
      }
      ASSIGN_OR_RETURN(const StridedView a_view, MakeBroadcastView(a, y.type->shape));
      ASSIGN_OR_RETURN(const StridedView b_view, MakeBroadcastView(b, y.type->shape));
      return Launched(LaunchBroadcastBinary(op, In(call, 0), a_view, In(call, 1), b_view,
                                            y.as<float>(), y.num_elements(), stream));
    }
    case ir::OpKind::kTranspose:
    case ir::OpKind::kSlice: {
      if (y.data == nullptr) return absl::OkStatus();
      const ir::Shape& x = call.inputs[0].type->shape;
      ASSIGN_OR_RETURN(const StridedView view, node.op == ir::OpKind::kTranspose
                                                   ? MakeTransposeView(node.attrs, x)
                                                   : MakeSliceView(node.attrs, x));
      return Launched(LaunchGather(call.inputs[0].data, y.data,
                                   static_cast<int>(ir::DTypeSize(y.type->dtype)), view,
                                   y.num_elements(), stream));
    }
    case ir::OpKind::kSliceBackward: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const StridedView view, MakeSliceView(node.attrs, y.type->shape));
      RETURN_IF_ERROR(
          CheckCuda(cudaMemsetAsync(y.data, 0, static_cast<size_t>(y.type->bytes()), stream),
                    "zeroing the gradient"));
      return Launched(LaunchPlace(call.inputs[0].data, y.data, sizeof(float), view,
                                  call.inputs[0].num_elements(), stream));
    }
    case ir::OpKind::kConcat: {
      if (y.data == nullptr) return absl::OkStatus();
      const auto element_bytes = static_cast<int>(ir::DTypeSize(y.type->dtype));
      ASSIGN_OR_RETURN(const int64_t axis, ConcatAxis(node.attrs, y.type->shape));
      int64_t offset = 0;  // along the axis, where the next input goes
      for (const TensorRef& x : call.inputs) {
        ASSIGN_OR_RETURN(const StridedView view,
                         MakeConcatView(axis, x.type->shape, y.type->shape, offset));
        RETURN_IF_ERROR(
            Launched(LaunchPlace(x.data, y.data, element_bytes, view, x.num_elements(), stream)));
        offset += x.type->shape[static_cast<size_t>(axis)];
      }
      return absl::OkStatus();
    }
    case ir::OpKind::kResizeBilinear:
    case ir::OpKind::kResizeNearest: {
      if (y.data == nullptr) return absl::OkStatus();
      const ResizeGeometry g =
          MakeResizeGeometry(node.attrs, call.inputs[0].type->shape, y.type->shape);
      return Launched(node.op == ir::OpKind::kResizeBilinear
                          ? LaunchResizeBilinear(In(call, 0), y.as<float>(), g, stream)
                          : LaunchResizeNearest(In(call, 0), y.as<float>(), g, stream));
    }
    case ir::OpKind::kResizeBilinearBackward:
    case ir::OpKind::kResizeNearestBackward: {
      if (y.data == nullptr) return absl::OkStatus();
      const ResizeGeometry g =
          MakeResizeGeometry(node.attrs, y.type->shape, call.inputs[0].type->shape);
      return Launched(node.op == ir::OpKind::kResizeBilinearBackward
                          ? LaunchResizeBilinearBackward(In(call, 0), y.as<float>(), g, stream)
                          : LaunchResizeNearestBackward(In(call, 0), y.as<float>(), g, stream));
    }
    case ir::OpKind::kEmbedding: {
      if (y.data == nullptr) return absl::OkStatus();
      const TensorRef& indices = call.inputs[1];
      const ir::Shape& table = call.inputs[0].type->shape;
      return Launched(
          LaunchEmbedding(In(call, 0), indices.data, indices.type->dtype == ir::DType::kI32,
                          indices.num_elements(), table[0], table[1], y.as<float>(), stream));
    }
    case ir::OpKind::kEmbeddingBackward: {
      if (y.data == nullptr) return absl::OkStatus();
      const TensorRef& indices = call.inputs[1];
      const ir::Shape& table = y.type->shape;
      return Launched(LaunchEmbeddingBackward(
          In(call, 0), indices.data, indices.type->dtype == ir::DType::kI32, indices.num_elements(),
          table[0], table[1], y.as<float>(), stream));
    }
    case ir::OpKind::kGelu:
    case ir::OpKind::kSigmoid:
    case ir::OpKind::kTanh:
    case ir::OpKind::kLeakyRelu:
    case ir::OpKind::kClip: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const ActivationParams params, MakeActivation(node));
      return Launched(
          LaunchActivation(params, In(call, 0), y.as<float>(), y.num_elements(), stream));
    }
    case ir::OpKind::kGeluBackward:
    case ir::OpKind::kSigmoidBackward:
    case ir::OpKind::kTanhBackward:
    case ir::OpKind::kLeakyReluBackward:
    case ir::OpKind::kClipBackward: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const ActivationParams params, MakeActivation(node));
      return Launched(LaunchActivationGradient(params, In(call, 0), In(call, 1), y.as<float>(),
                                               y.num_elements(), stream));
    }
    case ir::OpKind::kSoftmax:
    case ir::OpKind::kLogSoftmax: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const SoftmaxGeometry geometry,
                       MakeSoftmaxGeometry(node, call.inputs[0].type->shape));
      return Launched(LaunchSoftmax(geometry, In(call, 0), y.as<float>(), stream));
    }
    case ir::OpKind::kSoftmaxBackward:
    case ir::OpKind::kLogSoftmaxBackward: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const SoftmaxGeometry geometry,
                       MakeSoftmaxGeometry(node, call.inputs[0].type->shape));
      return Launched(
          LaunchSoftmaxBackward(geometry, In(call, 0), In(call, 1), y.as<float>(), stream));
    }
    case ir::OpKind::kDropout:
    case ir::OpKind::kDropoutBackward: {
      if (y.data == nullptr) return absl::OkStatus();
      const double p = node.attrs.Float("p");
      if (!(p >= 0.0 && p < 1.0)) {
        return absl::InvalidArgumentError(fmt::format("p must be in [0, 1), got {}", p));
      }
      return Launched(LaunchDropout(In(call, 0), y.as<float>(), y.num_elements(),
                                    static_cast<uint64_t>(node.attrs.Int("seed")),
                                    call.context.step, p, stream));
    }
    case ir::OpKind::kAddN: {
      if (y.data == nullptr) return absl::OkStatus();
      if (call.inputs.size() > static_cast<size_t>(kMaxAddNInputs)) {
        return absl::UnimplementedError("add_n of more inputs than one launch takes");
      }
      AddNInputs inputs;
      for (size_t k = 0; k < call.inputs.size(); ++k) inputs.items[inputs.count++] = In(call, k);
      return Launched(LaunchAddN(inputs, y.as<float>(), y.num_elements(), stream));
    }
    case ir::OpKind::kFill: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const uint64_t bits,
                       FillBits(y.type->dtype, *node.attrs.GetFloat("value", 0.0)));
      return Launched(LaunchFill(y.data, static_cast<int>(ir::DTypeSize(y.type->dtype)), bits,
                                 y.num_elements(), stream));
    }
    case ir::OpKind::kReshape:
    case ir::OpKind::kFlatten:
      if (y.data == nullptr || y.data == call.inputs[0].data) return absl::OkStatus();
      return CheckCuda(
          cudaMemcpyAsync(y.data, call.inputs[0].data, static_cast<size_t>(y.type->bytes()),
                          cudaMemcpyDeviceToDevice, stream),
          "copying the elements");
    case ir::OpKind::kReduceSum: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const ReduceGeometry geometry, MakeReduceGeometry(call));
      return Launched(
          LaunchReduceSum(In(call, 0), y.as<float>(), geometry, y.num_elements(), stream));
    }
    case ir::OpKind::kSgdUpdate: {
      SgdSettings settings;
      settings.lr = static_cast<float>(node.attrs.Float("lr"));
      const double momentum = *node.attrs.GetFloat("momentum", 0.0);
      const double weight_decay = *node.attrs.GetFloat("weight_decay", 0.0);
      settings.momentum = static_cast<float>(momentum);
      settings.weight_decay = static_cast<float>(weight_decay);
      settings.has_buffer = momentum != 0.0;
      settings.has_decay = weight_decay != 0.0;
      settings.nesterov = *node.attrs.GetBool("nesterov", false);
      if (call.inputs.size() != (settings.has_buffer ? 3u : 2u)) {
        return absl::InvalidArgumentError(
            fmt::format("momentum {} needs {} inputs", momentum, settings.has_buffer ? 3 : 2));
      }
      return Launched(LaunchSgdUpdate(In(call, 0), In(call, 1),
                                      settings.has_buffer ? In(call, 2) : nullptr, Out(call, 0),
                                      settings.has_buffer ? Out(call, 1) : nullptr,
                                      call.inputs[0].num_elements(), settings, stream));
    }
    case ir::OpKind::kAdamUpdate: {
      ASSIGN_OR_RETURN(const AdamSettings settings, MakeAdamSettings(node.attrs));
      if (call.inputs.size() != 5) {
        return absl::InvalidArgumentError(
            fmt::format("adam_update takes 5 inputs, not {}", call.inputs.size()));
      }
      return Launched(LaunchAdamUpdate(In(call, 0), In(call, 1), In(call, 2), In(call, 3),
                                       call.inputs[4].as<const int64_t>(), Out(call, 0),
                                       Out(call, 1), Out(call, 2), call.inputs[0].num_elements(),
                                       settings, stream));
    }
    case ir::OpKind::kConv2d:
    case ir::OpKind::kConv2dBackwardData:
    case ir::OpKind::kConv2dBackwardWeight: {
      if (y.data == nullptr) return absl::OkStatus();
      ASSIGN_OR_RETURN(const CudnnConvolution* convolution, Convolution(call));
      ASSIGN_OR_RETURN(const ConvolutionMemory memory, MemoryFor(call, *convolution));
      RETURN_IF_ERROR(CheckCudnn(cudnnSetStream(cudnn_, stream), "setting cuDNN's stream"));
      return convolution->Run(cudnn_, call, memory.workspace, memory.copy);
    }
    case ir::OpKind::kMatMul:
    case ir::OpKind::kLinear:
    case ir::OpKind::kLinearBackwardWeight:
      if (y.data == nullptr) return absl::OkStatus();
      RETURN_IF_ERROR(CheckCublas(cublas_.library->set_stream(cublas_.handle, stream),
                                  "setting cuBLAS's stream"));
      if (node.op == ir::OpKind::kMatMul) return RunMatMul(cublas_, call);
      if (node.op == ir::OpKind::kLinear) return RunLinear(cublas_, call);
      return RunLinearBackwardWeight(cublas_, call);
    case ir::OpKind::kBatchNorm: {
      const ir::MatrixExtent m = ir::AsMatrix(call.inputs[0].type->shape);
      const float epsilon = static_cast<float>(*node.attrs.GetFloat("epsilon", 1e-5));
      if (const std::optional<SavedStatistics> saved = SavedStatisticsOf(call)) {
        if (y.data == nullptr) return absl::OkStatus();  // a recomputation, from the statistics
        return Launched(LaunchBatchNormNormalize(
            In(call, 0), In(call, 1), In(call, 2), saved->mean->as<const float>(),
            saved->inv_std->as<const float>(), m.rows, m.columns, y.as<float>(), stream));
      }
      if (!*node.attrs.GetBool("training", true)) {
        if (y.data == nullptr) return absl::OkStatus();
        return Launched(LaunchBatchNormInference(In(call, 0), In(call, 1), In(call, 2), In(call, 3),
                                                 In(call, 4), m.rows, m.columns, epsilon,
                                                 y.as<float>(), scratch, stream));
      }
      if (m.rows < 2) {
        return absl::InvalidArgumentError("training needs more than one value per channel");
      }
      BatchNormTraining settings;
      settings.epsilon = epsilon;
      settings.momentum = static_cast<float>(*node.attrs.GetFloat("momentum", 0.1));
      return Launched(LaunchBatchNormTraining(
          In(call, 0), In(call, 1), In(call, 2), m.rows, m.columns, settings, Out(call, 0),
          Out(call, 1), Out(call, 2), Out(call, 3), Out(call, 4), scratch, stream));
    }
    case ir::OpKind::kBatchNormBackward: {
      const ir::MatrixExtent m = ir::AsMatrix(call.inputs[1].type->shape);
      return Launched(
          LaunchBatchNormBackward(In(call, 0), In(call, 1), In(call, 2), In(call, 3), In(call, 4),
                                  m.rows, m.columns, *node.attrs.GetBool("training", true),
                                  static_cast<float>(*node.attrs.GetFloat("epsilon", 1e-5)),
                                  Out(call, 0), Out(call, 1), Out(call, 2), scratch, stream));
    }
    case ir::OpKind::kLayerNorm: {
      const ir::MatrixExtent m = ir::AsMatrix(call.inputs[0].type->shape);
      return Launched(LaunchLayerNorm(In(call, 0), In(call, 1), In(call, 2), m.rows, m.columns,
                                      static_cast<float>(*node.attrs.GetFloat("epsilon", 1e-5)),
                                      Out(call, 0), Out(call, 1), Out(call, 2), stream));
    }
    case ir::OpKind::kLayerNormBackward: {
      const ir::MatrixExtent m = ir::AsMatrix(call.inputs[1].type->shape);
      return Launched(LaunchLayerNormBackward(In(call, 0), In(call, 1), In(call, 2), In(call, 3),
                                              In(call, 4), m.rows, m.columns, Out(call, 0),
                                              Out(call, 1), Out(call, 2), stream));
    }
    case ir::OpKind::kMaxPool:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(LaunchMaxPool(
          In(call, 0), y.as<float>(),
          MakePoolGeometry(node.attrs, call.inputs[0].type->shape, y.type->shape), stream));
    case ir::OpKind::kMaxPoolBackward:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(LaunchMaxPoolBackward(
          In(call, 0), In(call, 1), y.as<float>(),
          MakePoolGeometry(node.attrs, y.type->shape, call.inputs[0].type->shape), stream));
    case ir::OpKind::kAvgPool:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(LaunchAvgPool(
          In(call, 0), y.as<float>(),
          MakePoolGeometry(node.attrs, call.inputs[0].type->shape, y.type->shape), stream));
    case ir::OpKind::kAvgPoolBackward:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(LaunchAvgPoolBackward(
          In(call, 0), y.as<float>(),
          MakePoolGeometry(node.attrs, y.type->shape, call.inputs[0].type->shape), stream));
    case ir::OpKind::kGlobalAvgPool: {
      if (y.data == nullptr) return absl::OkStatus();
      const ir::Shape& x = call.inputs[0].type->shape;
      return Launched(
          LaunchGlobalAvgPool(In(call, 0), y.as<float>(), x[0], x[1] * x[2], x[3], stream));
    }
    case ir::OpKind::kGlobalAvgPoolBackward: {
      if (y.data == nullptr) return absl::OkStatus();
      const ir::Shape& x = y.type->shape;
      return Launched(
          LaunchGlobalAvgPoolBackward(In(call, 0), y.as<float>(), x[0], x[1] * x[2], x[3], stream));
    }
    case ir::OpKind::kCrossEntropyLoss:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(
          LaunchCrossEntropyLoss(In(call, 0), call.inputs[1].data,
                                 MakeCrossEntropy(node.attrs, call.inputs[0], call.inputs[1]),
                                 y.as<float>(), scratch, stream));
    case ir::OpKind::kCrossEntropyLossBackward:
      if (y.data == nullptr) return absl::OkStatus();
      return Launched(LaunchCrossEntropyLossBackward(
          In(call, 0), In(call, 1), call.inputs[2].data,
          MakeCrossEntropy(node.attrs, call.inputs[1], call.inputs[2]), y.as<float>(), scratch,
          stream));
    default:
      return absl::UnimplementedError(fmt::format(
          "the CUDA backend has no kernel for this op yet (it runs {})", SupportedNames()));
  }
}

}  // namespace spillway::backends::cuda
