#include <algorithm>
#include <cstdio>
#include <string>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/direct_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/types.h"
#include "support/check.h"

namespace spillway::backends::cpu {

namespace {

bool AllF32(const KernelCall& call) {
  // An absent tensor (a skipped input) has no type and does not count.
  auto f32 = [](const TensorRef& tensor) {
    return tensor.type == nullptr || tensor.type->dtype == ir::DType::kF32;
  };
  return std::all_of(call.inputs.begin(), call.inputs.end(), f32) &&
         std::all_of(call.outputs.begin(), call.outputs.end(), f32);
}

bool AllOfTheOutputsShape(const KernelCall& call) {
  const ir::Shape& shape = call.outputs[0].type->shape;
  return std::all_of(call.inputs.begin(), call.inputs.end(),
                     [&](const TensorRef& input) { return input.type->shape == shape; });
}

// reduce_sum over every axis but the last (the bias gradient of NHWC
// activations), in any order and counting from either end.
bool ReducesAllButTheLastAxis(const KernelCall& call) {
  const int64_t rank = call.inputs[0].type->rank();
  absl::StatusOr<ir::IntList> axes = call.node.attrs.GetInts("axes");
  if (!axes.ok() || rank < 2) return false;
  for (int64_t& axis : *axes) axis = axis < 0 ? axis + rank : axis;
  std::sort(axes->begin(), axes->end());
  if (axes->size() != static_cast<size_t>(rank - 1)) return false;
  for (int64_t i = 0; i < rank - 1; ++i) {
    if ((*axes)[static_cast<size_t>(i)] != i) return false;
  }
  return true;
}

}  // namespace

bool DirectKernelTakes(const KernelCall& call) {
  if (!AllF32(call)) return false;
  switch (call.node.op) {
    case ir::OpKind::kBatchNorm:
    case ir::OpKind::kBatchNormBackward:
    case ir::OpKind::kMaxPoolBackward:
    case ir::OpKind::kGlobalAvgPool:
    case ir::OpKind::kGlobalAvgPoolBackward:
    case ir::OpKind::kSgdUpdate:
      return true;
    case ir::OpKind::kAdd:
    case ir::OpKind::kAddN:
      return AllOfTheOutputsShape(call);
    case ir::OpKind::kReduceSum:
      return ReducesAllButTheLastAxis(call);
    default:
      return false;
  }
}

absl::StatusOr<bool> RunDirectKernel(const KernelCall& call, int threads) {
  // Chosen once: oneDNN's ISA is fixed for the process, and the environment
  // was checked before the first kernel (CheckCpuIsaEnvironment).
  static const DirectKernelIsa isa = [] {
    absl::StatusOr<DirectKernelIsa> selected = SelectDirectKernelIsa();
    if (!selected.ok()) {
      std::fprintf(stderr, "spillway: %s\n", std::string(selected.status().message()).c_str());
    }
    SPILLWAY_CHECK(selected.ok(), "the ISA environment was checked (CheckCpuIsaEnvironment)");
    return *selected;
  }();
  return RunDirectKernel(isa, call, threads);
}

absl::StatusOr<bool> RunDirectKernel(DirectKernelIsa isa, const KernelCall& call, int threads) {
  SPILLWAY_CHECK(CanRunDirectKernelIsa(isa), "the direct-kernel build runs on this processor");
  switch (isa) {
#ifdef SPILLWAY_DIRECT_KERNELS_X86
    case DirectKernelIsa::kAvx512:
      return avx512::RunDirectKernel(call, threads);
    case DirectKernelIsa::kAvx2:
      return avx2::RunDirectKernel(call, threads);
#endif
    default:
      return generic::RunDirectKernel(call, threads);
  }
}

}  // namespace spillway::backends::cpu
