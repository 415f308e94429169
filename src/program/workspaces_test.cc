#include "program/workspaces.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "autodiff/training_graph.h"
#include "ir/text_format.h"
#include "models/models.h"
#include "program/rewriter.h"
#include "program/verifier.h"
#include "program/workspace_sizes.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::program {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

ir::Graph Parse(std::string_view text) {
  absl::StatusOr<ir::Graph> graph = ir::ParseAndVerifyGraph(text);
  SPILLWAY_CHECK(graph.ok(), "the test graph parses");
  return *std::move(graph);
}

const ir::Node& NodeNamed(const ir::Graph& graph, std::string_view name) {
  for (const ir::Node& node : graph.nodes()) {
    if (node.name == name) return node;
  }
  SPILLWAY_CHECK(false, "no such node");
  return graph.node(0);
}

// A convolution may use at most the limit and no more than its largest
// operand; batch norm and the loss declare what the CUDA kernels carve out
// of the workspace; element-wise ops nothing; and a device whose kernels keep
// their own scratch (limit 0) declares nothing at all.
TEST(Workspaces, EachNodeDeclaresFromItsShapesAlone) {
  const ir::Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2,16,16,8] nhwc\n"
      "  param %w: f32[4,3,3,8]\n"
      "  %y: f32[2,16,16,4] nhwc = conv2d(%x, %w) {pads=[1,1,1,1]}\n"
      "  param %g: f32[4]\n"
      "  param %b: f32[4]\n"
      "  buffer %rm: f32[4]\n"
      "  buffer %rv: f32[4]\n"
      "  %n: f32[2,16,16,4] nhwc, %m: f32[4], %s: f32[4], %rm2: f32[4], %rv2: f32[4] = "
      "batch_norm(%y, %g, %b, %rm, %rv)\n"
      "  %r: f32[2,16,16,4] nhwc = relu(%n)\n"
      "  output %r, %m, %s, %rm2, %rv2\n"
      "}\n");
  const ir::Node& conv = NodeNamed(graph, "y");
  const int64_t x_bytes = 2 * 16 * 16 * 8 * 4;  // the largest operand
  EXPECT_EQ(DeclaredWorkspaceBytes(graph, conv, 64 * kMiB), x_bytes);
  EXPECT_EQ(DeclaredWorkspaceBytes(graph, conv, 1000), 1000);
  EXPECT_EQ(DeclaredWorkspaceBytes(graph, conv, 0), 0);
  const ir::Node& norm = NodeNamed(graph, "n");
  EXPECT_EQ(DeclaredWorkspaceBytes(graph, norm, 64 * kMiB), BatchNormScratchBytes(512, 4));
  EXPECT_EQ(DeclaredWorkspaceBytes(graph, norm, 0), 0);
  EXPECT_EQ(DeclaredWorkspaceBytes(graph, NodeNamed(graph, "r"), 64 * kMiB), 0);
  EXPECT_EQ(WorkspaceRegionBytes(graph, 64 * kMiB), x_bytes);
  EXPECT_EQ(WorkspaceRegionBytes(graph, 0), 0);
}

// A convolution padded unlike on two sides runs on a padded copy of x (cuDNN
// pads both sides alike): it declares the copy as a scratch buffer of its
// own, whichever way it computes, and only the algorithm's cap in the
// region; a symmetric one declares no scratch, and a device without a
// workspace nothing at all.
TEST(Workspaces, AConvolutionPaddedUnevenlyDeclaresAPaddedCopyOfXAsItsScratch) {
  const ir::Graph graph = Parse(
      "graph g {\n"
      "  input %x: f32[2,5,5,3] nhwc\n"
      "  param %w: f32[4,2,2,3]\n"
      "  %y: f32[2,5,5,4] nhwc = conv2d(%x, %w) {pads=[0,0,1,1]}\n"
      "  %s: f32[2,4,4,4] nhwc = conv2d(%x, %w) {pads=[0,0,0,0]}\n"
      "  %dx: f32[2,5,5,3] nhwc = conv2d_backward_data(%y, %w) "
      "{pads=[0,0,1,1], input_shape=[2,5,5,3]}\n"
      "  %dw: f32[4,2,2,3] = conv2d_backward_weight(%y, %x) {kernel=[2,2], pads=[0,0,1,1]}\n"
      "  %r: f32[2,5,5,4] nhwc = relu(%y)\n"
      "  output %dx, %dw, %s, %r\n"
      "}\n");
  const int64_t copy = 6 * 6 * 3 * 4;         // an image of x, a row and a column more
  const int64_t largest = 2 * 5 * 5 * 4 * 4;  // y
  EXPECT_EQ(PaddedCopyBytes(NodeNamed(graph, "y"), graph.value(*graph.FindValue("x")).type), copy);
  for (const char* name : {"y", "dx", "dw"}) {
    const ir::Node& node = NodeNamed(graph, name);
    EXPECT_EQ(DeclaredWorkspaceBytes(graph, node, 64 * kMiB), largest) << name;
    EXPECT_EQ(DeclaredWorkspaceBytes(graph, node, 100), 100) << name;
    EXPECT_EQ(DeclaredScratchBytes(graph, node, 64 * kMiB), copy) << name;
    EXPECT_EQ(DeclaredScratchBytes(graph, node, 100), copy) << name;
    EXPECT_EQ(DeclaredScratchBytes(graph, node, 0), 0) << name;
  }
  EXPECT_EQ(DeclaredWorkspaceBytes(graph, NodeNamed(graph, "s"), 64 * kMiB), 2 * 5 * 5 * 3 * 4);
  EXPECT_EQ(DeclaredScratchBytes(graph, NodeNamed(graph, "s"), 64 * kMiB), 0);
  EXPECT_EQ(DeclaredScratchBytes(graph, NodeNamed(graph, "r"), 64 * kMiB), 0);

  const std::vector<int64_t> by_node = ScratchBytesByNode(graph, 64 * kMiB);
  ASSERT_EQ(by_node.size(), static_cast<size_t>(graph.num_nodes()));
  for (const ir::Node& node : graph.nodes()) {
    EXPECT_EQ(by_node[static_cast<size_t>(node.id)], DeclaredScratchBytes(graph, node, 64 * kMiB))
        << node.name;
  }
  EXPECT_TRUE(ScratchBytesByNode(graph, 0).empty());
}

// The loss's scratch is a few kilobytes however many rows it averages: a
// sum and a count per chunk of rows, at most kLossMaxChunks chunks that
// cover every row.
TEST(Workspaces, TheLossSumsInBoundedChunks) {
  for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{4096}, int64_t{4097}, int64_t{16000000}}) {
    const int64_t chunk_rows = LossChunkRows(rows);
    const int64_t chunks = LossChunks(rows);
    EXPECT_LE(chunks, kLossMaxChunks) << rows;
    EXPECT_GE(chunks * chunk_rows, rows) << rows;
    EXPECT_LT((chunks - 1) * chunk_rows, rows) << rows;
    EXPECT_LE(CrossEntropyScratchBytes(rows), kLossMaxChunks * 16 + 8) << rows;
  }
}

// Batch norm's chunks cover every row, none of them empty, never more of
// them than the maximum, nor more than chunks of the minimum size would need.
TEST(Workspaces, BatchNormChunksCoverTheRowsWithinTheirBounds) {
  for (int64_t rows :
       {int64_t{1}, int64_t{2}, int64_t{511}, int64_t{512}, int64_t{513}, int64_t{100000},
        int64_t{524287}, int64_t{524288}, int64_t{524289}, int64_t{128} << 20}) {
    const BatchNormChunking chunking = ChunkBatchNormRows(rows);
    EXPECT_GE(chunking.chunks, 1) << rows;
    EXPECT_LE(chunking.chunks, kBatchNormMaxChunks) << rows;
    EXPECT_GE(chunking.chunks * chunking.rows_per_chunk, rows) << rows;
    EXPECT_LT((chunking.chunks - 1) * chunking.rows_per_chunk, rows) << rows;
    EXPECT_LE(chunking.chunks, (rows + kBatchNormMinChunkRows - 1) / kBatchNormMinChunkRows)
        << rows;
  }
}

// A Program with a workspace: the layout puts the region above every
// buffer, aligned, and the verifier accepts it.
TEST(Workspaces, TheLayoutPutsTheRegionAboveEveryBuffer) {
  models::ModelOptions options;
  options.batch = 2;
  options.height = 32;
  options.width = 32;
  options.base_width = 8;
  absl::StatusOr<ir::Graph> forward = models::BuildModel("resnet18", options);
  ASSERT_TRUE(forward.ok()) << StatusMessage(forward.status());
  absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
  ASSERT_TRUE(training.ok()) << StatusMessage(training.status());
  const ir::Graph& graph = training->graph;
  absl::StatusOr<Program> program = Rewrite(graph, TrainingSchedule(graph), Plan("none", graph));
  ASSERT_TRUE(program.ok()) << StatusMessage(program.status());
  program->workspace_bytes = WorkspaceRegionBytes(graph, 64 * kMiB);
  ASSERT_GT(program->workspace_bytes, 0);
  LayOutArena(*program);
  EXPECT_EQ(program->workspace_offset % program->alignment, 0);
  EXPECT_EQ(program->arena_bytes, program->workspace_offset + program->workspace_bytes);
  for (const Buffer& buffer : program->buffers) {
    if (buffer.memory == Memory::kDevice) {
      EXPECT_LE(buffer.offset + buffer.bytes, program->workspace_offset)
          << BufferName(*program, buffer);
    }
  }
  const absl::Status verified = VerifyProgram(*program);
  EXPECT_TRUE(verified.ok()) << StatusMessage(verified);
}

}  // namespace
}  // namespace spillway::program
