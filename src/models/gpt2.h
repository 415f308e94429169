// GPT-2 (Radford et al. 2019), the decoder-only transformer, in the layout of
// the released checkpoints ("wte", "h.0.attn.c_attn", ...).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"

namespace spillway::models {

// d_model is multiplied by 4 for the MLP; this keeps the product in range.
inline constexpr int64_t kMaxModelDim = int64_t{1} << 40;

// Token embedding wte [vocab, d_model] plus position embedding wpe
// [seq_len, d_model] (one row per position of the sequence built, so the
// 124M count needs seq_len 1024), then n_layer pre-norm blocks: ln_1, c_attn
// to 3*d_model, q/k/v sliced and split into n_head heads, causal softmax of
// q k^T / sqrt(d_head), c_proj, residual; ln_2, c_fc to 4*d_model, tanh GELU,
// c_proj, residual. Final ln_f; the LM head reuses wte (tied, no new
// parameter); cross-entropy over i64 labels [batch, seq_len]. Dropout (default
// 0.1, GPT-2's) follows the embeddings, the attention probabilities and both
// residual branches. Options: batch, n_layer, n_head, d_model, seq_len,
// vocab, dropout, seed.
absl::StatusOr<ir::Graph> BuildGpt2(const ModelOptions& options);

}  // namespace spillway::models
