#include "backends/cpu/cpu_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/direct_kernels.h"
#include "backends/cpu/onednn_kernels.h"
#include "backends/testing/op_test.h"
#include "fmt/format.h"
#include "ir/graph.h"

namespace spillway::backends::cpu {
namespace {

using testing::OpTestCase;

// Threads every test backend uses: more than one, so the parallel paths and
// their fixed reduction orders are what the tests check.
constexpr int kThreads = 2;

// Cases large enough for oneDNN's blocked and vectorized paths (channels of
// 16 and more, strided and padded windows, ResNet's layer shapes in small),
// and for the direct kernels' multi-block reductions.
std::vector<OpTestCase> MidSizeCases() {
  using ir::Activation;
  using ir::F32;
  using ir::OpKind;
  std::vector<OpTestCase> cases;
  cases.push_back({.name = "conv2d/mid_3x3_stride2_pad1_bias",
                   .op = OpKind::kConv2d,
                   .inputs = {Activation({2, 17, 17, 16}), F32({32, 3, 3, 16}), F32({32})},
                   .attrs = {{"strides", ir::IntList{2, 2}}, {"pads", ir::IntList{1, 1, 1, 1}}},
                   .float_tolerance = 1e-4});
  cases.push_back({.name = "conv2d/mid_1x1_stride2",
                   .op = OpKind::kConv2d,
                   .inputs = {Activation({2, 14, 14, 64}), F32({128, 1, 1, 64})},
                   .attrs = {{"strides", ir::IntList{2, 2}}},
                   .float_tolerance = 1e-4});
  // Strided 1x1 convolutions with fewer input channels than an AVX2 vector:
  // oneDNN 2.6.3's jit_1x1:avx2 weight gradient overran its buffer on these
  // (the valgrind stage of CI runs these cases with oneDNN at AVX2).
  for (const int64_t channels : {1, 3, 4, 5, 7}) {
    cases.push_back({.name = fmt::format("conv2d/1x1_stride2_{}_channels", channels),
                     .op = OpKind::kConv2d,
                     .inputs = {Activation({8, 16, 16, channels}), F32({8, 1, 1, channels})},
                     .attrs = {{"strides", ir::IntList{2, 2}}},
                     .float_tolerance = 1e-4});
  }
  cases.push_back({.name = "conv2d/mid_stem_7x7_stride2_pad3",
                   .op = OpKind::kConv2d,
                   .inputs = {Activation({2, 32, 32, 3}), F32({16, 7, 7, 3})},
                   .attrs = {{"strides", ir::IntList{2, 2}}, {"pads", ir::IntList{3, 3, 3, 3}}},
                   .float_tolerance = 1e-4});
  cases.push_back({.name = "conv2d/mid_groups4_dilation2",
                   .op = OpKind::kConv2d,
                   .inputs = {Activation({2, 15, 15, 32}), F32({32, 3, 3, 8})},
                   .attrs = {{"groups", int64_t{4}},
                             {"dilations", ir::IntList{2, 2}},
                             {"pads", ir::IntList{2, 2, 2, 2}}},
                   .float_tolerance = 1e-4});
  cases.push_back({.name = "max_pool/mid_3x3_stride2_pad1",
                   .op = OpKind::kMaxPool,
                   .inputs = {Activation({2, 17, 17, 64})},
                   .attrs = {{"kernel", ir::IntList{3, 3}},
                             {"strides", ir::IntList{2, 2}},
                             {"pads", ir::IntList{1, 1, 1, 1}}}});
  for (const bool include_pad : {false, true}) {
    cases.push_back({.name = include_pad ? "avg_pool/mid_include_pad" : "avg_pool/mid_exclude_pad",
                     .op = OpKind::kAvgPool,
                     .inputs = {Activation({2, 17, 17, 32})},
                     .attrs = {{"kernel", ir::IntList{3, 3}},
                               {"strides", ir::IntList{2, 2}},
                               {"pads", ir::IntList{1, 1, 1, 1}},
                               {"count_include_pad", include_pad}}});
  }
  cases.push_back({.name = "global_avg_pool/mid",
                   .op = OpKind::kGlobalAvgPool,
                   .inputs = {Activation({4, 7, 7, 256})}});
  cases.push_back(
      {.name = "batch_norm/mid_training",
       .op = OpKind::kBatchNorm,
       .inputs = {Activation({4, 13, 13, 64}), F32({64}), F32({64}), F32({64}), F32({64})},
       .no_gradient = {3, 4},
       .float_tolerance = 1e-4});
  cases.push_back(
      {.name = "batch_norm/mid_inference",
       .op = OpKind::kBatchNorm,
       .inputs = {Activation({4, 13, 13, 64}), F32({64}), F32({64}), F32({64}), F32({64})},
       .attrs = {{"training", false}},
       .low = 0.25,
       .no_gradient = {3, 4}});
  cases.push_back({.name = "relu/mid", .op = OpKind::kRelu, .inputs = {Activation({4, 9, 9, 64})}});
  for (const char* approximate : {"none", "tanh"}) {
    cases.push_back({.name = std::string("gelu/mid_") + approximate,
                     .op = OpKind::kGelu,
                     .inputs = {Activation({4, 9, 9, 64})},
                     .attrs = {{"approximate", std::string(approximate)}}});
  }
  cases.push_back({.name = "add/mid",
                   .op = OpKind::kAdd,
                   .inputs = {Activation({4, 9, 9, 64}), Activation({4, 9, 9, 64})}});
  cases.push_back({.name = "add_n/mid",
                   .op = OpKind::kAddN,
                   .inputs = {F32({5000}), F32({5000}), F32({5000})},
                   .check_gradient = false});
  cases.push_back({.name = "matmul/mid_batched_broadcast_transposed_alpha",
                   .op = OpKind::kMatMul,
                   .inputs = {F32({3, 2, 33, 40}), F32({48, 33})},
                   .attrs = {{"transpose_a", true}, {"transpose_b", true}, {"alpha", 0.5}},
                   .float_tolerance = 1e-4});
  cases.push_back({.name = "linear/mid_bias",
                   .op = OpKind::kLinear,
                   .inputs = {F32({4, 6, 96}), F32({80, 96}), F32({80})},
                   .float_tolerance = 1e-4});
  cases.push_back(
      {.name = "sgd_update/mid_nesterov_weight_decay",
       .op = OpKind::kSgdUpdate,
       .inputs = {F32({3000}), F32({3000}), F32({3000})},
       .attrs = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 1e-4}, {"nesterov", true}},
       .check_gradient = false});
  return cases;
}

std::string TestName(const ::testing::TestParamInfo<OpTestCase>& info) {
  std::string name = info.param.name;
  for (char& c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0) c = '_';
  }
  return name;
}

class CpuBackendOpTest : public ::testing::TestWithParam<OpTestCase> {
 protected:
  CpuBackend backend_{{.threads = kThreads}};
};

TEST_P(CpuBackendOpTest, MatchesReference) {
  const absl::Status status = testing::CompareWithReference(backend_, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(CpuBackendOpTest, IsDeterministic) {
  const absl::Status status = testing::CheckDeterministic(backend_, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(HarnessCases, CpuBackendOpTest,
                         ::testing::ValuesIn(testing::AllOpTestCases()), TestName);
INSTANTIATE_TEST_SUITE_P(MidSize, CpuBackendOpTest, ::testing::ValuesIn(MidSizeCases()), TestName);

// A node run a second time, even on other buffers, finds its primitives in
// the cache.
TEST(CpuBackendTest, SecondRunOfANodeCreatesNoPrimitives) {
  CpuBackend backend({.threads = kThreads});
  const OpTestCase conv = MidSizeCases().front();
  ASSERT_EQ(conv.op, ir::OpKind::kConv2d);
  ASSERT_TRUE(testing::CompareWithReference(backend, conv).ok());
  const int64_t after_first = backend.primitives_created();
  // The first run created the forward's and both gradients' primitives.
  EXPECT_GE(after_first, 3);
  ASSERT_TRUE(testing::CompareWithReference(backend, conv, /*seed=*/2).ok());
  EXPECT_EQ(backend.primitives_created(), after_first);
}

// A recomputed batch norm (inputs 5 and 6 the saved statistics, 3 and 4
// null, only y wanted) gives bitwise the first run's y, on other buffers.
TEST(CpuBackendTest, RecomputedBatchNormIsBitwiseTheFirstRun) {
  CpuBackend backend({.threads = kThreads});
  const ir::TensorType x_type = ir::Activation({4, 13, 13, 64});
  const ir::TensorType channel = ir::F32({64});
  ir::Graph graph;
  std::vector<ir::ValueId> inputs{graph.AddInput("x", x_type)};
  for (const char* name : {"gamma", "beta", "running_mean", "running_var"}) {
    inputs.push_back(graph.AddInput(name, channel));
  }
  absl::StatusOr<ir::NodeId> id = graph.AddNode(ir::OpKind::kBatchNorm, inputs, {}, "bn");
  ASSERT_TRUE(id.ok()) << id.status();
  const ir::Node& node = graph.node(*id);

  // x varies per element and channel; gamma, beta and the statistics are
  // arbitrary but fixed.
  std::vector<float> x(static_cast<size_t>(4 * 13 * 13 * 64));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 97.0f - 3.0f;
  std::vector<float> gamma(64, 1.25f), beta(64, -0.5f), running_mean(64, 0.1f),
      running_var(64, 2.0f);
  std::vector<float> y(x.size()), saved_mean(64), saved_inv_std(64);
  const std::vector<TensorRef> first_inputs{{&x_type, x.data()},
                                            {&channel, gamma.data()},
                                            {&channel, beta.data()},
                                            {&channel, running_mean.data()},
                                            {&channel, running_var.data()}};
  const std::vector<TensorRef> first_outputs{{&x_type, y.data()},
                                             {&channel, saved_mean.data()},
                                             {&channel, saved_inv_std.data()},
                                             {&channel, running_mean.data()},
                                             {&channel, running_var.data()}};
  ASSERT_TRUE(
      backend.RunKernel(program::Stream::kCompute, {node, first_inputs, first_outputs, {}}).ok());

  std::vector<float> x_copy = x;
  std::vector<float> y_again(x.size(), 7.0f);
  const std::vector<TensorRef> recompute_inputs{{&x_type, x_copy.data()},
                                                {&channel, gamma.data()},
                                                {&channel, beta.data()},
                                                {&channel, nullptr},
                                                {&channel, nullptr},
                                                {&channel, saved_mean.data()},
                                                {&channel, saved_inv_std.data()}};
  const std::vector<TensorRef> recompute_outputs{{&x_type, y_again.data()},
                                                 {&channel, nullptr},
                                                 {&channel, nullptr},
                                                 {&channel, nullptr},
                                                 {&channel, nullptr}};
  ASSERT_TRUE(
      backend.RunKernel(program::Stream::kCompute, {node, recompute_inputs, recompute_outputs, {}})
          .ok());
  EXPECT_EQ(std::memcmp(y.data(), y_again.data(), y.size() * sizeof(float)), 0);
}

// conv2d_backward_data with acc (autodiff's sum of a value's gradients from
// several consumers) gives the bits of the plain product summed by add_n, as
// the step computed it before the two were fused, whether dx is acc's own
// buffer or another.
TEST(CpuBackendTest, AnAccumulatingInputGradientIsTheAddNOfThePlainOne) {
  CpuBackend backend({.threads = kThreads});
  const ir::TensorType dy_type = ir::Activation({2, 7, 7, 128});
  const ir::TensorType w_type = ir::F32({128, 1, 1, 64});
  const ir::TensorType dx_type = ir::Activation({2, 14, 14, 64});
  ir::Graph graph;
  const ir::ValueId dy = graph.AddInput("dy", dy_type);
  const ir::ValueId w = graph.AddInput("w", w_type);
  const ir::ValueId acc = graph.AddInput("acc", dx_type);
  const ir::AttrMap attrs = {{"strides", ir::IntList{2, 2}},
                             {"input_shape", ir::IntList{2, 14, 14, 64}}};
  absl::StatusOr<ir::NodeId> plain =
      graph.AddNode(ir::OpKind::kConv2dBackwardData, {dy, w}, attrs, "plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<ir::NodeId> sum =
      graph.AddNode(ir::OpKind::kAddN, {acc, graph.node(*plain).outputs[0]}, {}, "sum");
  ASSERT_TRUE(sum.ok()) << sum.status();
  absl::StatusOr<ir::NodeId> fused =
      graph.AddNode(ir::OpKind::kConv2dBackwardData, {dy, w, acc}, attrs, "fused");
  ASSERT_TRUE(fused.ok()) << fused.status();

  std::mt19937 random(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto filled = [&](const ir::TensorType& type) {
    std::vector<float> data(static_cast<size_t>(*ir::NumElements(type.shape)));
    for (float& value : data) value = uniform(random);
    return data;
  };
  std::vector<float> dy_data = filled(dy_type), w_data = filled(w_type), acc_data = filled(dx_type);
  const size_t dx_size = acc_data.size();
  auto run = [&](ir::NodeId id, const std::vector<TensorRef>& inputs, float* out) {
    const std::vector<TensorRef> outputs{{&dx_type, out}};
    absl::Status status =
        backend.RunKernel(program::Stream::kCompute, {graph.node(id), inputs, outputs, {}});
    EXPECT_TRUE(status.ok()) << status;
  };
  std::vector<float> product(dx_size), added(dx_size), into_other(dx_size, 7.0f);
  run(*plain, {{&dy_type, dy_data.data()}, {&w_type, w_data.data()}}, product.data());
  run(*sum, {{&dx_type, acc_data.data()}, {&dx_type, product.data()}}, added.data());
  run(*fused, {{&dy_type, dy_data.data()}, {&w_type, w_data.data()}, {&dx_type, acc_data.data()}},
      into_other.data());
  std::vector<float> in_place = acc_data;  // dx written over acc's buffer
  run(*fused, {{&dy_type, dy_data.data()}, {&w_type, w_data.data()}, {&dx_type, in_place.data()}},
      in_place.data());
  EXPECT_EQ(std::memcmp(added.data(), into_other.data(), dx_size * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(added.data(), in_place.data(), dx_size * sizeof(float)), 0);
  EXPECT_NE(added, acc_data);  // the product is not zero
}

// Every build of the direct kernels this processor runs gives the generic
// build's bits (contraction into FMA is off in all). Channel counts that are
// not a multiple of any vector width exercise the loops' remainders.
void ExpectBuildsAgree(ir::OpKind op, const std::vector<ir::TensorType>& input_types,
                       ir::AttrMap attrs) {
  const std::vector<DirectKernelIsa> builds = RunnableDirectKernelIsas();
  if (builds.size() < 2) GTEST_SKIP() << "the processor runs only the generic build";
  ir::Graph graph;
  std::vector<ir::ValueId> inputs;
  for (const ir::TensorType& type : input_types) {
    inputs.push_back(graph.AddInput(fmt::format("in{}", inputs.size()), type));
  }
  absl::StatusOr<ir::NodeId> id = graph.AddNode(op, inputs, std::move(attrs), "node");
  ASSERT_TRUE(id.ok()) << id.status();
  const ir::Node& node = graph.node(*id);

  std::mt19937 random(3);
  std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
  std::vector<std::vector<float>> input_data;
  std::vector<TensorRef> input_refs;
  for (const ir::TensorType& type : input_types) {
    std::vector<float>& data =
        input_data.emplace_back(static_cast<size_t>(*ir::NumElements(type.shape)));
    for (float& value : data) value = uniform(random);
    input_refs.push_back({&type, data.data()});
  }
  auto run = [&](DirectKernelIsa isa) {
    std::vector<std::vector<float>> outputs;
    std::vector<TensorRef> output_refs;
    for (ir::ValueId output : node.outputs) {
      const ir::TensorType& type = graph.value(output).type;
      outputs.emplace_back(static_cast<size_t>(*ir::NumElements(type.shape)));
      output_refs.push_back({&type, outputs.back().data()});
    }
    absl::StatusOr<bool> done = RunDirectKernel(isa, {node, input_refs, output_refs, {}}, kThreads);
    EXPECT_TRUE(done.ok() && *done) << DirectKernelIsaName(isa);
    return outputs;
  };
  const auto generic = run(DirectKernelIsa::kGeneric);
  for (DirectKernelIsa isa : builds) {
    EXPECT_EQ(run(isa), generic) << DirectKernelIsaName(isa) << " differs from generic";
  }
}

TEST(CpuBackendTest, DirectKernelBuildsAgreeOnBatchNorm) {
  const ir::TensorType x = ir::Activation({3, 11, 13, 67});
  const ir::TensorType channel = ir::F32({67});
  ExpectBuildsAgree(ir::OpKind::kBatchNorm, {x, channel, channel, channel, channel}, {});
  ExpectBuildsAgree(ir::OpKind::kBatchNormBackward, {x, x, channel, channel, channel}, {});
}

TEST(CpuBackendTest, DirectKernelBuildsAgreeOnSgdAndReductions) {
  const ir::TensorType flat = ir::F32({40000 + 3});
  ExpectBuildsAgree(ir::OpKind::kSgdUpdate, {flat, flat, flat},
                    {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 1e-4}});
  ExpectBuildsAgree(ir::OpKind::kAddN, {flat, flat, flat}, {});
  const ir::TensorType x = ir::Activation({2, 9, 7, 131});
  ExpectBuildsAgree(ir::OpKind::kGlobalAvgPool, {x}, {});
  ExpectBuildsAgree(ir::OpKind::kReduceSum, {x}, {{"axes", ir::IntList{0, 1, 2}}});
}

// oneDNN's JIT 1x1 weight gradient overruns its buffer for strided
// convolutions with fewer input channels than its channel block (8 floats on
// AVX2, 16 on AVX-512): it is never run for those shapes, whichever ISA
// oneDNN is restricted to (CI runs this at AVX2 and SSE4.1 too), and
// another oneDNN implementation runs them instead.
TEST(OneDnnKernelsTest, AvoidsTheOneByOneWeightGradientThatOverruns) {
  OneDnnKernels kernels;
  auto implementation = [&](int64_t channels, int64_t stride) {
    ir::Graph graph;
    const int64_t out = (16 - 1) / stride + 1;
    const ir::ValueId dy = graph.AddInput("dy", ir::Activation({8, out, out, 16}));
    const ir::ValueId x = graph.AddInput("x", ir::Activation({8, 16, 16, channels}));
    absl::StatusOr<ir::NodeId> id = graph.AddNode(
        ir::OpKind::kConv2dBackwardWeight, {dy, x},
        {{"kernel", ir::IntList{1, 1}}, {"strides", ir::IntList{stride, stride}}}, "dw");
    EXPECT_TRUE(id.ok()) << id.status();
    const ir::Node& node = graph.node(*id);
    const std::vector<TensorRef> inputs{{&graph.value(dy).type, nullptr},
                                        {&graph.value(x).type, nullptr}};
    const std::vector<TensorRef> outputs{{&graph.value(node.outputs[0]).type, nullptr}};
    return kernels.Implementation({node, inputs, outputs, {}});
  };
  for (const int64_t channels : {1, 3, 4, 5, 7, 8, 12, 15}) {
    const std::string chosen = implementation(channels, 2);
    const int64_t block = chosen.find("avx512") != std::string::npos ? 16 : 8;
    EXPECT_FALSE(chosen.starts_with("jit_1x1:") && channels < block)
        << chosen << " for " << channels << " channels";
  }
  // The avoided shapes still run in oneDNN, not in the reference kernel.
  EXPECT_FALSE(implementation(4, 2).empty());
  std::printf("strided 1x1 weight gradient: %s for 4 channels, %s for 16; %s at stride 1\n",
              implementation(4, 2).c_str(), implementation(16, 2).c_str(),
              implementation(4, 1).c_str());
}

// A node of `graph` made for a kernel call, with its values' types and no
// buffers: enough to choose a kernel set, not to run one.
struct CallOf {
  CallOf(const ir::Graph& graph, ir::NodeId id) : node(graph.node(id)) {
    for (const ir::ValueId input : node.inputs) inputs.push_back({&graph.value(input).type});
    for (const ir::ValueId output : node.outputs) outputs.push_back({&graph.value(output).type});
  }
  KernelCall call() const { return {node, inputs, outputs, {}}; }

  const ir::Node& node;
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> outputs;
};

// oneDNN first, then the direct loops, then the reference kernels; an add
// that broadcasts and a reduction the direct loop does not cover fall through
// to the reference kernels, and the summary names them.
TEST(CpuBackendTest, EachCallGoesToTheFirstKernelSetThatTakesIt) {
  ir::Graph graph;
  const ir::ValueId x = graph.AddInput("x", ir::Activation({2, 8, 8, 16}));
  const ir::ValueId w = graph.AddInput("w", ir::F32({16, 3, 3, 16}));
  const ir::ValueId bias = graph.AddInput("bias", ir::F32({16}));
  auto add_node = [&](ir::OpKind op, std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                      const char* name) {
    absl::StatusOr<ir::NodeId> id = graph.AddNode(op, std::move(inputs), std::move(attrs), name);
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  };
  const ir::NodeId conv =
      add_node(ir::OpKind::kConv2d, {x, w}, {{"pads", ir::IntList{1, 1, 1, 1}}}, "conv");
  const ir::NodeId residual = add_node(ir::OpKind::kAdd, {x, x}, {}, "residual");
  const ir::NodeId broadcast = add_node(ir::OpKind::kAdd, {x, bias}, {}, "broadcast");
  const ir::NodeId bias_grad =
      add_node(ir::OpKind::kReduceSum, {x}, {{"axes", ir::IntList{0, 1, 2}}}, "bias_grad");
  const ir::NodeId last_axis =
      add_node(ir::OpKind::kReduceSum, {x}, {{"axes", ir::IntList{-1}}}, "last_axis");

  CpuBackend backend({.threads = kThreads});
  const std::vector<std::pair<ir::NodeId, KernelSet>> expected = {
      {conv, KernelSet::kOneDnn},         {residual, KernelSet::kDirect},
      {broadcast, KernelSet::kReference}, {bias_grad, KernelSet::kDirect},
      {last_axis, KernelSet::kReference},
  };
  for (const auto& [id, set] : expected) {
    const CallOf call(graph, id);
    EXPECT_EQ(backend.KernelSetFor(call.call()), set) << graph.node(id).name;
    EXPECT_EQ(DirectKernelTakes(call.call()), set == KernelSet::kDirect) << graph.node(id).name;
    ASSERT_TRUE(backend.PrepareKernel(call.call()).ok());
  }
  EXPECT_EQ(backend.KernelSummary(),
            "oneDNN 1 calls, direct loops 2, reference 2 (add, reduce_sum)");
  // The next Program's calls are counted afresh.
  ASSERT_TRUE(backend.Prepare(program::Program{}).ok());
  ASSERT_TRUE(backend.PrepareKernel(CallOf(graph, conv).call()).ok());
  EXPECT_EQ(backend.KernelSummary(), "oneDNN 1 calls, direct loops 0, reference 0");
}

// Sets an environment variable for one scope (the ISA switches are read
// from the environment).
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CpuIsaTest, DirectKernelBuildsHaveNames) {
  for (DirectKernelIsa isa :
       {DirectKernelIsa::kGeneric, DirectKernelIsa::kAvx2, DirectKernelIsa::kAvx512}) {
    absl::StatusOr<DirectKernelIsa> parsed = ParseDirectKernelIsa(DirectKernelIsaName(isa));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, isa);
  }
  EXPECT_FALSE(ParseDirectKernelIsa("sse41").ok());
  EXPECT_TRUE(CanRunDirectKernelIsa(DirectKernelIsa::kGeneric));
  EXPECT_EQ(RunnableDirectKernelIsas().front(), DirectKernelIsa::kGeneric);
}

TEST(CpuIsaTest, SpillwayDirectKernelsForcesABuild) {
  for (DirectKernelIsa isa : RunnableDirectKernelIsas()) {
    ScopedEnvironment forced("SPILLWAY_DIRECT_KERNELS",
                             std::string(DirectKernelIsaName(isa)).c_str());
    absl::StatusOr<DirectKernelIsa> selected = SelectDirectKernelIsa();
    ASSERT_TRUE(selected.ok()) << selected.status();
    EXPECT_EQ(*selected, isa);
  }
  ScopedEnvironment bad("SPILLWAY_DIRECT_KERNELS", "avx3");
  EXPECT_FALSE(SelectDirectKernelIsa().ok());
  EXPECT_FALSE(CheckCpuIsaEnvironment().ok());
  for (DirectKernelIsa isa : {DirectKernelIsa::kAvx2, DirectKernelIsa::kAvx512}) {
    if (CanRunDirectKernelIsa(isa)) continue;
    ScopedEnvironment unrunnable("SPILLWAY_DIRECT_KERNELS",
                                 std::string(DirectKernelIsaName(isa)).c_str());
    absl::StatusOr<DirectKernelIsa> selected = SelectDirectKernelIsa();
    ASSERT_FALSE(selected.ok());
    EXPECT_THAT(std::string(selected.status().message()), ::testing::HasSubstr("cannot run"));
  }
}

TEST(CpuIsaTest, AnUnknownOneDnnIsaIsAnError) {
  ScopedEnvironment bad("ONEDNN_MAX_CPU_ISA", "AVX3");
  absl::Status status = CheckCpuIsaEnvironment();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("ONEDNN_MAX_CPU_ISA=AVX3"));
}

// CI runs this suite three times: on the machine's widest ISA, with
// ONEDNN_MAX_CPU_ISA=AVX2 and with ONEDNN_MAX_CPU_ISA=SSE41 (.ci/run). By
// default the direct kernels follow oneDNN's restriction.
TEST(CpuIsaTest, TheDirectKernelsFollowOneDnnsIsa) {
  if (std::getenv("SPILLWAY_DIRECT_KERNELS") != nullptr) GTEST_SKIP() << "a build is forced";
  absl::StatusOr<CpuIsaPaths> paths = DescribeCpuIsaPaths();
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_THAT(paths->onednn_version, ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  const std::string& onednn = paths->onednn_isa;
  if (onednn == "sse41" || onednn == "avx") {
    EXPECT_EQ(paths->direct_kernels, "generic");
  } else if (onednn.starts_with("avx2")) {
    EXPECT_EQ(paths->direct_kernels,
              CanRunDirectKernelIsa(DirectKernelIsa::kAvx2) ? "avx2" : "generic");
  } else if (onednn.starts_with("avx512_core")) {
    EXPECT_EQ(paths->direct_kernels, "avx512");
  }
  std::printf("oneDNN %s on %s, direct kernels %s\n", paths->onednn_version.c_str(), onednn.c_str(),
              paths->direct_kernels.c_str());
}

// With profiling on, the backend prints each op kind it ran, with its
// number of calls, when it is destroyed.
TEST(CpuBackendTest, ProfilePrintsTimePerOpKind) {
  const OpTestCase conv = MidSizeCases().front();
  ::testing::internal::CaptureStderr();
  {
    CpuBackend backend({.threads = kThreads, .profile = true});
    ASSERT_TRUE(testing::CompareWithReference(backend, conv).ok());
  }
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("kernel time per op"), std::string::npos) << printed;
  EXPECT_NE(printed.find("conv2d "), std::string::npos) << printed;
  EXPECT_NE(printed.find(" 1 calls"), std::string::npos) << printed;
}

TEST(CpuBackendTest, CopiesAreMemcpy) {
  CpuBackend backend;
  absl::StatusOr<void*> device = backend.AllocateDevice(64);
  absl::StatusOr<void*> host = backend.AllocateHost(64);
  ASSERT_TRUE(device.ok() && host.ok());
  const std::vector<float> values{1.0f, -2.0f, 3.5f, 0.25f};
  const auto bytes = static_cast<int64_t>(values.size() * sizeof(float));
  ASSERT_TRUE(backend.Upload(*device, values.data(), bytes).ok());
  ASSERT_TRUE(backend.Copy(program::Stream::kCompute, *host, *device, bytes).ok());
  std::vector<float> back(values.size());
  ASSERT_TRUE(backend.Download(back.data(), *host, bytes).ok());
  EXPECT_EQ(back, values);
  backend.FreeHost(*host);
  backend.FreeDevice(*device);
}

}  // namespace
}  // namespace spillway::backends::cpu
