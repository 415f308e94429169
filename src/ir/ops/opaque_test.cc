#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "support/status_macros.h"

namespace spillway::ir {
namespace {

using ::testing::HasSubstr;

TEST(OpaqueOp, OutputIsAByteBufferOfTheGivenSize) {
  const std::vector<TensorType> inputs = {F32({4, 4}), F32({2})};
  absl::StatusOr<std::vector<TensorType>> outputs =
      InferOutputTypes(OpKind::kOpaque, {{"bytes", int64_t{1000}}}, inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 1u);
  EXPECT_EQ(TypeToString(outputs->front()), "bool[1000]");
  EXPECT_EQ(outputs->front().bytes(), 1000);
}

TEST(OpaqueOp, TakesAnyNumberOfInputsAndAnEmptyOutput) {
  absl::StatusOr<std::vector<TensorType>> outputs =
      InferOutputTypes(OpKind::kOpaque, {{"bytes", int64_t{0}}}, {});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->front().bytes(), 0);
}

TEST(OpaqueOp, RefusesAMissingOrNegativeSize) {
  EXPECT_THAT(std::string(StatusMessage(InferOutputTypes(OpKind::kOpaque, {}, {}).status())),
              HasSubstr("bytes"));
  EXPECT_THAT(std::string(StatusMessage(
                  InferOutputTypes(OpKind::kOpaque, {{"bytes", int64_t{-1}}}, {}).status())),
              HasSubstr("must be >= 0, got -1"));
}

TEST(OpaqueOp, IsPlanningOnlyAndCostsItsBytes) {
  const OpDef& def = GetOpDef(OpKind::kOpaque);
  EXPECT_TRUE(def.planning_only);
  EXPECT_FALSE(def.differentiable);
  EXPECT_EQ(OpName(OpKind::kOpaque), "opaque");
  Graph graph;
  const ValueId x = graph.AddInput("x", F32({8}));
  absl::StatusOr<NodeId> node = graph.AddNode(OpKind::kOpaque, {x}, {{"bytes", int64_t{100}}}, "n");
  ASSERT_TRUE(node.ok()) << node.status();
  const OpCost cost = NodeCost(graph, graph.node(*node));
  EXPECT_EQ(cost.flops, 0);
  EXPECT_EQ(cost.bytes_read, 32);
  EXPECT_EQ(cost.bytes_written, 100);
}

TEST(OpaqueOp, EveryOtherOpHasAKernel) {
  // Only the planning ops may lack kernels; the backends' coverage checks
  // iterate SPILLWAY_KERNEL_OPS and rely on this.
#define SPILLWAY_EXPECT_KERNEL(name, text) EXPECT_FALSE(GetOpDef(OpKind::k##name).planning_only);
  SPILLWAY_KERNEL_OPS(SPILLWAY_EXPECT_KERNEL)
#undef SPILLWAY_EXPECT_KERNEL
}

}  // namespace
}  // namespace spillway::ir
