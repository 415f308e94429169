// The op-test suite on the reference kernels: every case's gradient rule
// against finite differences, the reference backend's determinism, and
// coverage of every op. The harness's own checks are shown to fail on a
// wrong backend and on wrong gradient rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "autodiff/gradients.h"
#include "backends/reference/reference_backend.h"
#include "backends/reference/reference_kernels.h"
#include "backends/testing/forwarding_backend.h"
#include "backends/testing/op_test.h"
#include "fmt/format.h"
#include "ir/op_kind.h"
#include "support/status_macros.h"

namespace spillway::backends::testing {

namespace {

using ::testing::HasSubstr;

std::string TestName(const ::testing::TestParamInfo<OpTestCase>& info) {
  std::string name = info.param.name;
  std::replace_if(
      name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c) == 0; }, '_');
  return name;
}

class OpCaseTest : public ::testing::TestWithParam<OpTestCase> {};

TEST_P(OpCaseTest, GradientMatchesFiniteDifferences) {
  const OpTestCase& test_case = GetParam();
  if (!test_case.check_gradient) GTEST_SKIP() << test_case.name << " has no gradient rule";
  const absl::Status status = CheckGradient(test_case);
  EXPECT_TRUE(status.ok()) << status;
}

// Every output written, bitwise the same from run to run: the reference
// kernels keep the contract they check other backends against.
TEST_P(OpCaseTest, ReferenceBackendIsDeterministic) {
  reference::ReferenceBackend backend;
  const absl::Status status = CheckDeterministic(backend, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpCaseTest, ::testing::ValuesIn(AllOpTestCases()), TestName);

TEST(OpTestCoverage, EveryOpHasACase) {
  const std::set<ir::OpKind> covered = CoveredOps(AllOpTestCases());
  std::vector<std::string_view> missing;
#define SPILLWAY_COLLECT_MISSING(name, text) \
  if (!covered.contains(ir::OpKind::k##name)) missing.push_back(text);
  SPILLWAY_KERNEL_OPS(SPILLWAY_COLLECT_MISSING)
#undef SPILLWAY_COLLECT_MISSING
  EXPECT_TRUE(missing.empty()) << "ops no case reaches: "
                               << fmt::format("{}", fmt::join(missing, ", "));
}

TEST(OpTestCoverage, NamesAreUnique) {
  std::set<std::string> names;
  for (const OpTestCase& test_case : AllOpTestCases()) {
    EXPECT_TRUE(names.insert(TestName({test_case, 0})).second) << test_case.name;
  }
}

// ---- The checks fail when they should ----

OpTestCase MatMulCase() {
  return {.name = "matmul/harness",
          .op = ir::OpKind::kMatMul,
          .inputs = {ir::F32({3, 4}), ir::F32({4, 5})}};
}

OpTestCase MulCase() {
  return {
      .name = "mul/harness", .op = ir::OpKind::kMul, .inputs = {ir::F32({2, 3}), ir::F32({2, 3})}};
}

// The reference backend with its kernels replaced by `run_kernel`.
class TamperedBackend final : public testing::ForwardingBackend {
 public:
  explicit TamperedBackend(std::function<absl::Status(const KernelCall&)> run_kernel)
      : run_kernel_(std::move(run_kernel)) {}
  std::string_view name() const override { return "tampered"; }
  absl::Status RunKernel(program::Stream /*stream*/, const KernelCall& call) override {
    return run_kernel_(call);
  }

 private:
  std::function<absl::Status(const KernelCall&)> run_kernel_;
};

float& LargestElement(const TensorRef& tensor) {
  float* data = tensor.as<float>();
  return *std::max_element(data, data + tensor.num_elements(),
                           [](float a, float b) { return std::abs(a) < std::abs(b); });
}

TEST(OpTestHarness, ComparisonCatchesAPerturbedElement) {
  reference::ReferenceBackend exact;
  ASSERT_TRUE(CompareWithReference(exact, MatMulCase()).ok());
  // The largest element of every output off by a relative 1e-3, 100 times
  // the default tolerance.
  TamperedBackend perturbing([](const KernelCall& call) {
    RETURN_IF_ERROR(reference::RunReferenceKernel<float>(call));
    LargestElement(call.outputs[0]) *= 1.0f + 1e-3f;
    return absl::OkStatus();
  });
  const absl::Status status = CompareWithReference(perturbing, MatMulCase());
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("node 'op' (matmul)"));
  EXPECT_THAT(status.message(), HasSubstr("1 of 15 elements differ"));
}

TEST(OpTestHarness, DeterminismCheckCatchesAnUnwrittenElement) {
  // Leaves the last element of every output as it found it.
  TamperedBackend lazy([](const KernelCall& call) {
    const TensorRef& y = call.outputs[0];
    const float before = y.as<float>()[y.num_elements() - 1];
    RETURN_IF_ERROR(reference::RunReferenceKernel<float>(call));
    y.as<float>()[y.num_elements() - 1] = before;
    return absl::OkStatus();
  });
  const absl::Status status = CheckDeterministic(lazy, MatMulCase());
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("two runs on the same inputs differ"));
  EXPECT_THAT(status.message(), HasSubstr("element [2,4]"));
}

TEST(OpTestHarness, DeterminismCheckCatchesAnInexactBatchNormRecomputation) {
  const OpTestCase batch_norm{.name = "batch_norm/harness",
                              .op = ir::OpKind::kBatchNorm,
                              .inputs = {ir::Activation({2, 2, 2, 3}), ir::F32({3}), ir::F32({3}),
                                         ir::F32({3}), ir::F32({3})},
                              .no_gradient = {3, 4}};
  reference::ReferenceBackend exact;
  ASSERT_TRUE(CheckDeterministic(exact, batch_norm).ok());
  TamperedBackend inexact([](const KernelCall& call) {
    RETURN_IF_ERROR(reference::RunReferenceKernel<float>(call));
    const bool recomputation = call.node.op == ir::OpKind::kBatchNorm && call.inputs.size() == 7;
    if (recomputation) LargestElement(call.outputs[0]) *= 1.0f + 1e-6f;
    return absl::OkStatus();
  });
  const absl::Status status = CheckDeterministic(inexact, batch_norm);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("recomputed from the saved statistics"));
}

// d(a*b)/da = b; this rule says a.
absl::Status WrongMulRule(autodiff::GradientContext& c) {
  c.SetInputGrad(0, c.EmitOne(ir::OpKind::kMul, {c.dy(), c.input(0)}, {}, ".0"));
  c.SetInputGrad(1, c.EmitOne(ir::OpKind::kMul, {c.dy(), c.input(0)}, {}, ".1"));
  return c.status();
}

TEST(OpTestHarness, GradientCheckCatchesAWrongRule) {
  ASSERT_TRUE(CheckGradient(MulCase()).ok());
  const absl::Status status = CheckGradient(MulCase(), 1, WrongMulRule);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("input 0"));
  EXPECT_THAT(status.message(), HasSubstr("analytic"));
}

// The right rule, with every gradient scaled by 1 + 1e-4: a hundred times
// the default tolerance, far below what a look at the numbers would notice.
absl::Status SlightlyScaledRule(autodiff::GradientContext& c) {
  RETURN_IF_ERROR(autodiff::ApplyGradientRule(c));
  const std::vector<ir::ValueId> grads = c.input_grads();
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i] == ir::kInvalidValue) continue;
    const ir::ValueId scale =
        c.EmitOne(ir::OpKind::kFill, {}, {{"shape", c.type(grads[i]).shape}, {"value", 1.0 + 1e-4}},
                  fmt::format(".scale{}", i));
    c.SetInputGrad(i,
                   c.EmitOne(ir::OpKind::kMul, {grads[i], scale}, {}, fmt::format(".scaled{}", i)));
  }
  return c.status();
}

TEST(OpTestHarness, GradientCheckCatchesASmallRelativeError) {
  const absl::Status status = CheckGradient(MatMulCase(), 1, SlightlyScaledRule);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("finite differences"));
}

TEST(OpTestHarness, ABrokenCaseIsReported) {
  OpTestCase broken = MatMulCase();
  broken.inputs[1] = ir::F32({3, 5});  // inner dimensions disagree
  const absl::Status status = CheckGradient(broken);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("case 'matmul/harness' (matmul) is broken"));
}

}  // namespace
}  // namespace spillway::backends::testing
