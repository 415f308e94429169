#include "ir/op_kind.h"

#include <array>

namespace spillway::ir {
namespace {

constexpr std::array<std::string_view, kNumOpKinds> kOpNames = {
#define SPILLWAY_OP_NAME(name, text) text,
    SPILLWAY_ALL_OPS(SPILLWAY_OP_NAME)
#undef SPILLWAY_OP_NAME
};

}  // namespace

std::string_view OpName(OpKind kind) { return kOpNames[static_cast<size_t>(kind)]; }

std::optional<OpKind> ParseOpKind(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    if (kOpNames[i] == name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

}  // namespace spillway::ir
