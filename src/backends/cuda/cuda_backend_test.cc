// The CUDA backend. Without a usable GPU (the development machine and CI have
// the toolkit but no device), the tests that need one skip, saying why; what
// needs no device runs everywhere.
#include "backends/cuda/cuda_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "backends/cuda/cublas_library.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/reference/reference_backend.h"
#include "backends/testing/op_test.h"
#include "ir/op_kind.h"
#include "ir/text_format.h"
#include "models/models.h"
#include "program/plan.h"
#include "program/rewriter.h"
#include "program/test_graphs.h"
#include "program/workspaces.h"
#include "runtime/runtime.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::backends::cuda {
namespace {

using ::testing::HasSubstr;

// A forward and backward pass of element-wise ops only, with two tensors
// spilled: the runtime's copies and events go through the GPU's streams.
constexpr char kGraph[] =
    "graph elementwise {\n"
    "  input %x: f32[4,64]\n"
    "  param %w: f32[4,64]\n"
    "  %a: f32[4,64] = mul(%x, %w) {memory=\"spill\"}\n"
    "  %r: f32[4,64] = relu(%a)\n"
    "  %s: f32[4,64] = relu(%r) {memory=\"spill\"}\n"
    "  %loss: f32[4,64] = add(%s, %a)\n"
    "  %ds: f32[4,64] = relu_backward(%loss, %s) @backward\n"
    "  %dr: f32[4,64] = relu_backward(%ds, %r) @backward\n"
    "  %dw: f32[4,64] = mul(%dr, %a) @backward\n"
    "  %d: f32[4,64] = sub(%dw, %w) @backward\n"
    "  output %loss, %d\n"
    "}\n";

ir::Graph ParseOrDie() {
  absl::StatusOr<ir::Graph> graph = ir::ParseAndVerifyGraph(kGraph);
  SPILLWAY_CHECK(graph.ok(), "the test graph parses");
  return *std::move(graph);
}

TEST(CudaBackend, SaysWhichNodesItCannotRunWithoutNeedingADevice) {
  const ir::Graph graph = ParseOrDie();
  for (const ir::Node& node : graph.nodes()) {
    EXPECT_TRUE(CudaSupports(graph, node).ok()) << node.name;
  }
  absl::StatusOr<ir::Graph> refused = ir::ParseAndVerifyGraph(
      "graph refused {\n"
      "  input %p: f32[1,8,8,3] nhwc\n"
      "  %y: bool[64] = opaque(%p) {bytes=64}\n"
      "  output %y\n"
      "}\n");
  ASSERT_TRUE(refused.ok()) << StatusMessage(refused.status());
  const absl::Status no_kernel = CudaSupports(*refused, refused->node(0));
  EXPECT_EQ(no_kernel.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(StatusMessage(no_kernel), HasSubstr("no kernel for this op yet"));
  EXPECT_THAT(StatusMessage(no_kernel), HasSubstr("conv2d_backward_weight"));  // what it runs
}

// The device check trains ResNet-50: every node of its training graph (and
// of the other ResNets and VGG, made of the same ops) must have a kernel; so
// must GPT-2's (its embeddings, attention and layer norms), DeepLabV3+'s
// (its bilinear resizing and concatenation) and U-Net's (its convolutions
// padded on one side, through a padded copy): every built-in model's.
TEST(CudaBackend, RunsEveryNodeOfEveryBuiltInModelsTrainingGraph) {
  int padded_unevenly = 0;  // U-Net's up-convolutions and their gradients
  for (const models::ModelInfo& info : models::ListModels()) {
    const std::string& model = info.name;
    models::ModelOptions options;
    options.batch = 2;
    options.height = 224;  // VGG's classifier needs a multiple of 7 after five poolings
    options.width = 224;
    options.base_width = 8;
    absl::StatusOr<ir::Graph> forward = models::BuildModel(model, options);
    ASSERT_TRUE(forward.ok()) << StatusMessage(forward.status());
    absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
    ASSERT_TRUE(training.ok()) << StatusMessage(training.status());
    for (const ir::Node& node : training->graph.nodes()) {
      const ir::IntList pads = *node.attrs.GetInts("pads", {0, 0, 0, 0});
      if (pads.size() == 4 && (pads[0] != pads[2] || pads[1] != pads[3])) ++padded_unevenly;
      const absl::Status supported = CudaSupports(training->graph, node);
      EXPECT_TRUE(supported.ok()) << model << ": " << node.name << " (" << ir::OpName(node.op)
                                  << "): " << supported;
    }
  }
  EXPECT_GT(padded_unevenly, 0);
}

// cuBLAS is opened, not linked (cublas_library.h): every function the
// backend calls resolves in the library found at run time. Needs the library,
// not a device.
TEST(CudaBackend, OpensCublasAndFindsEveryFunctionItCalls) {
  absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  if (!library.ok()) GTEST_SKIP() << StatusMessage(library.status());
  const CublasLibrary& cublas = **library;
  EXPECT_NE(cublas.create, nullptr);
  EXPECT_NE(cublas.destroy, nullptr);
  EXPECT_NE(cublas.set_stream, nullptr);
  EXPECT_NE(cublas.get_stream, nullptr);
  EXPECT_NE(cublas.sgemm, nullptr);
  EXPECT_NE(cublas.sgemm_strided_batched, nullptr);
  ASSERT_NE(cublas.status_string, nullptr);
  EXPECT_THAT(cublas.status_string(CUBLAS_STATUS_NOT_INITIALIZED), HasSubstr("not initialized"));
}

TEST(CudaBackend, WithoutADeviceCreatingItSaysWhy) {
  if (CountDevices().ok()) GTEST_SKIP() << "this machine has a CUDA device";
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create({});
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(StatusMessage(backend.status()), HasSubstr("no usable CUDA device"));
}

// The graph's outputs after one step of `program` on a backend: floats in
// [-1, 1], integers (labels) in [0, 8).
absl::StatusOr<std::map<std::string, std::vector<std::byte>>> RunOnce(
    const ir::Graph& graph, const program::Program& program, Backend& backend) {
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Runtime> runtime,
                   runtime::Runtime::Create(program, backend, program.arena_bytes));
  for (ir::ValueId input : graph.inputs()) {
    const ir::Value& value = graph.value(input);
    auto pattern = [&](size_t i) { return (static_cast<int64_t>(i) * 7 + input * 13) % 17; };
    if (value.type.dtype == ir::DType::kI64) {
      std::vector<int64_t> values(static_cast<size_t>(value.type.bytes()) / sizeof(int64_t));
      for (size_t i = 0; i < values.size(); ++i) values[i] = pattern(i) % 8;
      RETURN_IF_ERROR(runtime->Write(input, std::as_bytes(std::span(values))));
      continue;
    }
    std::vector<float> values(static_cast<size_t>(value.type.bytes()) / sizeof(float));
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<float>(pattern(i) - 8) / 8.0f;
    }
    RETURN_IF_ERROR(runtime->Write(input, std::as_bytes(std::span(values))));
  }
  ASSIGN_OR_RETURN(const runtime::StepResult step, runtime->RunStep({}));
  (void)step;
  std::map<std::string, std::vector<std::byte>> outputs;
  for (ir::ValueId output : graph.outputs()) {
    std::vector<std::byte>& bytes = outputs[graph.value(output).name];
    bytes.resize(static_cast<size_t>(graph.value(output).type.bytes()));
    RETURN_IF_ERROR(runtime->Read(output, bytes));
  }
  return outputs;
}

// The same, for the graph's pinned plan, which must spill.
absl::StatusOr<std::map<std::string, std::vector<std::byte>>> RunOnce(const ir::Graph& graph,
                                                                      Backend& backend) {
  program::Plan plan("pinned", graph);
  RETURN_IF_ERROR(program::ApplyPins(graph, plan));
  ASSIGN_OR_RETURN(const program::Program program,
                   program::BuildProgram(graph, program::TrainingSchedule(graph), plan));
  if (program.host_bytes == 0) return absl::InternalError("the test plan spills nothing");
  return RunOnce(graph, program, backend);
}

// U-Net's up-convolutions, padded on one side only, run on a padded copy of
// x: in the instruction's scratch buffer where the Program gives one, else
// after the algorithm's workspace in the backend's own scratch. With the
// same algorithm limit (the Program's workspace region as large as the
// backend's limit), the two give the same bits.
TEST(CudaBackend, APaddedCopyInTheProgramsScratchGivesTheBitsOfOneInTheBackends) {
  if (absl::StatusOr<int> devices = CountDevices(); !devices.ok()) {
    GTEST_SKIP() << StatusMessage(devices.status());
  }
  models::ModelOptions options;
  options.batch = 1;
  options.height = options.width = 32;
  options.base_width = 4;
  options.classes = 8;
  const autodiff::TrainingGraph training = program::testing::TrainingModel("unet", options);
  const ir::Graph& graph = training.graph;
  const program::Plan keep("none", graph);
  absl::StatusOr<program::Program> plain =
      program::BuildProgram(graph, program::TrainingSchedule(graph), keep);
  ASSERT_TRUE(plain.ok()) << StatusMessage(plain.status());
  const int64_t limit = CudaBackendOptions{}.workspace_limit;
  absl::StatusOr<program::Program> with_scratch = program::Rewrite(
      graph, program::TrainingSchedule(graph), keep, program::ScratchBytesByNode(graph, limit));
  ASSERT_TRUE(with_scratch.ok()) << StatusMessage(with_scratch.status());
  with_scratch->workspace_bytes = limit;
  program::LayOutArena(*with_scratch);

  absl::StatusOr<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << StatusMessage(gpu.status());
  absl::StatusOr<std::map<std::string, std::vector<std::byte>>> expected =
      RunOnce(graph, *plain, **gpu);
  ASSERT_TRUE(expected.ok()) << StatusMessage(expected.status());
  absl::StatusOr<std::map<std::string, std::vector<std::byte>>> outputs =
      RunOnce(graph, *with_scratch, **gpu);
  ASSERT_TRUE(outputs.ok()) << StatusMessage(outputs.status());
  EXPECT_EQ(*outputs, *expected);
}

// Element-wise f32 kernels round like the CPU's (a lone add or multiply), so
// the GPU's step is bitwise the reference backend's.
TEST(CudaBackend, RunsASpillingStepBitwiseLikeTheReferenceBackend) {
  if (absl::StatusOr<int> devices = CountDevices(); !devices.ok()) {
    GTEST_SKIP() << StatusMessage(devices.status());
  }
  const ir::Graph graph = ParseOrDie();
  reference::ReferenceBackend reference;
  absl::StatusOr<std::map<std::string, std::vector<std::byte>>> expected =
      RunOnce(graph, reference);
  ASSERT_TRUE(expected.ok()) << StatusMessage(expected.status());
  absl::StatusOr<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << StatusMessage(gpu.status());
  absl::StatusOr<std::map<std::string, std::vector<std::byte>>> outputs = RunOnce(graph, **gpu);
  ASSERT_TRUE(outputs.ok()) << StatusMessage(outputs.status());
  EXPECT_EQ(*outputs, *expected);
}

// Every harness case whose ops (its own and its gradient's) all have CUDA
// kernels, against the reference kernels and run twice for determinism. A
// case with an op the backend lacks skips, naming it.
class CudaBackendOpTest : public ::testing::TestWithParam<testing::OpTestCase> {
 protected:
  static void SetUpTestSuite() {
    if (CountDevices().ok()) {
      absl::StatusOr<std::unique_ptr<CudaBackend>> made = CudaBackend::Create({});
      if (made.ok()) backend_ = std::move(*made).release();
    }
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  void SetUp() override {
    if (absl::StatusOr<int> devices = CountDevices(); !devices.ok()) {
      GTEST_SKIP() << StatusMessage(devices.status());
    }
    ASSERT_NE(backend_, nullptr) << "the CUDA backend did not start";
    for (ir::OpKind op : testing::CoveredOps({GetParam()})) {
      if (!CudaHasKernel(op)) {
        GTEST_SKIP() << "the CUDA backend has no kernel for " << ir::OpName(op) << " yet";
      }
    }
  }
  static CudaBackend* backend_;
};
CudaBackend* CudaBackendOpTest::backend_ = nullptr;

TEST_P(CudaBackendOpTest, MatchesReference) {
  const absl::Status status = testing::CompareWithReference(*backend_, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(CudaBackendOpTest, IsDeterministic) {
  const absl::Status status = testing::CheckDeterministic(*backend_, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

std::string TestName(const ::testing::TestParamInfo<testing::OpTestCase>& info) {
  std::string name = info.param.name;
  for (char& c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(HarnessCases, CudaBackendOpTest,
                         ::testing::ValuesIn(testing::AllOpTestCases()), TestName);

}  // namespace
}  // namespace spillway::backends::cuda
