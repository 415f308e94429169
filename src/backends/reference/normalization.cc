// batch_norm and layer_norm with their backward ops.
//
// Both see x as a matrix [rows, C] (C the last axis). Batch norm normalizes
// each column over all rows (N, H and W of an NHWC activation); layer norm
// normalizes each row over its C features. Sums run in T in row order, so
// results are deterministic.
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/reference/ops.h"
#include "backends/reference/spatial_util.h"
#include "ir/attributes.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// [rows, columns] of x, with columns the last axis.
struct Matrix {
  int64_t rows = 1;
  int64_t columns = 1;
};

Matrix AsMatrix(const ir::Shape& shape) {
  Matrix matrix;
  matrix.columns = shape.back();
  for (size_t i = 0; i + 1 < shape.size(); ++i) matrix.rows *= shape[i];
  return matrix;
}

template <typename T>
T InvStd(T variance, T epsilon) {
  return T(1) / std::sqrt(variance + epsilon);
}

// The one normalization expression of both ops, in both of batch norm's modes
// and its recomputation: a recomputed batch norm gives bitwise the first run's
// y because it evaluates this same expression on the same stored values.
template <typename T>
T Normalize(T x, T mean, T inv_std, T gamma, T beta) {
  return (x - mean) * inv_std * gamma + beta;
}

// The statistics of a batch norm, per channel: the mean and the biased
// variance over all rows.
template <typename T>
void ColumnMoments(const T* x, Matrix m, T* mean, T* variance) {
  for (int64_t c = 0; c < m.columns; ++c) {
    T sum = 0;
    for (int64_t r = 0; r < m.rows; ++r) sum += x[r * m.columns + c];
    mean[c] = sum / static_cast<T>(m.rows);
    T squares = 0;
    for (int64_t r = 0; r < m.rows; ++r) {
      const T centered = x[r * m.columns + c] - mean[c];
      squares += centered * centered;
    }
    variance[c] = squares / static_cast<T>(m.rows);
  }
}

// y = Normalize(x) per channel, with statistics given per channel.
template <typename T>
void NormalizeColumns(const T* x, Matrix m, const T* mean, const T* inv_std, const T* gamma,
                      const T* beta, T* y) {
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.columns; ++c) {
      const int64_t i = r * m.columns + c;
      y[i] = Normalize(x[i], mean[c], inv_std[c], gamma[c], beta[c]);
    }
  }
}

}  // namespace

// Inputs x, gamma, beta, running_mean, running_var; in a recomputation also
// saved_mean and saved_inv_std (inputs 5, 6), with inputs 3 and 4 null.
// Training outputs y, saved_mean, saved_inv_std, running_mean, running_var
// (the last two in place over inputs 3 and 4); inference outputs y.
template <typename T>
absl::Status RunBatchNorm(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1, 2}));
  const ir::AttrMap& attrs = call.node.attrs;
  const bool training = *attrs.GetBool("training", true);
  const T epsilon = static_cast<T>(*attrs.GetFloat("epsilon", 1e-5));
  const Matrix m = AsMatrix(call.inputs[0].type->shape);
  const T* x = call.inputs[0].as<const T>();
  const T* gamma = call.inputs[1].as<const T>();
  const T* beta = call.inputs[2].as<const T>();
  T* y = call.outputs[0].as<T>();

  if (const std::optional<SavedStatistics> saved = SavedStatisticsOf(call)) {
    // A recomputation: only y, from the statistics the first run saved.
    if (saved->mean->data == nullptr || saved->inv_std->data == nullptr) {
      return KernelError(call, "a recomputation needs its saved statistics");
    }
    if (y != nullptr) {
      NormalizeColumns(x, m, saved->mean->as<const T>(), saved->inv_std->as<const T>(), gamma, beta,
                       y);
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ExpectInputs(call, {3, 4}));
  const T* running_mean = call.inputs[3].as<const T>();
  const T* running_var = call.inputs[4].as<const T>();
  std::vector<T> inv_std(static_cast<size_t>(m.columns));

  if (!training) {
    for (int64_t c = 0; c < m.columns; ++c) inv_std[c] = InvStd(running_var[c], epsilon);
    if (y != nullptr) NormalizeColumns(x, m, running_mean, inv_std.data(), gamma, beta, y);
    return absl::OkStatus();
  }

  if (m.rows < 2) {
    return KernelError(call, "training needs more than one value per channel");
  }
  std::vector<T> mean(static_cast<size_t>(m.columns));
  std::vector<T> variance(static_cast<size_t>(m.columns));
  ColumnMoments(x, m, mean.data(), variance.data());
  for (int64_t c = 0; c < m.columns; ++c) inv_std[c] = InvStd(variance[c], epsilon);
  // y reads the statistics as stored, so a recomputation from the saved
  // outputs repeats this exact computation.
  if (y != nullptr) NormalizeColumns(x, m, mean.data(), inv_std.data(), gamma, beta, y);
  if (T* saved_mean = call.outputs[1].as<T>()) {
    for (int64_t c = 0; c < m.columns; ++c) saved_mean[c] = mean[c];
  }
  if (T* saved_inv_std = call.outputs[2].as<T>()) {
    for (int64_t c = 0; c < m.columns; ++c) saved_inv_std[c] = inv_std[c];
  }
  // Running statistics follow PyTorch: an exponential average with weight
  // `momentum` on the batch, and the unbiased variance (Bessel's correction,
  // rows / (rows - 1)) for running_var, although the batch is normalized with
  // the biased one. Each element is read before it is written (in place).
  const T momentum = static_cast<T>(*attrs.GetFloat("momentum", 0.1));
  const T bessel = static_cast<T>(m.rows) / static_cast<T>(m.rows - 1);
  if (T* new_mean = call.outputs[3].as<T>()) {
    for (int64_t c = 0; c < m.columns; ++c) {
      new_mean[c] = (T(1) - momentum) * running_mean[c] + momentum * mean[c];
    }
  }
  if (T* new_var = call.outputs[4].as<T>()) {
    for (int64_t c = 0; c < m.columns; ++c) {
      new_var[c] = (T(1) - momentum) * running_var[c] + momentum * variance[c] * bessel;
    }
  }
  return absl::OkStatus();
}

// Inputs dy, x, gamma, mean, and inv_std (training: the saved batch
// statistics) or running_var (inference). Outputs dx, dgamma, dbeta.
//
// With x_hat = (x - mean) * inv_std, dbeta = sum(dy) and dgamma =
// sum(dy * x_hat) over rows. In inference the statistics are constants:
// dx = dy * gamma * inv_std. In training they depend on x, and
// dx = gamma * inv_std * (dy - dbeta / rows - x_hat * dgamma / rows).
template <typename T>
absl::Status RunBatchNormBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1, 2, 3, 4}));
  const ir::AttrMap& attrs = call.node.attrs;
  const bool training = *attrs.GetBool("training", true);
  const T epsilon = static_cast<T>(*attrs.GetFloat("epsilon", 1e-5));
  const Matrix m = AsMatrix(call.inputs[1].type->shape);
  const T* dy = call.inputs[0].as<const T>();
  const T* x = call.inputs[1].as<const T>();
  const T* gamma = call.inputs[2].as<const T>();
  const T* mean = call.inputs[3].as<const T>();
  const T* spread = call.inputs[4].as<const T>();
  T* dx = call.outputs[0].as<T>();
  T* dgamma = call.outputs[1].as<T>();
  T* dbeta = call.outputs[2].as<T>();
  const T rows = static_cast<T>(m.rows);

  for (int64_t c = 0; c < m.columns; ++c) {
    const T inv_std = training ? spread[c] : InvStd(spread[c], epsilon);
    T sum_dy = 0;
    T sum_dy_x_hat = 0;
    for (int64_t r = 0; r < m.rows; ++r) {
      const int64_t i = r * m.columns + c;
      sum_dy += dy[i];
      sum_dy_x_hat += dy[i] * ((x[i] - mean[c]) * inv_std);
    }
    if (dgamma != nullptr) dgamma[c] = sum_dy_x_hat;
    if (dbeta != nullptr) dbeta[c] = sum_dy;
    if (dx == nullptr) continue;
    const T scale = gamma[c] * inv_std;
    for (int64_t r = 0; r < m.rows; ++r) {
      const int64_t i = r * m.columns + c;
      if (training) {
        const T x_hat = (x[i] - mean[c]) * inv_std;
        dx[i] = scale * (dy[i] - sum_dy / rows - x_hat * sum_dy_x_hat / rows);
      } else {
        dx[i] = scale * dy[i];
      }
    }
  }
  return absl::OkStatus();
}

// Inputs x, gamma, beta. Outputs y, mean and rstd (one per row).
template <typename T>
absl::Status RunLayerNorm(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1, 2}));
  const T epsilon = static_cast<T>(*call.node.attrs.GetFloat("epsilon", 1e-5));
  const Matrix m = AsMatrix(call.inputs[0].type->shape);
  const T* x = call.inputs[0].as<const T>();
  const T* gamma = call.inputs[1].as<const T>();
  const T* beta = call.inputs[2].as<const T>();
  T* y = call.outputs[0].as<T>();
  T* mean_out = call.outputs[1].as<T>();
  T* rstd_out = call.outputs[2].as<T>();
  const T features = static_cast<T>(m.columns);

  for (int64_t r = 0; r < m.rows; ++r) {
    const T* row = x + r * m.columns;
    T sum = 0;
    for (int64_t c = 0; c < m.columns; ++c) sum += row[c];
    const T mean = sum / features;
    T squares = 0;
    for (int64_t c = 0; c < m.columns; ++c) squares += (row[c] - mean) * (row[c] - mean);
    const T rstd = InvStd(squares / features, epsilon);
    if (mean_out != nullptr) mean_out[r] = mean;
    if (rstd_out != nullptr) rstd_out[r] = rstd;
    if (y == nullptr) continue;
    for (int64_t c = 0; c < m.columns; ++c) {
      y[r * m.columns + c] = Normalize(row[c], mean, rstd, gamma[c], beta[c]);
    }
  }
  return absl::OkStatus();
}

// Inputs dy, x, gamma, mean, rstd. Outputs dx, dgamma, dbeta.
//
// Per row, with x_hat = (x - mean) * rstd and g = dy * gamma:
// dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)). Over rows,
// dgamma = sum(dy * x_hat) and dbeta = sum(dy).
template <typename T>
absl::Status RunLayerNormBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1, 2, 3, 4}));
  const Matrix m = AsMatrix(call.inputs[1].type->shape);
  const T* dy = call.inputs[0].as<const T>();
  const T* x = call.inputs[1].as<const T>();
  const T* gamma = call.inputs[2].as<const T>();
  const T* mean = call.inputs[3].as<const T>();
  const T* rstd = call.inputs[4].as<const T>();
  T* dx = call.outputs[0].as<T>();
  T* dgamma = call.outputs[1].as<T>();
  T* dbeta = call.outputs[2].as<T>();
  const T features = static_cast<T>(m.columns);

  if (dx != nullptr) {
    for (int64_t r = 0; r < m.rows; ++r) {
      const int64_t base = r * m.columns;
      T sum_g = 0;
      T sum_g_x_hat = 0;
      for (int64_t c = 0; c < m.columns; ++c) {
        const T g = dy[base + c] * gamma[c];
        sum_g += g;
        sum_g_x_hat += g * ((x[base + c] - mean[r]) * rstd[r]);
      }
      for (int64_t c = 0; c < m.columns; ++c) {
        const T g = dy[base + c] * gamma[c];
        const T x_hat = (x[base + c] - mean[r]) * rstd[r];
        dx[base + c] = rstd[r] * (g - sum_g / features - x_hat * sum_g_x_hat / features);
      }
    }
  }
  for (int64_t c = 0; c < m.columns; ++c) {
    T sum_dy = 0;
    T sum_dy_x_hat = 0;
    for (int64_t r = 0; r < m.rows; ++r) {
      const int64_t i = r * m.columns + c;
      sum_dy += dy[i];
      sum_dy_x_hat += dy[i] * ((x[i] - mean[r]) * rstd[r]);
    }
    if (dgamma != nullptr) dgamma[c] = sum_dy_x_hat;
    if (dbeta != nullptr) dbeta[c] = sum_dy;
  }
  return absl::OkStatus();
}

SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(BatchNorm);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(BatchNormBackward);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(LayerNorm);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(LayerNormBackward);

}  // namespace spillway::backends::reference
