// Reference kernels of the optimizer updates, with PyTorch's formulas
// (torch.optim.SGD with dampening 0, torch.optim.Adam and AdamW without
// amsgrad). They run in place: each output is usually its input's buffer, so
// element i of every input is read before element i of any output is written.
// An output with null data is not written.
#include <cmath>
#include <cstdint>

#include "backends/reference/ops.h"
#include "backends/reference/tensor_util.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// Inputs [first, last] are f32 with the parameter's element count, and so are
// the outputs.
absl::Status ExpectParamShaped(const KernelCall& call, size_t first, size_t last,
                               size_t output_count) {
  const int64_t count = call.inputs[0].type == nullptr ? 0 : call.inputs[0].num_elements();
  for (size_t k = first; k <= last; ++k) {
    RETURN_IF_ERROR(ExpectFloatInput(call, k));
    if (call.inputs[k].num_elements() != count) {
      return KernelError(call, fmt::format("input {} {} differs in size from the parameter {}", k,
                                           ir::TypeToString(*call.inputs[k].type),
                                           ir::TypeToString(*call.inputs[0].type)));
    }
  }
  for (size_t k = 0; k < output_count; ++k) {
    RETURN_IF_ERROR(ExpectOutput(call, k));
    if (call.outputs[k].num_elements() != count) {
      return KernelError(call, fmt::format("output {} {} differs in size from the parameter {}", k,
                                           ir::TypeToString(*call.outputs[k].type),
                                           ir::TypeToString(*call.inputs[0].type)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Inputs param, grad and, when momentum != 0, momentum_buf; outputs param and
// momentum_buf. With g = grad + weight_decay · param:
//   buf   = momentum · buf + g                 (momentum != 0)
//   g     = nesterov ? g + momentum · buf : buf (momentum != 0)
//   param = param - lr · g
// PyTorch sets buf = g on the first step; with buf starting at zero (as
// optimizer state does here) that is the same update.
template <typename T>
absl::Status RunSgdUpdate(const KernelCall& call) {
  const ir::AttrMap& attrs = call.node.attrs;
  ASSIGN_OR_RETURN(double lr, NodeAttr(call, attrs.GetFloat("lr")));
  ASSIGN_OR_RETURN(double momentum, NodeAttr(call, attrs.GetFloat("momentum", 0.0)));
  ASSIGN_OR_RETURN(double weight_decay, NodeAttr(call, attrs.GetFloat("weight_decay", 0.0)));
  ASSIGN_OR_RETURN(bool nesterov, NodeAttr(call, attrs.GetBool("nesterov", false)));
  const bool has_buffer = momentum != 0.0;
  if (call.inputs.size() != (has_buffer ? 3u : 2u)) {
    return KernelError(call, fmt::format("momentum {} needs {} inputs, got {}", momentum,
                                         has_buffer ? 3 : 2, call.inputs.size()));
  }
  RETURN_IF_ERROR(ExpectParamShaped(call, 0, call.inputs.size() - 1, has_buffer ? 2 : 1));
  const T* param = call.inputs[0].as<const T>();
  const T* grad = call.inputs[1].as<const T>();
  const T* buf = has_buffer ? call.inputs[2].as<const T>() : nullptr;
  T* param_out = call.outputs[0].as<T>();
  T* buf_out = has_buffer ? call.outputs[1].as<T>() : nullptr;
  const T lr_t = static_cast<T>(lr);
  const T momentum_t = static_cast<T>(momentum);
  const T decay = static_cast<T>(weight_decay);
  const int64_t count = call.inputs[0].num_elements();
  for (int64_t i = 0; i < count; ++i) {
    const T p = param[i];
    T g = grad[i];
    if (weight_decay != 0.0) g += decay * p;
    if (has_buffer) {
      const T new_buf = momentum_t * buf[i] + g;
      if (buf_out != nullptr) buf_out[i] = new_buf;
      g = nesterov ? g + momentum_t * new_buf : new_buf;
    }
    if (param_out != nullptr) param_out[i] = p - lr_t * g;
  }
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(SgdUpdate);

// Inputs param, grad, m, v and step (i64[]); outputs param, m, v. `step` is
// t, the 1-based number of this update (the counter starts at 1 and the
// trainer advances it after each step), as PyTorch's state["step"] after its
// increment. With g = grad (+ weight_decay · param when not decoupled):
//   param = param · (1 - lr · weight_decay)     (decoupled: AdamW)
//   m     = beta1 · m + (1 - beta1) · g
//   v     = beta2 · v + (1 - beta2) · g²
//   param = param - lr / (1 - beta1^t) · m / (sqrt(v) / sqrt(1 - beta2^t) + epsilon)
// The scalar factors are computed in double, as PyTorch computes them in Python.
template <typename T>
absl::Status RunAdamUpdate(const KernelCall& call) {
  const ir::AttrMap& attrs = call.node.attrs;
  ASSIGN_OR_RETURN(double lr, NodeAttr(call, attrs.GetFloat("lr")));
  ASSIGN_OR_RETURN(double beta1, NodeAttr(call, attrs.GetFloat("beta1", 0.9)));
  ASSIGN_OR_RETURN(double beta2, NodeAttr(call, attrs.GetFloat("beta2", 0.999)));
  ASSIGN_OR_RETURN(double epsilon, NodeAttr(call, attrs.GetFloat("epsilon", 1e-8)));
  ASSIGN_OR_RETURN(double weight_decay, NodeAttr(call, attrs.GetFloat("weight_decay", 0.0)));
  ASSIGN_OR_RETURN(bool decoupled, NodeAttr(call, attrs.GetBool("decoupled", true)));
  if (call.inputs.size() != 5) {
    return KernelError(call, fmt::format("expects 5 inputs, got {}", call.inputs.size()));
  }
  RETURN_IF_ERROR(ExpectParamShaped(call, 0, 3, 3));
  RETURN_IF_ERROR(ExpectInput(call, 4));
  const ir::TensorType& step_type = *call.inputs[4].type;
  if (step_type.dtype != ir::DType::kI64 || step_type.rank() != 0) {
    return KernelError(call,
                       fmt::format("step must be i64[], got {}", ir::TypeToString(step_type)));
  }
  const int64_t step = *call.inputs[4].as<const int64_t>();
  if (step < 1) {
    return KernelError(call,
                       fmt::format("step must be >= 1 (the first update is step 1), got {}", step));
  }
  const double t = static_cast<double>(step);
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(beta1, t)));
  const T bias_correction2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, t)));
  const T shrink = static_cast<T>(1.0 - lr * weight_decay);
  const T l2 = static_cast<T>(weight_decay);
  const T beta1_t = static_cast<T>(beta1);
  const T beta2_t = static_cast<T>(beta2);
  const T one_minus_beta1 = static_cast<T>(1.0 - beta1);
  const T one_minus_beta2 = static_cast<T>(1.0 - beta2);
  const T epsilon_t = static_cast<T>(epsilon);
  const T* param = call.inputs[0].as<const T>();
  const T* grad = call.inputs[1].as<const T>();
  const T* m = call.inputs[2].as<const T>();
  const T* v = call.inputs[3].as<const T>();
  T* param_out = call.outputs[0].as<T>();
  T* m_out = call.outputs[1].as<T>();
  T* v_out = call.outputs[2].as<T>();
  const int64_t count = call.inputs[0].num_elements();
  for (int64_t i = 0; i < count; ++i) {
    T p = param[i];
    T g = grad[i];
    if (weight_decay != 0.0) {
      if (decoupled) {
        p *= shrink;
      } else {
        g += l2 * p;
      }
    }
    const T new_m = beta1_t * m[i] + one_minus_beta1 * g;
    const T new_v = beta2_t * v[i] + one_minus_beta2 * g * g;
    const T denominator = std::sqrt(new_v) / bias_correction2_sqrt + epsilon_t;
    if (m_out != nullptr) m_out[i] = new_m;
    if (v_out != nullptr) v_out[i] = new_v;
    if (param_out != nullptr) param_out[i] = p - step_size * (new_m / denominator);
  }
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(AdamUpdate);

}  // namespace spillway::backends::reference
