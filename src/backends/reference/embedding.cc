// embedding (a row gather from a [V, D] table) and its backward op (a
// scatter-add of the gradient rows into a zeroed table).
#include <cstdint>

#include "backends/reference/ops.h"
#include "backends/reference/spatial_util.h"
#include "fmt/format.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// Every index must name a row of a table with `rows` rows.
absl::Status CheckIndices(const KernelCall& call, const TensorRef& indices, int64_t rows) {
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    const int64_t index = IntegerAt(indices, i);
    if (index < 0 || index >= rows) {
      return KernelError(call, fmt::format("index {} at position {} is outside the table's rows "
                                           "[0, {})",
                                           index, i, rows));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Inputs table [V, D], indices [...]. y[..., :] = table[index, :].
template <typename T>
absl::Status RunEmbedding(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const ir::Shape& table_shape = call.inputs[0].type->shape;
  const TensorRef& indices = call.inputs[1];
  RETURN_IF_ERROR(CheckIndices(call, indices, table_shape[0]));
  const int64_t width = table_shape[1];
  const T* table = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    const T* row = table + IntegerAt(indices, i) * width;
    for (int64_t d = 0; d < width; ++d) y_data[i * width + d] = row[d];
  }
  return absl::OkStatus();
}

// Inputs dy [..., D], indices [...]; attribute num_embeddings. Rows of dy are
// added into dtable in index order, so repeated indices sum deterministically.
template <typename T>
absl::Status RunEmbeddingBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const TensorRef& dtable = call.outputs[0];
  if (dtable.data == nullptr) return absl::OkStatus();
  const ir::Shape& table_shape = dtable.type->shape;
  const TensorRef& indices = call.inputs[1];
  RETURN_IF_ERROR(CheckIndices(call, indices, table_shape[0]));
  const int64_t width = table_shape[1];
  const T* dy = call.inputs[0].as<const T>();
  T* dtable_data = dtable.as<T>();
  FillZero<T>(dtable);
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    T* row = dtable_data + IntegerAt(indices, i) * width;
    for (int64_t d = 0; d < width; ++d) row[d] += dy[i * width + d];
  }
  return absl::OkStatus();
}

SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Embedding);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(EmbeddingBackward);

}  // namespace spillway::backends::reference
