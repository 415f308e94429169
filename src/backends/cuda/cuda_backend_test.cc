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
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "backends/cuda/cublas_library.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/element_math.h"
#include "backends/reference/reference_backend.h"
#include "backends/testing/op_test.h"
#include "ir/op_kind.h"
#include "ir/text_format.h"
#include "models/models.h"
#include "program/plan.h"
#include "program/rewriter.h"
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
      "  input %x: f32[2,8]\n"
      "  param %g: f32[8]\n"
      "  param %b: f32[8]\n"
      "  %y: f32[2,8], %mean: f32[2], %rstd: f32[2] = layer_norm(%x, %g, %b)\n"
      "  input %p: f32[1,8,8,3] nhwc\n"
      "  param %w: f32[4,3,3,3]\n"
      "  %c: f32[1,7,7,4] nhwc = conv2d(%p, %w) {pads=[1, 1, 0, 0]}\n"
      "  output %y, %c\n"
      "}\n");
  ASSERT_TRUE(refused.ok()) << StatusMessage(refused.status());
  const absl::Status no_kernel = CudaSupports(*refused, refused->node(0));
  EXPECT_EQ(no_kernel.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(StatusMessage(no_kernel), HasSubstr("no kernel for this op yet"));
  EXPECT_THAT(StatusMessage(no_kernel), HasSubstr("conv2d_backward_weight"));  // what it runs
  const absl::Status asymmetric = CudaSupports(*refused, refused->node(1));
  EXPECT_EQ(asymmetric.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(StatusMessage(asymmetric), HasSubstr("pads both sides alike"));
}

// The device check trains ResNet-50: every node of its training graph (and
// of the other ResNets and VGG, made of the same ops) must have a kernel.
TEST(CudaBackend, RunsEveryNodeOfTheResNetsTrainingGraphs) {
  for (const char* model : {"resnet18", "resnet50", "vgg16"}) {
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
      const absl::Status supported = CudaSupports(training->graph, node);
      EXPECT_TRUE(supported.ok()) << model << ": " << node.name << " (" << ir::OpName(node.op)
                                  << "): " << supported;
    }
  }
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

// The graph's outputs after one step, from a backend.
absl::StatusOr<std::map<std::string, std::vector<std::byte>>> RunOnce(const ir::Graph& graph,
                                                                      Backend& backend) {
  program::Plan plan("pinned", graph);
  RETURN_IF_ERROR(program::ApplyPins(graph, plan));
  ASSIGN_OR_RETURN(const program::Program program,
                   program::BuildProgram(graph, program::TrainingSchedule(graph), plan));
  if (program.host_bytes == 0) return absl::InternalError("the test plan spills nothing");
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Runtime> runtime,
                   runtime::Runtime::Create(program, backend, program.arena_bytes));
  for (ir::ValueId input : graph.inputs()) {
    const ir::Value& value = graph.value(input);
    std::vector<float> values(static_cast<size_t>(value.type.bytes()) / sizeof(float));
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<float>((static_cast<int64_t>(i) * 7 + input * 13) % 17 - 8) / 8.0f;
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

// The CUDA kernels' per-element arithmetic (element_math.h), run on the
// host: a backend that computes max pooling, its gradient and reduce_sum one
// element at a time with the functions the kernels call, with the geometry
// the CUDA backend makes from the call, and leaves every other op to the
// reference kernels. Needs no device.
class ElementMathBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda-element-math-on-the-host"; }
  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override {
    return reference_.AllocateDevice(bytes);
  }
  void FreeDevice(void* memory) override { reference_.FreeDevice(memory); }
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override {
    return reference_.AllocateHost(bytes);
  }
  void FreeHost(void* memory) override { reference_.FreeHost(memory); }
  absl::Status Copy(program::Stream stream, void* destination, const void* source,
                    int64_t bytes) override {
    return reference_.Copy(stream, destination, source, bytes);
  }
  absl::Status Upload(void* destination, const void* source, int64_t bytes) override {
    return reference_.Upload(destination, source, bytes);
  }
  absl::Status Download(void* destination, const void* source, int64_t bytes) override {
    return reference_.Download(destination, source, bytes);
  }

  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override {
    const TensorRef& y = call.outputs[0];
    switch (call.node.op) {
      case ir::OpKind::kMaxPool: {
        ++element_math_calls_;
        const PoolGeometry g =
            MakePoolGeometry(call.node.attrs, call.inputs[0].type->shape, y.type->shape);
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = MaxPoolAt(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kMaxPoolBackward: {
        ++element_math_calls_;
        const PoolGeometry g =
            MakePoolGeometry(call.node.attrs, y.type->shape, call.inputs[0].type->shape);
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = MaxPoolGradientAt(call.inputs[0].as<const float>(),
                                               call.inputs[1].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      case ir::OpKind::kReduceSum: {
        if (y.type->dtype != ir::DType::kF32) break;  // the CUDA kernel sums f32 only
        ++element_math_calls_;
        ASSIGN_OR_RETURN(const ReduceGeometry g, MakeReduceGeometry(call));
        for (int64_t i = 0; i < y.num_elements(); ++i) {
          y.as<float>()[i] = ReduceSumAt(call.inputs[0].as<const float>(), g, i);
        }
        return absl::OkStatus();
      }
      default:
        break;
    }
    return reference_.RunKernel(stream, call);
  }

  int element_math_calls() const { return element_math_calls_; }

 private:
  reference::ReferenceBackend reference_;
  int element_math_calls_ = 0;
};

// Every harness case of max pooling (whose gradient is max_pool_backward) and
// of reduce_sum: the element arithmetic gives the reference kernels' bits,
// since it adds in their order. The cases include overlapping windows,
// padding and ties.
TEST(CudaElementMath, PoolingAndReductionsMatchTheReferenceBitwiseOnTheHost) {
  int cases = 0;
  for (testing::OpTestCase test_case : testing::AllOpTestCases()) {
    if (test_case.op != ir::OpKind::kMaxPool && test_case.op != ir::OpKind::kReduceSum) continue;
    test_case.float_tolerance = 0;  // bit for bit
    ElementMathBackend backend;
    const absl::Status compared = testing::CompareWithReference(backend, test_case);
    EXPECT_TRUE(compared.ok()) << test_case.name << ": " << compared;
    EXPECT_GT(backend.element_math_calls(), 0) << test_case.name;
    ++cases;
  }
  EXPECT_GE(cases, 4);
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
