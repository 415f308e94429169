#include "models/gpt2.h"

#include <cmath>

#include "fmt/format.h"
#include "models/layers.h"
#include "support/status_macros.h"

namespace spillway::models {
namespace {

using ir::IntList;
using ir::OpKind;
using ir::ValueId;

struct Gpt2Shape {
  int64_t batch;
  int64_t seq_len;
  int64_t d_model;
  int64_t n_head;
};

// [B,T,D] slice `index` of 3 along the last axis -> heads [B,H,T,D/H].
ValueId Heads(NetBuilder& net, const std::string& name, ValueId qkv, int64_t index,
              const Gpt2Shape& shape) {
  ValueId x = net.Op(OpKind::kSlice, {qkv},
                     {{"axes", IntList{2}},
                      {"starts", IntList{index * shape.d_model}},
                      {"ends", IntList{(index + 1) * shape.d_model}}},
                     name);
  x = net.Op(
      OpKind::kReshape, {x},
      {{"shape", IntList{shape.batch, shape.seq_len, shape.n_head, shape.d_model / shape.n_head}}},
      name + ".split_heads");
  return net.Op(OpKind::kTranspose, {x}, {{"perm", IntList{0, 2, 1, 3}}}, name + ".transpose");
}

ValueId Attention(NetBuilder& net, const std::string& name, ValueId x, const Gpt2Shape& shape,
                  double dropout) {
  ValueId qkv = net.Linear(name + ".c_attn", x, 3 * shape.d_model);
  ValueId q = Heads(net, name + ".q", qkv, 0, shape);
  ValueId k = Heads(net, name + ".k", qkv, 1, shape);
  ValueId v = Heads(net, name + ".v", qkv, 2, shape);
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.d_model / shape.n_head));
  ValueId scores =
      net.Op(OpKind::kMatMul, {q, k}, {{"transpose_b", true}, {"alpha", scale}}, name + ".scores");
  ValueId probs = net.Op(OpKind::kSoftmax, {scores}, {{"axis", int64_t{-1}}, {"causal", true}},
                         name + ".softmax");
  probs = net.Dropout(name + ".attn_dropout", probs, dropout);
  ValueId context = net.Op(OpKind::kMatMul, {probs, v}, {}, name + ".context");
  context = net.Op(OpKind::kTranspose, {context}, {{"perm", IntList{0, 2, 1, 3}}},
                   name + ".merge_transpose");
  context = net.Op(OpKind::kReshape, {context},
                   {{"shape", IntList{shape.batch, shape.seq_len, shape.d_model}}},
                   name + ".merge_heads");
  ValueId out = net.Linear(name + ".c_proj", context, shape.d_model);
  return net.Dropout(name + ".resid_dropout", out, dropout);
}

ValueId Mlp(NetBuilder& net, const std::string& name, ValueId x, const Gpt2Shape& shape,
            double dropout) {
  x = net.Linear(name + ".c_fc", x, 4 * shape.d_model);
  x = net.Op(OpKind::kGelu, {x}, {{"approximate", std::string("tanh")}}, name + ".gelu");
  x = net.Linear(name + ".c_proj", x, shape.d_model);
  return net.Dropout(name + ".dropout", x, dropout);
}

}  // namespace

absl::StatusOr<ir::Graph> BuildGpt2(const ModelOptions& options) {
  RETURN_IF_ERROR(RequirePositive("batch", options.batch));
  RETURN_IF_ERROR(RequirePositive("n_layer", options.n_layer));
  RETURN_IF_ERROR(RequirePositive("n_head", options.n_head));
  RETURN_IF_ERROR(RequireInRange("d_model", options.d_model, kMaxModelDim));
  RETURN_IF_ERROR(RequirePositive("seq_len", options.seq_len));
  RETURN_IF_ERROR(RequirePositive("vocab", options.vocab));
  if (options.d_model % options.n_head != 0) {
    return absl::InvalidArgumentError(
        fmt::format("d_model {} is not divisible by n_head {}", options.d_model, options.n_head));
  }
  ASSIGN_OR_RETURN(const double dropout, DropoutProbability(options, 0.1));
  const Gpt2Shape shape = {.batch = options.batch,
                           .seq_len = options.seq_len,
                           .d_model = options.d_model,
                           .n_head = options.n_head};

  ir::Graph graph("gpt2");
  NetBuilder net(graph, options.seed);
  ValueId tokens = net.Input("tokens", ir::I64({options.batch, options.seq_len}));
  ValueId labels = net.Input("labels", ir::I64({options.batch, options.seq_len}));
  ValueId wte = net.Parameter("wte.weight", ir::F32({options.vocab, options.d_model}));
  ValueId wpe = net.Parameter("wpe.weight", ir::F32({options.seq_len, options.d_model}));
  ValueId h = net.Op(OpKind::kEmbedding, {wte, tokens}, {}, "wte");
  // wpe [T,D] broadcasts over the batch of [B,T,D]: position t adds row t.
  h = net.Op(OpKind::kAdd, {h, wpe}, {}, "wpe_add");
  h = net.Dropout("drop", h, dropout);
  for (int64_t layer = 0; layer < options.n_layer; ++layer) {
    const std::string name = fmt::format("h.{}", layer);
    ValueId a = Attention(net, name + ".attn", net.LayerNorm(name + ".ln_1", h), shape, dropout);
    h = net.Op(OpKind::kAdd, {h, a}, {}, name + ".add_1");
    ValueId m = Mlp(net, name + ".mlp", net.LayerNorm(name + ".ln_2", h), shape, dropout);
    h = net.Op(OpKind::kAdd, {h, m}, {}, name + ".add_2");
  }
  h = net.LayerNorm("ln_f", h);
  ValueId logits = net.Op(OpKind::kMatMul, {h, wte}, {{"transpose_b", true}}, "lm_head");
  net.Output(net.Op(OpKind::kCrossEntropyLoss, {logits, labels}, {}, "loss"));
  RETURN_IF_ERROR(net.status());
  return graph;
}

}  // namespace spillway::models
