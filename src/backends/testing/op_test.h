// One op-test harness for every backend (in the style of ggml's
// test-backend-ops). A short case per op names its input types and
// attributes; for each case the harness
//  (a) runs the op, and every backward node its gradient rule emits, on a
//      backend and on the reference kernels in float, on the same random
//      inputs, and compares the outputs;
//  (b) checks the gradient rule in double precision: the gradients the
//      backward nodes compute (with the reference kernels) against central
//      finite differences of L = sum_k <output_k, w_k> for fixed random w_k.
// Backward and update ops are compared in (a) through the forward ops whose
// gradients they are, or by cases of their own; their derivatives are the
// forward ops' checks in (b). `CoveredOps` tells a test which ops the cases
// reach, so a new op without a case fails the suite.
#pragma once

#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "backends/backend.h"
#include "ir/graph.h"

namespace spillway::autodiff {
class GradientContext;
}  // namespace spillway::autodiff

namespace spillway::backends::testing {

struct OpTestCase {
  std::string name;  // unique, "<op>/<what is special>": "conv2d/stride2_pad1_groups2"
  ir::OpKind op = ir::OpKind::kRelu;
  std::vector<ir::TensorType> inputs;
  ir::AttrMap attrs{};
  // Float inputs are drawn uniformly from [low, high]; integer inputs (labels,
  // indices, Adam's step) uniformly from [int_low, int_limit).
  double low = -1.0;
  double high = 1.0;
  int64_t int_low = 0;
  int64_t int_limit = 1;
  // Inputs the gradient check leaves out (running statistics); integer inputs
  // are always left out.
  std::vector<int> no_gradient{};
  // False for ops without a gradient rule (the optimizer updates).
  bool check_gradient = true;
  // Relative tolerance, scaled by the magnitude of the compared values.
  double float_tolerance = 1e-5;     // (a): a backend against the reference, in float
  double gradient_tolerance = 1e-6;  // (b): analytic against finite differences, in double
};

// A case with default ranges and tolerances, for the case lists.
OpTestCase Case(std::string name, ir::OpKind op, std::vector<ir::TensorType> inputs,
                ir::AttrMap attrs = {});

// Every case: the groups below, concatenated.
std::vector<OpTestCase> AllOpTestCases();
std::vector<OpTestCase>
SpatialOpTestCases();  // convolution, pooling, normalization, resize, softmax, losses, embedding
std::vector<OpTestCase>
TensorOpTestCases();  // elementwise, matmul, data movement, reductions, optimizer updates

// (a): compares `backend` with the reference kernels on the case's op and on
// every backward node of its gradient. The error names the node, the output
// and the worst element.
absl::Status CompareWithReference(Backend& backend, const OpTestCase& test_case, uint64_t seed = 1);

// (b): the finite-difference gradient check in double precision.
absl::Status CheckGradient(const OpTestCase& test_case, uint64_t seed = 1);

// (b) with another gradient rule in place of autodiff::ApplyGradientRule: the
// harness's own tests hand it a wrong rule to see the check fail.
using GradientRule = std::function<absl::Status(autodiff::GradientContext&)>;
absl::Status CheckGradient(const OpTestCase& test_case, uint64_t seed, const GradientRule& rule);

// Runs the case's op and its backward nodes twice on `backend`, in different
// buffers, and requires bitwise equal outputs (the determinism every backend
// promises). Also runs what a recomputation asks for, and requires the first
// run's bytes: each output of a multi-output node alone, a training batch
// norm from its saved statistics (backends/kernel.h), and the first output of
// an op that may overwrite its inputs written over each input of its type.
absl::Status CheckDeterministic(Backend& backend, const OpTestCase& test_case, uint64_t seed = 1);

// Ops the cases run: their own ops and the ops of their gradients.
std::set<ir::OpKind> CoveredOps(const std::vector<OpTestCase>& cases);

// GoogleTest prints a test parameter by its name; without this it would dump
// the struct's bytes, padding included, which valgrind reports as a read of
// uninitialised memory.
void PrintTo(const OpTestCase& test_case, std::ostream* out);

}  // namespace spillway::backends::testing
