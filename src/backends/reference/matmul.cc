// Reference kernels of the matrix products: matmul (batched, broadcast,
// transposed, scaled), linear and linear's weight gradient. Every dot product
// accumulates in double over k in increasing order.
#include <cstdint>
#include <vector>

#include "backends/reference/ops.h"
#include "backends/reference/tensor_util.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// A tensor [..., n] as rows of n: the product of all axes but the last, and the last.
struct Rows {
  int64_t count = 1;
  int64_t width = 0;
};

absl::StatusOr<Rows> AsRows(const KernelCall& call, const TensorRef& tensor,
                            std::string_view role) {
  const ir::Shape& shape = tensor.type->shape;
  if (shape.empty()) {
    return KernelError(
        call, fmt::format("{} {} must have rank >= 1", role, ir::TypeToString(*tensor.type)));
  }
  Rows rows;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows.count *= shape[d];
  rows.width = shape.back();
  return rows;
}

}  // namespace

// y[..., m, n] = alpha · sum_k op(a)[..., m, k] · op(b)[..., k, n], where op
// transposes the last two axes when asked and the batch axes broadcast.
template <typename T>
absl::Status RunMatMul(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectFloatInput(call, 0));
  RETURN_IF_ERROR(ExpectFloatInput(call, 1));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& a = call.inputs[0];
  const TensorRef& b = call.inputs[1];
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const ir::AttrMap& attrs = call.node.attrs;
  ASSIGN_OR_RETURN(bool transpose_a, NodeAttr(call, attrs.GetBool("transpose_a", false)));
  ASSIGN_OR_RETURN(bool transpose_b, NodeAttr(call, attrs.GetBool("transpose_b", false)));
  ASSIGN_OR_RETURN(double alpha, NodeAttr(call, attrs.GetFloat("alpha", 1.0)));
  const ir::Shape& a_shape = a.type->shape;
  const ir::Shape& b_shape = b.type->shape;
  const ir::Shape& y_shape = y.type->shape;
  if (a_shape.size() < 2 || b_shape.size() < 2 || y_shape.size() < 2) {
    return KernelError(call, "a, b and y must be (batches of) matrices");
  }
  const size_t a_rank = a_shape.size();
  const size_t b_rank = b_shape.size();
  const int64_t m = a_shape[a_rank - (transpose_a ? 1 : 2)];
  const int64_t depth = a_shape[a_rank - (transpose_a ? 2 : 1)];
  const int64_t n = b_shape[b_rank - (transpose_b ? 2 : 1)];
  // Element strides of op(a) along m and k, and of op(b) along k and n.
  const int64_t a_cols = a_shape[a_rank - 1];
  const int64_t b_cols = b_shape[b_rank - 1];
  const int64_t a_m_stride = transpose_a ? 1 : a_cols;
  const int64_t a_k_stride = transpose_a ? a_cols : 1;
  const int64_t b_k_stride = transpose_b ? 1 : b_cols;
  const int64_t b_n_stride = transpose_b ? b_cols : 1;
  const ir::Shape batch(y_shape.begin(), y_shape.end() - 2);
  const ir::Shape a_batch(a_shape.begin(), a_shape.end() - 2);
  const ir::Shape b_batch(b_shape.begin(), b_shape.end() - 2);
  if (b_shape[b_rank - (transpose_b ? 1 : 2)] != depth || y_shape[y_shape.size() - 2] != m ||
      y_shape.back() != n || !BroadcastsTo(a_batch, batch) || !BroadcastsTo(b_batch, batch)) {
    return KernelError(
        call,
        fmt::format("a {} and b {} do not make y {}{}{}", ir::TypeToString(*a.type),
                    ir::TypeToString(*b.type), ir::TypeToString(*y.type),
                    transpose_a ? " (transpose_a)" : "", transpose_b ? " (transpose_b)" : ""));
  }
  // Offsets of each batch's matrix: broadcast strides over the batch axes, in matrices.
  std::vector<int64_t> a_strides = BroadcastStrides(a_batch, batch);
  std::vector<int64_t> b_strides = BroadcastStrides(b_batch, batch);
  for (int64_t& stride : a_strides) stride *= a_shape[a_rank - 2] * a_cols;
  for (int64_t& stride : b_strides) stride *= b_shape[b_rank - 2] * b_cols;
  const T* a_data = a.as<const T>();
  const T* b_data = b.as<const T>();
  T* out = y.as<T>();
  ForEachOffset<2>(batch, {a_strides, b_strides}, [&](const auto& offsets) {
    const T* a_matrix = a_data + offsets[0];
    const T* b_matrix = b_data + offsets[1];
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < depth; ++p) {
          sum += static_cast<double>(a_matrix[i * a_m_stride + p * a_k_stride]) *
                 static_cast<double>(b_matrix[p * b_k_stride + j * b_n_stride]);
        }
        *out++ = static_cast<T>(alpha * sum);
      }
    }
  });
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(MatMul);

// y[r, o] = sum_i x[r, i] · w[o, i] + b[o], over the rows r of x [..., in].
template <typename T>
absl::Status RunLinear(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectFloatInput(call, 0));
  RETURN_IF_ERROR(ExpectFloatInput(call, 1));
  const bool has_bias = call.inputs.size() > 2;
  if (has_bias) RETURN_IF_ERROR(ExpectFloatInput(call, 2));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& x = call.inputs[0];
  const TensorRef& w = call.inputs[1];
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(Rows x_rows, AsRows(call, x, "x"));
  ASSIGN_OR_RETURN(Rows y_rows, AsRows(call, y, "y"));
  const ir::Shape& w_shape = w.type->shape;
  const bool fits = w_shape.size() == 2 && w_shape[0] == y_rows.width &&
                    w_shape[1] == x_rows.width && x_rows.count == y_rows.count &&
                    (!has_bias || call.inputs[2].type->shape == ir::Shape{y_rows.width});
  if (!fits) {
    return KernelError(
        call,
        fmt::format("x {}, w {}{} do not make y {}", ir::TypeToString(*x.type),
                    ir::TypeToString(*w.type),
                    has_bias ? " and b " + ir::TypeToString(*call.inputs[2].type) : std::string(),
                    ir::TypeToString(*y.type)));
  }
  const int64_t in = x_rows.width;
  const int64_t out_features = y_rows.width;
  const T* x_data = x.as<const T>();
  const T* w_data = w.as<const T>();
  const T* bias = has_bias ? call.inputs[2].as<const T>() : nullptr;
  T* out = y.as<T>();
  for (int64_t r = 0; r < x_rows.count; ++r) {
    for (int64_t o = 0; o < out_features; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) {
        sum += static_cast<double>(x_data[r * in + i]) * static_cast<double>(w_data[o * in + i]);
      }
      if (bias != nullptr) sum += static_cast<double>(bias[o]);
      out[r * out_features + o] = static_cast<T>(sum);
    }
  }
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Linear);

// dw[o, i] = sum_r dy[r, o] · x[r, i], over the rows r of dy [..., out] and x [..., in].
template <typename T>
absl::Status RunLinearBackwardWeight(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectFloatInput(call, 0));
  RETURN_IF_ERROR(ExpectFloatInput(call, 1));
  RETURN_IF_ERROR(ExpectOutput(call, 0));
  const TensorRef& dy = call.inputs[0];
  const TensorRef& x = call.inputs[1];
  const TensorRef& dw = call.outputs[0];
  if (dw.data == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(Rows dy_rows, AsRows(call, dy, "dy"));
  ASSIGN_OR_RETURN(Rows x_rows, AsRows(call, x, "x"));
  if (dy_rows.count != x_rows.count || dw.type->shape != ir::Shape{dy_rows.width, x_rows.width}) {
    return KernelError(call,
                       fmt::format("dy {} and x {} do not make dw {}", ir::TypeToString(*dy.type),
                                   ir::TypeToString(*x.type), ir::TypeToString(*dw.type)));
  }
  const int64_t out_features = dy_rows.width;
  const int64_t in = x_rows.width;
  const T* dy_data = dy.as<const T>();
  const T* x_data = x.as<const T>();
  T* out = dw.as<T>();
  for (int64_t o = 0; o < out_features; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (int64_t r = 0; r < x_rows.count; ++r) {
        sum += static_cast<double>(dy_data[r * out_features + o]) *
               static_cast<double>(x_data[r * in + i]);
      }
      out[o * in + i] = static_cast<T>(sum);
    }
  }
  return absl::OkStatus();
}
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(LinearBackwardWeight);

}  // namespace spillway::backends::reference
