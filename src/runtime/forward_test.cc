#include "runtime/forward.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "backends/testing/forwarding_backend.h"
#include "ir/builder.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using IntList = std::vector<int64_t>;

std::vector<std::byte> Bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> Floats(const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// The reference backend, counting device bytes allocated and freed.
class CountingBackend final : public backends::testing::ForwardingBackend {
 public:
  std::string_view name() const override { return "counting"; }
  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override {
    ASSIGN_OR_RETURN(void* memory, ForwardingBackend::AllocateDevice(bytes));
    sizes_[memory] = bytes;
    live_ += bytes;
    return memory;
  }
  void FreeDevice(void* memory) override {
    live_ -= sizes_.at(memory);
    sizes_.erase(memory);
    ForwardingBackend::FreeDevice(memory);
  }

  int64_t live_bytes() const { return live_; }

 private:
  std::map<void*, int64_t> sizes_;
  int64_t live_ = 0;
};

// y = relu(x W^T + b), and x + x as a second output.
struct SmallGraph {
  ir::Graph graph{"small"};
  SmallGraph() {
    ir::GraphBuilder b(graph);
    const ir::ValueId x = b.Input("x", ir::F32({2, 3}));
    const ir::ValueId w = b.Parameter("w", ir::F32({2, 3}));
    const ir::ValueId bias = b.Parameter("b", ir::F32({2}));
    const ir::ValueId linear = b.Op(ir::OpKind::kLinear, {x, w, bias}, {}, "linear");
    b.Output(b.Op(ir::OpKind::kRelu, {linear}, {}, "relu"));
    b.Output(b.Op(ir::OpKind::kAdd, {x, x}, {}, "double"));
    SPILLWAY_CHECK(b.ok(), "the small graph builds");
  }
};

TEST(Forward, ComputesWhatTheGraphSays) {
  SmallGraph small;
  const std::vector<std::byte> x = Bytes({1, 2, 3, -1, 0, 2});
  const std::vector<std::byte> w = Bytes({1, 0, -1, 0.5f, 0.5f, 0.5f});
  const std::vector<std::byte> b = Bytes({0.5f, -1});
  CountingBackend backend;
  absl::StatusOr<ForwardResult> result =
      RunForward(small.graph, backend, {{"x", x}, {"w", w}, {"b", b}});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outputs.size(), 2u);
  // Row 1: (1 - 3 + 0.5, 3 - 1) = (-1.5, 2); row 2: (-1 - 2 + 0.5, 0.5 - 1) = (-2.5, -0.5).
  EXPECT_THAT(Floats(result->outputs[0]), ElementsAre(0, 2, 0, 0));
  EXPECT_THAT(Floats(result->outputs[1]), ElementsAre(2, 4, 6, -2, 0, 4));
  EXPECT_EQ(backend.live_bytes(), 0);
}

TEST(Forward, FreesEachValueAfterItsLastReader) {
  // A chain of relus over a 1 MiB tensor: at most two of them are live.
  ir::Graph graph("chain");
  ir::GraphBuilder b(graph);
  const ir::TensorType type = ir::F32({256, 1024});
  ir::ValueId x = b.Input("x", type);
  for (int i = 0; i < 8; ++i) x = b.Op(ir::OpKind::kRelu, {x}, {}, "relu");
  b.Output(x);
  ASSERT_TRUE(b.ok());
  const std::vector<std::byte> input(static_cast<size_t>(type.bytes()));
  CountingBackend backend;
  absl::StatusOr<ForwardResult> result = RunForward(graph, backend, {{"x", input}});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->peak_device_bytes, 2 * type.bytes());
  EXPECT_EQ(backend.live_bytes(), 0);
}

// conv -> batch norm (training) -> relu -> max pool -> global pool -> linear,
// NHWC, with deterministic pseudo-random values.
struct ConvNet {
  ir::Graph graph{"convnet"};
  std::map<std::string, std::vector<std::byte>> values;

  ConvNet() {
    ir::GraphBuilder b(graph);
    const ir::ValueId x = b.Input("images", ir::Activation({2, 9, 7, 3}));
    const ir::ValueId w = b.Parameter("conv.w", ir::F32({8, 3, 3, 3}));
    const ir::ValueId conv =
        b.Op(ir::OpKind::kConv2d, {x, w},
             {{"strides", IntList{2, 1}}, {"pads", IntList{1, 1, 1, 1}}}, "conv");
    const ir::ValueId gamma = b.Parameter("bn.gamma", ir::F32({8}));
    const ir::ValueId beta = b.Parameter("bn.beta", ir::F32({8}));
    const ir::ValueId mean = b.Buffer("bn.running_mean", ir::F32({8}));
    const ir::ValueId var = b.Buffer("bn.running_var", ir::F32({8}));
    const ir::ValueId bn = b.Op(ir::OpKind::kBatchNorm, {conv, gamma, beta, mean, var},
                                {{"training", true}, {"momentum", 0.1}, {"epsilon", 1e-5}}, "bn");
    const ir::ValueId relu = b.Op(ir::OpKind::kRelu, {bn}, {}, "relu");
    const ir::ValueId pool = b.Op(ir::OpKind::kMaxPool, {relu},
                                  {{"kernel", IntList{2, 2}}, {"strides", IntList{2, 2}}}, "pool");
    const ir::ValueId gap = b.Op(ir::OpKind::kGlobalAvgPool, {pool}, {}, "gap");
    const ir::ValueId flat = b.Op(ir::OpKind::kReshape, {gap}, {{"shape", IntList{2, 8}}}, "flat");
    const ir::ValueId fc_w = b.Parameter("fc.w", ir::F32({5, 8}));
    b.Output(b.Op(ir::OpKind::kLinear, {flat, fc_w}, {}, "logits"));
    b.Output(relu);
    SPILLWAY_CHECK(b.ok(), "the conv net builds");
    uint32_t state = 12345;
    for (ir::ValueId id : graph.inputs()) {
      const ir::Value& value = graph.value(id);
      std::vector<float> v(static_cast<size_t>(*ir::NumElements(value.type.shape)));
      for (float& f : v) {
        state = state * 1664525u + 1013904223u;
        f = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
      }
      if (value.name == "bn.running_var") std::fill(v.begin(), v.end(), 1.0f);
      values[value.name] = Bytes(v);
    }
  }

  ForwardInputs inputs() const {
    ForwardInputs result;
    for (const auto& [name, bytes] : values) result.emplace(name, bytes);
    return result;
  }
};

TEST(Forward, CpuBackendAgreesWithTheReferenceBackend) {
  ConvNet net;
  backends::reference::ReferenceBackend reference;
  // One thread: CI runs this label under ThreadSanitizer, which cannot see
  // libgomp's synchronization and reports every OpenMP region as a race. The
  // cpu and policy_identity labels cover the multithreaded kernels.
  backends::cpu::CpuBackend cpu(backends::cpu::CpuBackendOptions{.threads = 1});
  absl::StatusOr<ForwardResult> expected = RunForward(net.graph, reference, net.inputs());
  absl::StatusOr<ForwardResult> actual = RunForward(net.graph, cpu, net.inputs());
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(actual->outputs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<float> want = Floats(expected->outputs[i]);
    const std::vector<float> got = Floats(actual->outputs[i]);
    ASSERT_EQ(got.size(), want.size());
    float largest = 0;
    for (float v : want) largest = std::max(largest, std::abs(v));
    EXPECT_GT(largest, 0.1f);  // the outputs are not all zero
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5f * largest) << k;
  }
}

TEST(Forward, ErrorsNameTheInput) {
  SmallGraph small;
  const std::vector<std::byte> six = Bytes({0, 0, 0, 0, 0, 0});
  const std::vector<std::byte> two = Bytes({0, 0});
  backends::reference::ReferenceBackend backend;
  EXPECT_THAT(RunForward(small.graph, backend, {{"x", six}}).status().message(),
              HasSubstr("no bytes for the graph inputs w, b"));
  EXPECT_THAT(
      RunForward(small.graph, backend, {{"x", two}, {"w", six}, {"b", two}}).status().message(),
      HasSubstr("input 'x' is f32[2,3]: 24 bytes, not 8"));
  EXPECT_THAT(
      RunForward(small.graph, backend, {{"x", six}, {"w", six}, {"b", two}, {"linear", two}})
          .status()
          .message(),
      HasSubstr("graph 'small' has no input named 'linear'"));
}

TEST(Forward, RefusesTrainingGraphs) {
  SmallGraph small;
  ASSERT_TRUE(
      small.graph
          .AddNode(ir::OpKind::kRelu, {small.graph.outputs()[0]}, {}, "grad", ir::Phase::kBackward)
          .ok());
  backends::reference::ReferenceBackend backend;
  EXPECT_THAT(RunForward(small.graph, backend, {}).status().message(),
              HasSubstr("node 'grad' (relu) is a backward node"));
}

TEST(Forward, FrameworkOrderIsNchwForNhwcValues) {
  const ir::TensorType nhwc = ir::Activation({1, 2, 3, 2});  // N=1, H=2, W=3, C=2
  EXPECT_EQ(FrameworkShape(nhwc), (ir::Shape{1, 2, 2, 3}));
  std::vector<float> values(12);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const std::vector<std::byte> nchw = ToFrameworkOrder(nhwc, Bytes(values));
  // Channel 0 is every second element of the NHWC data, then channel 1.
  EXPECT_THAT(Floats(nchw), ElementsAre(0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11));
  EXPECT_EQ(FromFrameworkOrder(nhwc, nchw), Bytes(values));

  const ir::TensorType matrix = ir::F32({3, 4});
  EXPECT_EQ(FrameworkShape(matrix), matrix.shape);
  EXPECT_EQ(ToFrameworkOrder(matrix, Bytes(values)), Bytes(values));
}

}  // namespace
}  // namespace spillway::runtime
