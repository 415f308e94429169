#include "analysis/summary.h"

#include <gtest/gtest.h>

#include "autodiff/training_graph.h"
#include "models/models.h"

namespace spillway::analysis {
namespace {

TEST(Summary, ResNet18CountsMatchTheGraph) {
  models::ModelOptions options;
  options.height = options.width = 64;
  absl::StatusOr<ir::Graph> forward = models::BuildModel("resnet18", options);
  ASSERT_TRUE(forward.ok()) << forward.status();
  absl::StatusOr<autodiff::TrainingGraph> training =
      autodiff::BuildTrainingGraph(*forward, autodiff::OptimizerOptions{});
  ASSERT_TRUE(training.ok()) << training.status();
  const GraphSummary s = Summarize(training->graph);
  EXPECT_EQ(s.parameters, 11689512);  // torchvision's published count
  EXPECT_EQ(s.parameter_bytes, 4 * s.parameters);
  EXPECT_EQ(s.optimizer_state_bytes, s.parameter_bytes);  // one momentum buffer per parameter
  EXPECT_EQ(s.forward_nodes + s.backward_nodes + s.update_nodes, training->graph.num_nodes());
  EXPECT_EQ(s.steps, training->graph.num_nodes());
  EXPECT_GT(s.forward_macs, 0);
  // The backward pass does about twice the forward's work.
  EXPECT_GT(s.backward_flops, s.forward_flops);
  ASSERT_EQ(s.largest_saved.size(), 10u);
  for (size_t i = 1; i < s.largest_saved.size(); ++i) {
    EXPECT_GE(s.largest_saved[i - 1].bytes, s.largest_saved[i].bytes);
  }
  // The naive peak holds every persistent byte plus at least the saved tensors
  // that are still alive when the backward pass starts (all of them).
  EXPECT_GE(s.peak_bytes,
            s.parameter_bytes + s.optimizer_state_bytes + s.buffer_bytes + s.saved_bytes);
  EXPECT_FALSE(s.peak_node.empty());
}

}  // namespace
}  // namespace spillway::analysis
