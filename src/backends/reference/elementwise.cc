// Reference kernels of the element-wise ops: relu, gelu, sigmoid, tanh,
// leaky_relu, clip, dropout and their gradients, broadcasting add, sub, mul
// and div, and add_n.
//
// Every op here may be handed an input's buffer as its output
// (may_overwrite_inputs), so each loop reads element i of its inputs before it
// writes element i of the output and never reads an element after writing it.
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>

#include "backends/dropout_mask.h"
#include "backends/reference/ops.h"
#include "backends/reference/tensor_util.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// Checks that input `index` has the output's element count.
absl::Status ExpectOutputSize(const KernelCall& call, size_t index) {
  const int64_t in = call.inputs[index].num_elements();
  const int64_t out = call.outputs[0].num_elements();
  if (in == out) return absl::OkStatus();
  return KernelError(call, fmt::format("input {} {} and output {} differ in size", index,
                                       ir::TypeToString(*call.inputs[index].type),
                                       ir::TypeToString(*call.outputs[0].type)));
}

// y[i] = fn(x[i], i), x the first input.
template <typename T, typename Fn>
absl::Status MapUnary(const KernelCall& call, Fn fn) {
  RETURN_IF_ERROR(ExpectFloatInput(call, 0));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  if (call.outputs[0].data == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(ExpectOutputSize(call, 0));
  const T* x = call.inputs[0].as<const T>();
  T* y = call.outputs[0].as<T>();
  const int64_t count = call.outputs[0].num_elements();
  for (int64_t i = 0; i < count; ++i) y[i] = fn(x[i], i);
  return absl::OkStatus();
}

// dx[i] = fn(dy[i], other[i]) for the gradients that read one forward tensor
// of dy's shape (relu's output, gelu's input).
template <typename T, typename Fn>
absl::Status MapGradient(const KernelCall& call, Fn fn) {
  RETURN_IF_ERROR(ExpectFloatInput(call, 0));
  RETURN_IF_ERROR(ExpectFloatInput(call, 1));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  if (call.outputs[0].data == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(ExpectOutputSize(call, 0));
  RETURN_IF_ERROR(ExpectOutputSize(call, 1));
  const T* dy = call.inputs[0].as<const T>();
  const T* other = call.inputs[1].as<const T>();
  T* dx = call.outputs[0].as<T>();
  const int64_t count = call.outputs[0].num_elements();
  for (int64_t i = 0; i < count; ++i) dx[i] = fn(dy[i], other[i]);
  return absl::OkStatus();
}

absl::StatusOr<bool> IsTanhGelu(const KernelCall& call) {
  // Not moved out of the StatusOr: GCC 12 at -O3 then wrongly warns of an uninitialized string.
  const absl::StatusOr<std::string> approximate_or =
      NodeAttr(call, call.node.attrs.GetString("approximate", "none"));
  if (!approximate_or.ok()) return approximate_or.status();
  const std::string& approximate = *approximate_or;
  if (approximate != "none" && approximate != "tanh") {
    return KernelError(call, fmt::format("unknown approximate \"{}\"", approximate));
  }
  return approximate == "tanh";
}

// The slope below zero; 0.01 when absent, as the registry's default.
template <typename T>
absl::StatusOr<T> LeakyReluAlpha(const KernelCall& call) {
  ASSIGN_OR_RETURN(double alpha, NodeAttr(call, call.node.attrs.GetFloat("alpha", 0.01)));
  return static_cast<T>(alpha);
}

// clip's bounds in T; -inf and +inf when absent, as the registry's defaults.
template <typename T>
struct ClipBounds {
  T min;
  T max;
};
template <typename T>
absl::StatusOr<ClipBounds<T>> GetClipBounds(const KernelCall& call) {
  ASSIGN_OR_RETURN(
      double min,
      NodeAttr(call, call.node.attrs.GetFloat("min", -std::numeric_limits<double>::infinity())));
  ASSIGN_OR_RETURN(double max, NodeAttr(call, call.node.attrs.GetFloat(
                                                  "max", std::numeric_limits<double>::infinity())));
  return ClipBounds<T>{static_cast<T>(min), static_cast<T>(max)};
}

// GELU's constants, rounded once from double. The tanh form is
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // √(2/π)
template <typename T>
constexpr T kTanhScale = static_cast<T>(kSqrt2OverPi);
template <typename T>
constexpr T kTanhCubic = T(0.044715);
template <typename T>
constexpr T kInvSqrt2 = static_cast<T>(std::numbers::sqrt2 / 2);
template <typename T>
constexpr T kInvSqrt2Pi = static_cast<T>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);

// y = keep ? x · scale : 0 with the mask of (seed, step), the same for the
// forward op and its gradient, so dropout_backward replays the forward's mask.
template <typename T>
absl::Status ApplyDropout(const KernelCall& call) {
  ASSIGN_OR_RETURN(double p, NodeAttr(call, call.node.attrs.GetFloat("p")));
  ASSIGN_OR_RETURN(int64_t seed, NodeAttr(call, call.node.attrs.GetInt("seed")));
  if (!(p >= 0.0 && p < 1.0)) {
    return KernelError(call, fmt::format("p must be in [0, 1), got {}", p));
  }
  const DropoutMask mask(static_cast<uint64_t>(seed), call.context.step, p);
  const T scale = T(1) / (T(1) - T(p));
  return MapUnary<T>(call, [&](T x, int64_t i) {
    return mask.Keeps(static_cast<uint64_t>(i)) ? x * scale : T(0);
  });
}

// An input broadcast to the output's shape (numpy's rules): its stride for
// each output axis, or an error if it does not broadcast to that shape.
absl::StatusOr<std::vector<int64_t>> OperandStrides(const KernelCall& call, size_t index) {
  const ir::Shape& shape = call.inputs[index].type->shape;
  const ir::Shape& target = call.outputs[0].type->shape;
  if (!BroadcastsTo(shape, target)) {
    return KernelError(call, fmt::format("input {} {} does not broadcast to the output {}", index,
                                         ir::TypeToString(*call.inputs[index].type),
                                         ir::TypeToString(*call.outputs[0].type)));
  }
  return BroadcastStrides(shape, target);
}

// y = op(a, b) with numpy broadcasting, for f32 (as T) and integer tensors.
template <typename T, typename Op>
absl::Status BroadcastBinary(const KernelCall& call, Op op) {
  RETURN_IF_ERROR(ExpectInput(call, 0));
  RETURN_IF_ERROR(ExpectInput(call, 1));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& a = call.inputs[0];
  const TensorRef& b = call.inputs[1];
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  if (a.type->dtype != b.type->dtype || y.type->dtype != a.type->dtype) {
    return KernelError(
        call, fmt::format("a {}, b {} and y {} must have one dtype", ir::TypeToString(*a.type),
                          ir::TypeToString(*b.type), ir::TypeToString(*y.type)));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> a_strides, OperandStrides(call, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> b_strides, OperandStrides(call, 1));
  // An output shares a buffer only with an input of its own shape, whose
  // offset is then the output index: each element is read before it is written.
  SPILLWAY_CHECK(y.data != a.data || a.num_elements() == y.num_elements(),
                 "y aliases a only when a has y's shape");
  SPILLWAY_CHECK(y.data != b.data || b.num_elements() == y.num_elements(),
                 "y aliases b only when b has y's shape");
  return DispatchNumeric<T>(call, a.type->dtype, [&](auto element) {
    using E = decltype(element);
    const E* a_data = a.as<const E>();
    const E* b_data = b.as<const E>();
    E* y_data = y.as<E>();
    int64_t i = 0;
    ForEachOffset<2>(y.type->shape, {a_strides, b_strides}, [&](const auto& offsets) {
      y_data[i++] = op(a_data[offsets[0]], b_data[offsets[1]]);
    });
    return absl::OkStatus();
  });
}

}  // namespace

template <typename T>
absl::Status RunRelu(const KernelCall& call) {
  // Written so that NaN passes through, as in PyTorch.
  return MapUnary<T>(call, [](T x, int64_t) { return x < T(0) ? T(0) : x; });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Relu);

// Inputs dy and relu's output y: the gradient passes where y > 0.
template <typename T>
absl::Status RunReluBackward(const KernelCall& call) {
  return MapGradient<T>(call, [](T dy, T y) { return y > T(0) ? dy : T(0); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(ReluBackward);

// approximate="none": x·Φ(x) = 0.5·x·(1 + erf(x/√2)); "tanh": the tanh form above.
template <typename T>
absl::Status RunGelu(const KernelCall& call) {
  ASSIGN_OR_RETURN(bool tanh_form, IsTanhGelu(call));
  if (tanh_form) {
    return MapUnary<T>(call, [](T x, int64_t) {
      const T inner = kTanhScale<T> * (x + kTanhCubic<T> * x * x * x);
      return T(0.5) * x * (T(1) + std::tanh(inner));
    });
  }
  return MapUnary<T>(call,
                     [](T x, int64_t) { return T(0.5) * x * (T(1) + std::erf(x * kInvSqrt2<T>)); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Gelu);

// Inputs dy and gelu's input x.
//   "none": d/dx x·Φ(x) = Φ(x) + x·φ(x), φ(x) = exp(-x²/2)/√(2π).
//   "tanh": with t = tanh(u), u = √(2/π)·(x + c·x³):
//           0.5·(1 + t) + 0.5·x·(1 - t²)·√(2/π)·(1 + 3c·x²).
template <typename T>
absl::Status RunGeluBackward(const KernelCall& call) {
  ASSIGN_OR_RETURN(bool tanh_form, IsTanhGelu(call));
  if (tanh_form) {
    return MapGradient<T>(call, [](T dy, T x) {
      const T t = std::tanh(kTanhScale<T> * (x + kTanhCubic<T> * x * x * x));
      const T du_dx = kTanhScale<T> * (T(1) + T(3) * kTanhCubic<T> * x * x);
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du_dx);
    });
  }
  return MapGradient<T>(call, [](T dy, T x) {
    const T cdf = T(0.5) * (T(1) + std::erf(x * kInvSqrt2<T>));
    const T pdf = kInvSqrt2Pi<T> * std::exp(T(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(GeluBackward);

// 1/(1 + exp(-x)): exp(-x) overflows to inf for very negative x, giving 0, and
// underflows to 0 for very positive x, giving 1; no NaN for finite x.
template <typename T>
absl::Status RunSigmoid(const KernelCall& call) {
  return MapUnary<T>(call, [](T x, int64_t) { return T(1) / (T(1) + std::exp(-x)); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Sigmoid);

// Inputs dy and sigmoid's output y: σ'(x) = y·(1 - y).
template <typename T>
absl::Status RunSigmoidBackward(const KernelCall& call) {
  return MapGradient<T>(call, [](T dy, T y) { return dy * y * (T(1) - y); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(SigmoidBackward);

template <typename T>
absl::Status RunTanh(const KernelCall& call) {
  return MapUnary<T>(call, [](T x, int64_t) { return std::tanh(x); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Tanh);

// Inputs dy and tanh's output y: tanh'(x) = 1 - y².
template <typename T>
absl::Status RunTanhBackward(const KernelCall& call) {
  return MapGradient<T>(call, [](T dy, T y) { return dy * (T(1) - y * y); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(TanhBackward);

// x > 0 ? x : alpha·x, so that NaN passes through, as in PyTorch.
template <typename T>
absl::Status RunLeakyRelu(const KernelCall& call) {
  ASSIGN_OR_RETURN(T alpha, LeakyReluAlpha<T>(call));
  return MapUnary<T>(call, [alpha](T x, int64_t) { return x > T(0) ? x : alpha * x; });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(LeakyRelu);

// Inputs dy and leaky_relu's input x; at x = 0 the slope is alpha (PyTorch's choice).
template <typename T>
absl::Status RunLeakyReluBackward(const KernelCall& call) {
  ASSIGN_OR_RETURN(T alpha, LeakyReluAlpha<T>(call));
  return MapGradient<T>(call, [alpha](T dy, T x) { return x > T(0) ? dy : alpha * dy; });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(LeakyReluBackward);

// min(max(x, min), max), written so that NaN passes through, as in PyTorch.
template <typename T>
absl::Status RunClip(const KernelCall& call) {
  ASSIGN_OR_RETURN(const ClipBounds<T> bounds, GetClipBounds<T>(call));
  return MapUnary<T>(call, [bounds](T x, int64_t) {
    return x < bounds.min ? bounds.min : (x > bounds.max ? bounds.max : x);
  });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Clip);

// Inputs dy and clip's output y: dy strictly inside (min, max), 0 at the
// bounds and outside, as PyTorch's hardtanh_backward (so relu6); NaN passes dy.
// Clip's input x in place of y gives the same dx: each is strictly inside the
// bounds, or NaN, exactly where the other is.
template <typename T>
absl::Status RunClipBackward(const KernelCall& call) {
  ASSIGN_OR_RETURN(const ClipBounds<T> bounds, GetClipBounds<T>(call));
  return MapGradient<T>(
      call, [bounds](T dy, T y) { return y <= bounds.min || y >= bounds.max ? T(0) : dy; });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(ClipBackward);

template <typename T>
absl::Status RunDropout(const KernelCall& call) {
  return ApplyDropout<T>(call);
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Dropout);

// dx = keep ? dy · scale : 0 with the forward's mask: y is linear in x.
template <typename T>
absl::Status RunDropoutBackward(const KernelCall& call) {
  return ApplyDropout<T>(call);
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(DropoutBackward);

template <typename T>
absl::Status RunAdd(const KernelCall& call) {
  return BroadcastBinary<T>(call, [](auto a, auto b) { return WrappingAdd(a, b); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Add);

template <typename T>
absl::Status RunSub(const KernelCall& call) {
  return BroadcastBinary<T>(call, [](auto a, auto b) { return WrappingSub(a, b); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Sub);

template <typename T>
absl::Status RunMul(const KernelCall& call) {
  return BroadcastBinary<T>(call, [](auto a, auto b) { return WrappingMul(a, b); });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Mul);

// IEEE division: b = 0 gives ±inf or NaN. Floating point only, as the registry says.
template <typename T>
absl::Status RunDiv(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectFloatInput(call, 0));
  return BroadcastBinary<T>(call, [](auto a, auto b) { return a / b; });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Div);

// y = x0 + x1 + ..., summed in input order (in double for f32), of one type.
template <typename T>
absl::Status RunAddN(const KernelCall& call) {
  if (call.inputs.empty()) return KernelError(call, "needs at least one input");
  for (size_t k = 0; k < call.inputs.size(); ++k) RETURN_IF_ERROR(ExpectInput(call, k));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    if (call.inputs[k].type->dtype != y.type->dtype) {
      return KernelError(
          call, fmt::format("input {} {} and the output {} differ in dtype", k,
                            ir::TypeToString(*call.inputs[k].type), ir::TypeToString(*y.type)));
    }
    RETURN_IF_ERROR(ExpectOutputSize(call, k));
  }
  return DispatchNumeric<T>(call, y.type->dtype, [&](auto element) {
    using E = decltype(element);
    E* y_data = y.as<E>();
    const int64_t count = y.num_elements();
    for (int64_t i = 0; i < count; ++i) {
      Accumulator<E> sum = call.inputs[0].as<const E>()[i];
      for (size_t k = 1; k < call.inputs.size(); ++k) {
        sum = WrappingAdd<Accumulator<E>>(sum, call.inputs[k].as<const E>()[i]);
      }
      y_data[i] = static_cast<E>(sum);
    }
    return absl::OkStatus();
  });
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(AddN);

}  // namespace spillway::backends::reference
