// Every op the IR knows: forward, backward and optimizer ops, which have
// kernels, and planning-only ops, which have none (a node of a cost-annotated
// graph file, planned and simulated but never run). The text format and the
// CLI use the snake_case names.
#pragma once

#include <optional>
#include <string_view>

namespace spillway::ir {

// X(EnumName, "text_name")
#define SPILLWAY_FORWARD_OPS(X)             \
  X(Conv2d, "conv2d")                       \
  X(BatchNorm, "batch_norm")                \
  X(Relu, "relu")                           \
  X(Gelu, "gelu")                           \
  X(Sigmoid, "sigmoid")                     \
  X(Tanh, "tanh")                           \
  X(LeakyRelu, "leaky_relu")                \
  X(Clip, "clip")                           \
  X(MaxPool, "max_pool")                    \
  X(AvgPool, "avg_pool")                    \
  X(GlobalAvgPool, "global_avg_pool")       \
  X(Add, "add")                             \
  X(Mul, "mul")                             \
  X(Sub, "sub")                             \
  X(Div, "div")                             \
  X(Concat, "concat")                       \
  X(Slice, "slice")                         \
  X(ResizeBilinear, "resize_bilinear")      \
  X(ResizeNearest, "resize_nearest")        \
  X(MatMul, "matmul")                       \
  X(Linear, "linear")                       \
  X(Softmax, "softmax")                     \
  X(LogSoftmax, "log_softmax")              \
  X(CrossEntropyLoss, "cross_entropy_loss") \
  X(LayerNorm, "layer_norm")                \
  X(Embedding, "embedding")                 \
  X(Dropout, "dropout")                     \
  X(Reshape, "reshape")                     \
  X(Transpose, "transpose")                 \
  X(Flatten, "flatten")                     \
  X(Fill, "fill")

#define SPILLWAY_BACKWARD_OPS(X)                             \
  X(Conv2dBackwardData, "conv2d_backward_data")              \
  X(Conv2dBackwardWeight, "conv2d_backward_weight")          \
  X(BatchNormBackward, "batch_norm_backward")                \
  X(ReluBackward, "relu_backward")                           \
  X(GeluBackward, "gelu_backward")                           \
  X(SigmoidBackward, "sigmoid_backward")                     \
  X(TanhBackward, "tanh_backward")                           \
  X(LeakyReluBackward, "leaky_relu_backward")                \
  X(ClipBackward, "clip_backward")                           \
  X(MaxPoolBackward, "max_pool_backward")                    \
  X(AvgPoolBackward, "avg_pool_backward")                    \
  X(GlobalAvgPoolBackward, "global_avg_pool_backward")       \
  X(SliceBackward, "slice_backward")                         \
  X(ResizeBilinearBackward, "resize_bilinear_backward")      \
  X(ResizeNearestBackward, "resize_nearest_backward")        \
  X(LinearBackwardWeight, "linear_backward_weight")          \
  X(SoftmaxBackward, "softmax_backward")                     \
  X(LogSoftmaxBackward, "log_softmax_backward")              \
  X(CrossEntropyLossBackward, "cross_entropy_loss_backward") \
  X(LayerNormBackward, "layer_norm_backward")                \
  X(EmbeddingBackward, "embedding_backward")                 \
  X(DropoutBackward, "dropout_backward")                     \
  X(ReduceSum, "reduce_sum")                                 \
  X(AddN, "add_n")

#define SPILLWAY_UPDATE_OPS(X) \
  X(SgdUpdate, "sgd_update")   \
  X(AdamUpdate, "adam_update")

// A node of a graph that came with its own costs (--graph): no semantics
// beyond its inputs, the bytes of its output and the time a cost model gives it.
#define SPILLWAY_PLANNING_OPS(X) X(Opaque, "opaque")

// The ops a backend runs: each has a reference kernel, a CPU kernel and a
// finite-difference check (or a test that it has no gradient).
#define SPILLWAY_KERNEL_OPS(X) \
  SPILLWAY_FORWARD_OPS(X) SPILLWAY_BACKWARD_OPS(X) SPILLWAY_UPDATE_OPS(X)

#define SPILLWAY_ALL_OPS(X) SPILLWAY_KERNEL_OPS(X) SPILLWAY_PLANNING_OPS(X)

enum class OpKind : int {
#define SPILLWAY_OP_ENUM(name, text) k##name,
  SPILLWAY_ALL_OPS(SPILLWAY_OP_ENUM)
#undef SPILLWAY_OP_ENUM
};

inline constexpr int kNumOpKinds = 0
#define SPILLWAY_OP_COUNT(name, text) +1
    SPILLWAY_ALL_OPS(SPILLWAY_OP_COUNT)
#undef SPILLWAY_OP_COUNT
    ;

std::string_view OpName(OpKind kind);
std::optional<OpKind> ParseOpKind(std::string_view name);

}  // namespace spillway::ir
