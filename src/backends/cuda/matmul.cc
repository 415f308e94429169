#include "backends/cuda/matmul.h"

#include <climits>
#include <cstdint>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_status.h"
#include "fmt/format.h"
#include "ir/attributes.h"
#include "support/status_macros.h"

namespace spillway::backends::cuda {
namespace {

absl::StatusOr<int> Int(int64_t value, std::string_view what) {
  if (value < 0 || value > INT_MAX) {
    return absl::UnimplementedError(fmt::format("{} {} is more than cuBLAS takes", what, value));
  }
  return static_cast<int>(value);
}

int64_t Product(const ir::Shape& shape, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t d = begin; d < end; ++d) product *= shape[d];
  return product;
}

// The distance, in elements, between the matrices of a matmul operand for
// consecutive matrices of y: one matrix per output matrix (the same batch
// axes, aligned from the right), or one for all of them (stride 0).
absl::StatusOr<int64_t> BatchStride(const ir::Shape& operand, const ir::Shape& y,
                                    std::string_view role) {
  const size_t rank = operand.size();
  const int64_t matrix = operand[rank - 2] * operand[rank - 1];
  if (Product(operand, 0, rank - 2) == 1) return int64_t{0};
  const size_t batch_axes = y.size() - 2;
  bool same = rank - 2 <= batch_axes;
  for (size_t d = 0; same && d < batch_axes; ++d) {
    const size_t from_right = batch_axes - d;  // 1 for the innermost batch axis
    const int64_t extent = from_right <= rank - 2 ? operand[rank - 2 - from_right] : 1;
    same = extent == y[d];
  }
  if (!same) {
    return absl::UnimplementedError(fmt::format(
        "{} broadcasts over some batch axes of y but not all; the CUDA backend runs a batch "
        "that is y's or a single matrix",
        role));
  }
  return matrix;
}

}  // namespace

absl::Status MatMulSupports(const ir::TensorType& a, const ir::TensorType& b,
                            const ir::TensorType& y) {
  if (a.rank() < 2 || b.rank() < 2 || y.rank() < 2) {
    return absl::UnimplementedError("matmul needs (batches of) matrices");
  }
  RETURN_IF_ERROR(BatchStride(a.shape, y.shape, "a").status());
  return BatchStride(b.shape, y.shape, "b").status();
}

absl::Status RunMatMul(const Cublas& blas, const KernelCall& call) {
  const TensorRef& a = call.inputs[0];
  const TensorRef& b = call.inputs[1];
  const TensorRef& y = call.outputs[0];
  const ir::AttrMap& attrs = call.node.attrs;
  const bool transpose_a = *attrs.GetBool("transpose_a", false);
  const bool transpose_b = *attrs.GetBool("transpose_b", false);
  const float alpha = static_cast<float>(*attrs.GetFloat("alpha", 1.0));
  const ir::Shape& a_shape = a.type->shape;
  const ir::Shape& b_shape = b.type->shape;
  const ir::Shape& y_shape = y.type->shape;
  const size_t a_rank = a_shape.size();
  const size_t b_rank = b_shape.size();
  ASSIGN_OR_RETURN(const int m, Int(a_shape[a_rank - (transpose_a ? 1 : 2)], "m"));
  ASSIGN_OR_RETURN(const int depth, Int(a_shape[a_rank - (transpose_a ? 2 : 1)], "k"));
  ASSIGN_OR_RETURN(const int n, Int(b_shape[b_rank - (transpose_b ? 2 : 1)], "n"));
  ASSIGN_OR_RETURN(const int a_cols, Int(a_shape.back(), "a's width"));
  ASSIGN_OR_RETURN(const int b_cols, Int(b_shape.back(), "b's width"));
  ASSIGN_OR_RETURN(const int batch, Int(Product(y_shape, 0, y_shape.size() - 2), "the batch"));
  ASSIGN_OR_RETURN(const int64_t a_stride, BatchStride(a_shape, y_shape, "a"));
  ASSIGN_OR_RETURN(const int64_t b_stride, BatchStride(b_shape, y_shape, "b"));
  const float zero = 0.0f;
  // Row-major y = op(a) op(b) is column-major y^T = op(b)^T op(a)^T, and a
  // row-major matrix is its transpose in column-major: b and a go in as they
  // are, b first.
  return CheckCublas(blas.library->sgemm_strided_batched(
                         blas.handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                         transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, depth, &alpha,
                         b.as<const float>(), b_cols, b_stride, a.as<const float>(), a_cols,
                         a_stride, &zero, y.as<float>(), n, static_cast<long long>(m) * n, batch),
                     "the matrix product");
}

// y[r, o] = x[r, :] . w[o, :] (+ b[o]): column-major y^T = w x^T.
absl::Status RunLinear(const Cublas& blas, const KernelCall& call) {
  const TensorRef& x = call.inputs[0];
  const TensorRef& w = call.inputs[1];
  const TensorRef& y = call.outputs[0];
  const ir::MatrixExtent x_rows = ir::AsMatrix(x.type->shape);
  ASSIGN_OR_RETURN(const int rows, Int(x_rows.rows, "rows"));
  ASSIGN_OR_RETURN(const int in, Int(x_rows.columns, "in features"));
  ASSIGN_OR_RETURN(const int out, Int(w.type->shape[0], "out features"));
  const float one = 1.0f;
  const float zero = 0.0f;
  RETURN_IF_ERROR(
      CheckCublas(blas.library->sgemm(blas.handle, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one,
                                      w.as<const float>(), in, x.as<const float>(), in, &zero,
                                      y.as<float>(), out),
                  "the linear layer's product"));
  if (call.inputs.size() > 2) {
    cudaStream_t stream = nullptr;
    RETURN_IF_ERROR(
        CheckCublas(blas.library->get_stream(blas.handle, &stream), "the linear layer's stream"));
    RETURN_IF_ERROR(CheckCuda(LaunchAddBias(y.as<float>(), call.inputs[2].as<const float>(),
                                            static_cast<int64_t>(rows) * out, out, stream),
                              "adding the bias"));
  }
  return absl::OkStatus();
}

// dw[o, i] = sum_r dy[r, o] x[r, i]: column-major dw^T = x^T dy.
absl::Status RunLinearBackwardWeight(const Cublas& blas, const KernelCall& call) {
  const TensorRef& dy = call.inputs[0];
  const TensorRef& x = call.inputs[1];
  const TensorRef& dw = call.outputs[0];
  const ir::MatrixExtent dy_rows = ir::AsMatrix(dy.type->shape);
  const ir::MatrixExtent x_rows = ir::AsMatrix(x.type->shape);
  ASSIGN_OR_RETURN(const int rows, Int(x_rows.rows, "rows"));
  ASSIGN_OR_RETURN(const int in, Int(x_rows.columns, "in features"));
  ASSIGN_OR_RETURN(const int out, Int(dy_rows.columns, "out features"));
  const float one = 1.0f;
  const float zero = 0.0f;
  return CheckCublas(blas.library->sgemm(blas.handle, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, &one,
                                         x.as<const float>(), in, dy.as<const float>(), out, &zero,
                                         dw.as<float>(), in),
                     "the linear layer's weight gradient");
}

}  // namespace spillway::backends::cuda
