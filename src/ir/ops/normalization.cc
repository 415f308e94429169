// Placeholder until the op definitions land.
#include "ir/ops/op_defs.h"

namespace spillway::ir::ops {

void RegisterNormalizationOps(std::vector<OpDef>& /*defs*/) {}

}  // namespace spillway::ir::ops
