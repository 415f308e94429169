// From a forward graph with a scalar loss to the training graph: the forward
// nodes, the backward nodes that the gradient rules emit (reading their saved
// tensors as explicit inputs), and one optimizer update per parameter.
//
// The training graph extends a copy of the forward graph, so every forward
// value and node keeps its id. Its outputs are the loss, the updated running
// statistics of batch norm, and every update's outputs (parameters and
// optimizer state, written in place over their inputs).
#pragma once

#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/builder.h"
#include "ir/graph.h"

namespace spillway::autodiff {

enum class OptimizerKind { kSgd, kAdam };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.1;
  double weight_decay = 0.0;
  // SGD.
  double momentum = 0.9;
  bool nesterov = false;
  // Adam; `decoupled` weight decay makes it AdamW.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  bool decoupled = true;
};

struct TrainingGraph {
  ir::Graph graph = ir::Graph("training");
  ir::ValueId loss = 0;
  std::map<ir::ValueId, ir::ValueId> param_grads;     // parameter -> its gradient
  std::vector<ir::ValueId> params_without_gradient;   // no path to the loss: not updated
  std::map<ir::ValueId, ir::ValueId> updated_params;  // parameter -> the update's output
  // parameter -> its state inputs: [momentum_buf] for SGD with momentum, [m, v] for Adam.
  std::map<ir::ValueId, std::vector<ir::ValueId>> optimizer_state;
  ir::ValueId adam_step = ir::kInvalidValue;  // Adam's shared i64[] step counter
};

// Errors: the forward graph does not have exactly one output, a scalar float
// loss; or an op on the path to the loss has no gradient rule (named).
absl::StatusOr<TrainingGraph> BuildTrainingGraph(const ir::Graph& forward,
                                                 const OptimizerOptions& optimizer);

// The optimizer's hyperparameters in their ranges (a positive learning rate,
// momentum and betas in [0, 1), a non-negative weight decay, a positive
// epsilon, NaN and infinities refused), each error naming the field and the
// range in words. BuildTrainingGraph checks them first.
absl::Status ValidateOptimizerOptions(const OptimizerOptions& optimizer);

}  // namespace spillway::autodiff
