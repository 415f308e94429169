// softmax, log_softmax and softmax cross-entropy, with their backward ops.
// Every reduction subtracts the line's maximum before exponentiating, and
// sums in T in index order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "backends/reference/ops.h"
#include "backends/reference/spatial_util.h"
#include "fmt/format.h"
#include "ir/attributes.h"
#include "support/status_macros.h"

namespace spillway::backends::reference {
namespace {

// x seen as [outer, length, inner] around the softmax axis. Line (o, k) is
// the `length` elements at offsets (o * length + i) * inner + k.
struct AxisView {
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;

  int64_t Offset(int64_t o, int64_t i, int64_t k) const { return (o * length + i) * inner + k; }
};

AxisView ViewAlongAxis(const ir::Shape& shape, const ir::AttrMap& attrs) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = *attrs.GetInt("axis", -1);
  if (axis < 0) axis += rank;
  AxisView view;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) view.outer *= shape[d];
    if (d == axis) view.length = shape[d];
    if (d > axis) view.inner *= shape[d];
  }
  return view;
}

// How many leading keys of line `o` a softmax sees. With causal=true the axis
// is the last of [..., Q, K] and query q sees keys j <= q + (K - Q); the rest
// are masked to exactly 0. A query that sees no key (Q > K) gets all zeros.
int64_t VisibleKeys(const ir::Shape& shape, const AxisView& view, bool causal, int64_t o) {
  if (!causal) return view.length;
  const int64_t queries = shape[shape.size() - 2];
  const int64_t query = o % queries;
  const int64_t visible = query + (view.length - queries) + 1;
  return std::clamp<int64_t>(visible, 0, view.length);
}

// max over the first `count` elements of a line, and sum of exp(x - max).
template <typename T>
struct LineExp {
  T max = 0;
  T sum = 0;
};

template <typename T>
LineExp<T> ExpAlongLine(const T* x, const AxisView& view, int64_t o, int64_t k, int64_t count) {
  LineExp<T> line;
  line.max = x[view.Offset(o, 0, k)];
  for (int64_t i = 1; i < count; ++i) line.max = std::max(line.max, x[view.Offset(o, i, k)]);
  for (int64_t i = 0; i < count; ++i) line.sum += std::exp(x[view.Offset(o, i, k)] - line.max);
  return line;
}

// The log-sum-exp of one row of logits.
template <typename T>
T LogSumExp(const T* row, int64_t classes) {
  const LineExp<T> line = ExpAlongLine(row, AxisView{1, classes, 1}, 0, 0, classes);
  return line.max + std::log(line.sum);
}

// The labels of a cross-entropy must be classes or ignore_index.
absl::Status CheckLabels(const KernelCall& call, const TensorRef& labels, int64_t classes,
                         int64_t ignore_index) {
  for (int64_t r = 0; r < labels.num_elements(); ++r) {
    const int64_t label = IntegerAt(labels, r);
    if (label != ignore_index && (label < 0 || label >= classes)) {
      return KernelError(call, fmt::format("label {} at position {} is outside [0, {}) and is not "
                                           "ignore_index {}",
                                           label, r, classes, ignore_index));
    }
  }
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status RunSoftmax(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const ir::Shape& shape = call.inputs[0].type->shape;
  const AxisView view = ViewAlongAxis(shape, call.node.attrs);
  const bool causal = *call.node.attrs.GetBool("causal", false);
  const T* x = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  for (int64_t o = 0; o < view.outer; ++o) {
    const int64_t visible = VisibleKeys(shape, view, causal, o);
    for (int64_t k = 0; k < view.inner; ++k) {
      const LineExp<T> line = visible > 0 ? ExpAlongLine(x, view, o, k, visible) : LineExp<T>{};
      for (int64_t i = 0; i < view.length; ++i) {
        const int64_t at = view.Offset(o, i, k);
        y_data[at] = i < visible ? std::exp(x[at] - line.max) / line.sum : T(0);
      }
    }
  }
  return absl::OkStatus();
}

// Inputs dy, y. dx = y * (dy - sum(dy * y)); masked entries (y = 0) get 0.
template <typename T>
absl::Status RunSoftmaxBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const AxisView view = ViewAlongAxis(call.inputs[0].type->shape, call.node.attrs);
  const T* dy = call.inputs[0].as<const T>();
  const T* y = call.inputs[1].as<const T>();
  T* dx_data = dx.as<T>();
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t k = 0; k < view.inner; ++k) {
      T dot = 0;
      for (int64_t i = 0; i < view.length; ++i) {
        dot += dy[view.Offset(o, i, k)] * y[view.Offset(o, i, k)];
      }
      for (int64_t i = 0; i < view.length; ++i) {
        const int64_t at = view.Offset(o, i, k);
        dx_data[at] = y[at] * (dy[at] - dot);
      }
    }
  }
  return absl::OkStatus();
}

// y = x - max - log(sum(exp(x - max))).
template <typename T>
absl::Status RunLogSoftmax(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0}));
  const TensorRef& y = call.outputs[0];
  if (y.data == nullptr) return absl::OkStatus();
  const AxisView view = ViewAlongAxis(call.inputs[0].type->shape, call.node.attrs);
  const T* x = call.inputs[0].as<const T>();
  T* y_data = y.as<T>();
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t k = 0; k < view.inner; ++k) {
      const LineExp<T> line = ExpAlongLine(x, view, o, k, view.length);
      const T log_sum = std::log(line.sum);
      for (int64_t i = 0; i < view.length; ++i) {
        const int64_t at = view.Offset(o, i, k);
        y_data[at] = x[at] - line.max - log_sum;
      }
    }
  }
  return absl::OkStatus();
}

// Inputs dy, y. dx = dy - exp(y) * sum(dy).
template <typename T>
absl::Status RunLogSoftmaxBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const TensorRef& dx = call.outputs[0];
  if (dx.data == nullptr) return absl::OkStatus();
  const AxisView view = ViewAlongAxis(call.inputs[0].type->shape, call.node.attrs);
  const T* dy = call.inputs[0].as<const T>();
  const T* y = call.inputs[1].as<const T>();
  T* dx_data = dx.as<T>();
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t k = 0; k < view.inner; ++k) {
      T sum = 0;
      for (int64_t i = 0; i < view.length; ++i) sum += dy[view.Offset(o, i, k)];
      for (int64_t i = 0; i < view.length; ++i) {
        const int64_t at = view.Offset(o, i, k);
        dx_data[at] = dy[at] - std::exp(y[at]) * sum;
      }
    }
  }
  return absl::OkStatus();
}

// Inputs logits [..., C], labels [...] (i64 or i32). Per row, loss =
// logsumexp(logits) - logits[label], and 0 where label == ignore_index.
// reduction="mean" averages over the rows not ignored; with every row ignored
// the mean is 0, not PyTorch's NaN, so that such a batch leaves the weights
// unchanged instead of poisoning them.
template <typename T>
absl::Status RunCrossEntropyLoss(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1}));
  const TensorRef& loss = call.outputs[0];
  if (loss.data == nullptr) return absl::OkStatus();
  const ir::AttrMap& attrs = call.node.attrs;
  const int64_t ignore_index = *attrs.GetInt("ignore_index", -100);
  const bool mean = *attrs.GetString("reduction", "mean") == "mean";
  const TensorRef& labels = call.inputs[1];
  const int64_t classes = call.inputs[0].type->shape.back();
  RETURN_IF_ERROR(CheckLabels(call, labels, classes, ignore_index));
  const T* logits = call.inputs[0].as<const T>();
  T* loss_data = loss.as<T>();
  T total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < labels.num_elements(); ++r) {
    const int64_t label = IntegerAt(labels, r);
    T row_loss = 0;
    if (label != ignore_index) {
      const T* row = logits + r * classes;
      row_loss = LogSumExp(row, classes) - row[label];
      total += row_loss;
      ++counted;
    }
    if (!mean) loss_data[r] = row_loss;
  }
  if (mean) loss_data[0] = counted > 0 ? total / static_cast<T>(counted) : T(0);
  return absl::OkStatus();
}

// Inputs dloss, logits, labels. Per row not ignored,
// dlogits = scale * (softmax(logits) - onehot(label)), with scale =
// dloss / (rows not ignored) for "mean" and dloss[row] for "none"; ignored
// rows get 0.
template <typename T>
absl::Status RunCrossEntropyLossBackward(const KernelCall& call) {
  RETURN_IF_ERROR(ExpectInputs(call, {0, 1, 2}));
  const TensorRef& dlogits = call.outputs[0];
  if (dlogits.data == nullptr) return absl::OkStatus();
  const ir::AttrMap& attrs = call.node.attrs;
  const int64_t ignore_index = *attrs.GetInt("ignore_index", -100);
  const bool mean = *attrs.GetString("reduction", "mean") == "mean";
  const TensorRef& labels = call.inputs[2];
  const int64_t classes = call.inputs[1].type->shape.back();
  RETURN_IF_ERROR(CheckLabels(call, labels, classes, ignore_index));
  const T* dloss = call.inputs[0].as<const T>();
  const T* logits = call.inputs[1].as<const T>();
  T* dlogits_data = dlogits.as<T>();
  int64_t counted = 0;
  for (int64_t r = 0; r < labels.num_elements(); ++r) {
    if (IntegerAt(labels, r) != ignore_index) ++counted;
  }
  for (int64_t r = 0; r < labels.num_elements(); ++r) {
    const int64_t label = IntegerAt(labels, r);
    const T* row = logits + r * classes;
    T* grad = dlogits_data + r * classes;
    if (label == ignore_index) {
      for (int64_t c = 0; c < classes; ++c) grad[c] = 0;
      continue;
    }
    const T scale = mean ? dloss[0] / static_cast<T>(counted) : dloss[r];
    const T log_sum = LogSumExp(row, classes);
    for (int64_t c = 0; c < classes; ++c) {
      const T probability = std::exp(row[c] - log_sum);
      grad[c] = scale * (c == label ? probability - T(1) : probability);
    }
  }
  return absl::OkStatus();
}

SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(Softmax);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(SoftmaxBackward);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(LogSoftmax);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(LogSoftmaxBackward);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(CrossEntropyLoss);
SPILLWAY_INSTANTIATE_REFERENCE_KERNEL(CrossEntropyLossBackward);

}  // namespace spillway::backends::reference
