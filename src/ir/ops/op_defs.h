// Registration of the op definitions, one function per file of src/ir/ops.
// Only op_registry.cc calls these.
#pragma once

#include <vector>

#include "ir/op_registry.h"

namespace spillway::ir::ops {

void RegisterConvolutionOps(std::vector<OpDef>& defs);    // conv2d and its backward ops
void RegisterNormalizationOps(std::vector<OpDef>& defs);  // batch_norm, layer_norm, softmaxes
void RegisterElementwiseOps(
    std::vector<OpDef>& defs);                        // relu, gelu, add, mul, dropout, fill, add_n
void RegisterPoolingOps(std::vector<OpDef>& defs);    // max/avg/global pooling, resize
void RegisterTensorOps(std::vector<OpDef>& defs);     // concat, slice, reshape, transpose, ...
void RegisterMatMulOps(std::vector<OpDef>& defs);     // matmul, linear, embedding
void RegisterLossOps(std::vector<OpDef>& defs);       // cross_entropy_loss
void RegisterOptimizerOps(std::vector<OpDef>& defs);  // sgd_update, adam_update
void RegisterPlanningOps(std::vector<OpDef>& defs);   // opaque

}  // namespace spillway::ir::ops
