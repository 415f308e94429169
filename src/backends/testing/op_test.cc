// The op-test harness. Every check builds the same small graph for a case:
// one graph input per case input, the op's node, and, for an op with a
// gradient rule, one graph input per differentiated output (its upstream
// gradient w_k) and the backward nodes the rule emits. Values live in host
// memory aligned like a backend's buffers; the reference kernels run on them
// with T = float (to compare with a backend) or T = double (gradient check).
#include "backends/testing/op_test.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <utility>

#include "autodiff/gradients.h"
#include "backends/host_memory.h"
#include "backends/reference/reference_kernels.h"
#include "fmt/format.h"
#include "ir/op_registry.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::backends::testing {
namespace {

using ir::kInvalidValue;
using ir::ValueId;

// Uniform numbers that are the same with every standard library: the
// sequence of std::mt19937_64 is fixed by the standard, its distributions'
// are not.
class CaseRandom {
 public:
  explicit CaseRandom(uint64_t seed) : engine_(seed) {}

  double Uniform(double low, double high) {
    const double unit = static_cast<double>(engine_() >> 11) * 0x1.0p-53;  // [0, 1)
    return low + (high - low) * unit;
  }
  int64_t Below(int64_t limit) {
    return static_cast<int64_t>(engine_() % static_cast<uint64_t>(std::max<int64_t>(limit, 1)));
  }

 private:
  std::mt19937_64 engine_;
};

// ---- The case's graph ----

struct CaseGraph {
  ir::Graph graph{"op_test"};
  ir::NodeId op_node = ir::kNoNode;
  // Per input of the op: the value holding d L / d input, or kInvalidValue.
  std::vector<ValueId> input_grads;
  // Per output of the op: the graph input w_k, or kInvalidValue where the
  // output is not differentiated.
  std::vector<ValueId> output_grads;
};

std::string CaseName(const OpTestCase& test_case) {
  return fmt::format("case '{}' ({})", test_case.name, ir::OpName(test_case.op));
}

bool IsNoGradient(const OpTestCase& test_case, size_t input) {
  return std::find(test_case.no_gradient.begin(), test_case.no_gradient.end(),
                   static_cast<int>(input)) != test_case.no_gradient.end();
}

// Whether the loss L = sum_k <y_k, w_k> includes output k. Outputs written in
// place over an input (running statistics) are state, not results. The
// statistics batch norm and layer norm save (mean, inverse deviation) exist
// for their backward ops, which take no gradient for them: the rules read
// the gradient of output 0 only.
bool IsDifferentiated(const ir::Node& node, const ir::TensorType& type, int output) {
  if (type.dtype != ir::DType::kF32) return false;
  for (const auto& [aliased_output, input] : ir::GetOpDef(node.op).in_place) {
    if (aliased_output == output) return false;
  }
  if (node.op == ir::OpKind::kBatchNorm || node.op == ir::OpKind::kLayerNorm) return output == 0;
  return true;
}

absl::Status CheckSupportedType(const ir::TensorType& type, std::string_view what) {
  switch (type.dtype) {
    case ir::DType::kF32:
    case ir::DType::kI32:
    case ir::DType::kI64:
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(fmt::format(
          "{} is {}: the op-test harness handles f32, i32 and i64", what, ir::TypeToString(type)));
  }
}

// The op's node alone, or with its gradient when `rule` is given.
absl::StatusOr<CaseGraph> BuildCaseGraph(const OpTestCase& test_case, const GradientRule* rule) {
  CaseGraph built;
  ir::Graph& graph = built.graph;
  std::vector<ValueId> inputs;
  std::vector<bool> wants;
  for (size_t i = 0; i < test_case.inputs.size(); ++i) {
    const ir::TensorType& type = test_case.inputs[i];
    RETURN_IF_ERROR(
        Annotate(CheckSupportedType(type, fmt::format("input {}", i)), CaseName(test_case)));
    inputs.push_back(graph.AddInput(fmt::format("x{}", i), type));
    wants.push_back(ir::IsFloating(type.dtype) && !IsNoGradient(test_case, i));
  }
  absl::StatusOr<ir::NodeId> op_node = graph.AddNode(test_case.op, inputs, test_case.attrs, "op");
  if (!op_node.ok()) {
    return Annotate(op_node.status(), fmt::format("{} is broken", CaseName(test_case)));
  }
  built.op_node = *op_node;
  const ir::Node node = graph.node(*op_node);  // a copy: the graph grows below
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    RETURN_IF_ERROR(
        Annotate(CheckSupportedType(graph.value(node.outputs[k]).type, fmt::format("output {}", k)),
                 CaseName(test_case)));
  }
  built.input_grads.assign(inputs.size(), kInvalidValue);
  built.output_grads.assign(node.outputs.size(), kInvalidValue);
  if (rule == nullptr) return built;

  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const ir::TensorType& type = graph.value(node.outputs[k]).type;
    if (IsDifferentiated(node, type, static_cast<int>(k))) {
      built.output_grads[k] = graph.AddInput(fmt::format("w{}", k), type);
    }
  }
  autodiff::GradientContext context(graph, node, built.output_grads, wants);
  RETURN_IF_ERROR(Annotate((*rule)(context), CaseName(test_case)));
  built.input_grads = context.input_grads();
  return built;
}

// ---- Host values ----

struct FreeAlignedDeleter {
  void operator()(void* memory) const { FreeAligned(memory); }
};

// The bytes of one value, at kTensorAlignment.
class HostTensor {
 public:
  HostTensor() = default;
  static absl::StatusOr<HostTensor> Allocate(int64_t bytes, std::byte fill) {
    ASSIGN_OR_RETURN(void* memory, AllocateAligned(bytes, "op-test host tensor"));
    HostTensor tensor;
    tensor.memory_.reset(memory);
    tensor.bytes_ = bytes;
    std::memset(memory, static_cast<int>(fill), static_cast<size_t>(bytes));
    return tensor;
  }
  absl::StatusOr<HostTensor> Clone() const {
    ASSIGN_OR_RETURN(HostTensor copy, Allocate(bytes_, std::byte{0}));
    std::memcpy(copy.data(), data(), static_cast<size_t>(bytes_));
    return copy;
  }
  void* data() const { return memory_.get(); }
  int64_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, FreeAlignedDeleter> memory_;
  int64_t bytes_ = 0;
};

// A byte pattern for outputs before a kernel runs: as f32 (and f64) it is a
// NaN, so an element a kernel fails to write cannot pass a comparison.
constexpr std::byte kUnwritten{0xff};

int64_t Elements(const ir::TensorType& type) {
  std::optional<int64_t> count = ir::NumElements(type.shape);
  SPILLWAY_CHECK(count.has_value(), "a type that passed inference has an element count");
  return *count;
}

// Bytes of a value when f32 tensors hold `float_size`-byte elements.
int64_t StorageBytes(const ir::TensorType& type, int64_t float_size) {
  return Elements(type) * (type.dtype == ir::DType::kF32 ? float_size : ir::DTypeSize(type.dtype));
}

template <typename T>
double GetElement(const ir::TensorType& type, const void* data, int64_t i) {
  const auto index = static_cast<size_t>(i);
  switch (type.dtype) {
    case ir::DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(data)[index]);
    case ir::DType::kI32:
      return static_cast<double>(static_cast<const int32_t*>(data)[index]);
    default:
      return static_cast<double>(static_cast<const T*>(data)[index]);
  }
}

template <typename T>
void SetElement(const ir::TensorType& type, void* data, int64_t i, double value) {
  const auto index = static_cast<size_t>(i);
  switch (type.dtype) {
    case ir::DType::kI64:
      static_cast<int64_t*>(data)[index] = static_cast<int64_t>(value);
      break;
    case ir::DType::kI32:
      static_cast<int32_t*>(data)[index] = static_cast<int32_t>(value);
      break;
    default:
      static_cast<T*>(data)[index] = static_cast<T>(value);
  }
}

template <typename T>
std::vector<double> ToDoubles(const ir::TensorType& type, const HostTensor& tensor) {
  std::vector<double> values(static_cast<size_t>(Elements(type)));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = GetElement<T>(type, tensor.data(), static_cast<int64_t>(i));
  }
  return values;
}

// "[1,0,2]": the coordinates of the flat index `i`.
std::string ElementName(const ir::Shape& shape, int64_t i) {
  std::vector<int64_t> coordinates(shape.size());
  for (size_t axis = shape.size(); axis-- > 0;) {
    coordinates[axis] = i % shape[axis];
    i /= shape[axis];
  }
  return ir::ShapeToString(coordinates);
}

// Random contents for every graph input, the same for float and double runs:
// floats uniform in [low, high], integers in [int_low, int_limit), upstream
// gradients w_k in [-1, 1], drawn in input order.
using Draw = std::vector<std::vector<double>>;  // indexed by ValueId; empty for non-inputs

Draw DrawInputs(const OpTestCase& test_case, const CaseGraph& built, uint64_t seed) {
  const ir::Graph& graph = built.graph;
  CaseRandom random(seed);
  Draw draw(static_cast<size_t>(graph.num_values()));
  for (ValueId id : graph.inputs()) {
    const ir::TensorType& type = graph.value(id).type;
    std::vector<double>& values = draw[static_cast<size_t>(id)];
    values.resize(static_cast<size_t>(Elements(type)));
    const bool is_upstream_gradient =
        std::find(built.output_grads.begin(), built.output_grads.end(), id) !=
        built.output_grads.end();
    for (double& value : values) {
      if (!ir::IsFloating(type.dtype)) {
        value = static_cast<double>(test_case.int_low +
                                    random.Below(test_case.int_limit - test_case.int_low));
      } else if (is_upstream_gradient) {
        value = random.Uniform(-1.0, 1.0);
      } else {
        value = random.Uniform(test_case.low, test_case.high);
      }
    }
  }
  return draw;
}

// Host storage for the graph's inputs, holding `draw` with T elements.
template <typename T>
absl::StatusOr<std::vector<HostTensor>> MaterializeInputs(const ir::Graph& graph,
                                                          const Draw& draw) {
  std::vector<HostTensor> values(static_cast<size_t>(graph.num_values()));
  for (ValueId id : graph.inputs()) {
    const ir::TensorType& type = graph.value(id).type;
    ASSIGN_OR_RETURN(HostTensor tensor,
                     HostTensor::Allocate(StorageBytes(type, sizeof(T)), std::byte{0}));
    const std::vector<double>& source = draw[static_cast<size_t>(id)];
    for (size_t i = 0; i < source.size(); ++i) {
      SetElement<T>(type, tensor.data(), static_cast<int64_t>(i), source[i]);
    }
    values[static_cast<size_t>(id)] = std::move(tensor);
  }
  return values;
}

std::string NodeName(const ir::Node& node) {
  return fmt::format("node '{}' ({})", node.name, ir::OpName(node.op));
}

// The input an in-place output is written over, or -1.
int AliasedInput(const ir::Node& node, size_t output) {
  for (const auto& [aliased_output, input] : ir::GetOpDef(node.op).in_place) {
    if (aliased_output == static_cast<int>(output)) return input;
  }
  return -1;
}

// Runs one node with the reference kernels on `values` (indexed by ValueId)
// and stores its outputs there. Values stay immutable (SSA): an in-place
// output starts as a copy of its input, and the kernel gets that copy as
// both, as the kernel contract says in-place outputs alias their inputs.
template <typename T>
absl::Status RunReferenceNode(const ir::Graph& graph, const ir::Node& node,
                              std::vector<HostTensor>& values) {
  std::vector<TensorRef> inputs;
  for (ValueId id : node.inputs) {
    inputs.push_back({&graph.value(id).type, values[static_cast<size_t>(id)].data()});
  }
  std::vector<HostTensor> results;
  std::vector<TensorRef> outputs;
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const ir::TensorType& type = graph.value(node.outputs[k]).type;
    HostTensor result;
    if (const int input = AliasedInput(node, k); input >= 0) {
      ASSIGN_OR_RETURN(
          result, values[static_cast<size_t>(node.inputs[static_cast<size_t>(input)])].Clone());
      inputs[static_cast<size_t>(input)].data = result.data();
    } else {
      ASSIGN_OR_RETURN(result, HostTensor::Allocate(StorageBytes(type, sizeof(T)), kUnwritten));
    }
    outputs.push_back({&type, result.data()});
    results.push_back(std::move(result));
  }
  const KernelCall call{.node = node, .inputs = inputs, .outputs = outputs, .context = {.step = 0}};
  RETURN_IF_ERROR(
      Annotate(reference::RunReferenceKernel<T>(call),
               fmt::format("reference kernel ({}) of {}",
                           sizeof(T) == sizeof(float) ? "float" : "double", NodeName(node))));
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    values[static_cast<size_t>(node.outputs[k])] = std::move(results[k]);
  }
  return absl::OkStatus();
}

// Every value of the graph, computed with the reference kernels from `draw`.
template <typename T>
absl::StatusOr<std::vector<HostTensor>> EvaluateWithReference(const ir::Graph& graph,
                                                              const Draw& draw) {
  ASSIGN_OR_RETURN(std::vector<HostTensor> values, MaterializeInputs<T>(graph, draw));
  for (ir::NodeId id : graph.TopologicalOrder()) {
    RETURN_IF_ERROR(RunReferenceNode<T>(graph, graph.node(id), values));
  }
  return values;
}

const GradientRule& DefaultRule() {
  static const GradientRule* const rule = new GradientRule(autodiff::ApplyGradientRule);
  return *rule;
}

// The graph CompareWithReference, CheckDeterministic and CoveredOps use: the
// op and, where it has a rule, its gradient.
absl::StatusOr<CaseGraph> BuildComparedGraph(const OpTestCase& test_case) {
  return BuildCaseGraph(test_case,
                        autodiff::HasGradientRule(test_case.op) ? &DefaultRule() : nullptr);
}

// ---- Finite differences ----

// The step of the central difference, relative to max(1, |x|): the cube root
// of double's epsilon balances the truncation error (~h^2) against rounding
// (~eps/h).
const double kRelativeStep = std::cbrt(std::numeric_limits<double>::epsilon());

// d L / d x[i] for every element of input `input` of the op, by central
// differences; L is recomputed from the op's node alone, in `values`.
absl::StatusOr<std::vector<double>> NumericGradient(const CaseGraph& built, size_t input,
                                                    std::vector<HostTensor>& values,
                                                    const Draw& draw) {
  const ir::Graph& graph = built.graph;
  const ir::Node& node = graph.node(built.op_node);
  const ValueId x_id = node.inputs[input];
  const ir::TensorType& x_type = graph.value(x_id).type;
  void* x = values[static_cast<size_t>(x_id)].data();

  // sum_k <y_k, w_k> for the current contents of x, one term per element.
  auto outputs_now = [&]() -> absl::StatusOr<std::vector<std::vector<double>>> {
    RETURN_IF_ERROR(RunReferenceNode<double>(graph, node, values));
    std::vector<std::vector<double>> outputs(node.outputs.size());
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (built.output_grads[k] == kInvalidValue) continue;
      const ValueId y = node.outputs[k];
      outputs[k] = ToDoubles<double>(graph.value(y).type, values[static_cast<size_t>(y)]);
    }
    return outputs;
  };

  std::vector<double> gradient(static_cast<size_t>(Elements(x_type)));
  for (size_t i = 0; i < gradient.size(); ++i) {
    const double original = GetElement<double>(x_type, x, static_cast<int64_t>(i));
    const double step = kRelativeStep * std::max(1.0, std::abs(original));
    const double plus = original + step;
    const double minus = original - step;
    SetElement<double>(x_type, x, static_cast<int64_t>(i), plus);
    ASSIGN_OR_RETURN(std::vector<std::vector<double>> y_plus, outputs_now());
    SetElement<double>(x_type, x, static_cast<int64_t>(i), minus);
    ASSIGN_OR_RETURN(std::vector<std::vector<double>> y_minus, outputs_now());
    SetElement<double>(x_type, x, static_cast<int64_t>(i), original);
    // L(x+) - L(x-) summed as w·(y+ - y-): differences first, so the sum does
    // not cancel two nearly equal totals.
    double difference = 0.0;
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (built.output_grads[k] == kInvalidValue) continue;
      const std::vector<double>& w = draw[static_cast<size_t>(built.output_grads[k])];
      for (size_t j = 0; j < w.size(); ++j) difference += w[j] * (y_plus[k][j] - y_minus[k][j]);
    }
    // plus - minus is the step actually taken, after rounding.
    gradient[i] = difference / (plus - minus);
  }
  RETURN_IF_ERROR(outputs_now().status());  // the op's outputs at x again
  return gradient;
}

// ---- Backends ----

// A device buffer of `backend`, freed when it goes.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& backend, void* memory) : backend_(&backend), memory_(memory) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : backend_(other.backend_), memory_(std::exchange(other.memory_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (memory_ != nullptr) backend_->FreeDevice(memory_);
  }
  void* get() const { return memory_; }

 private:
  Backend* backend_;
  void* memory_;
};

// One run of a node on a backend: its outputs, downloaded, and the device
// buffers, kept while the caller needs them (so that a second run gets
// different addresses).
struct BackendRun {
  std::vector<DeviceBuffer> buffers;
  std::vector<HostTensor> outputs;
};

absl::StatusOr<DeviceBuffer> Upload(Backend& backend, const HostTensor& host) {
  ASSIGN_OR_RETURN(void* memory, backend.AllocateDevice(std::max<int64_t>(host.bytes(), 1)));
  DeviceBuffer buffer(backend, memory);
  RETURN_IF_ERROR(backend.Upload(buffer.get(), host.data(), host.bytes()));
  return buffer;
}

// What one run hands a kernel: the contents of each of its inputs (null:
// absent) and the outputs it wants.
struct KernelInputs {
  std::vector<const ir::TensorType*> types;
  std::vector<const HostTensor*> contents;
  std::vector<bool> wanted;
  // >= 0: output 0 is written over (the run's own copy of) this input, as the
  // rewriter does with a dead input of an op that may overwrite its inputs.
  int donated_input = -1;
};

// The node as a step runs it: every input from `values`, every output wanted.
KernelInputs FullRun(const ir::Graph& graph, const ir::Node& node,
                     const std::vector<HostTensor>& values) {
  KernelInputs run;
  for (ValueId id : node.inputs) {
    run.types.push_back(&graph.value(id).type);
    run.contents.push_back(&values[static_cast<size_t>(id)]);
  }
  run.wanted.assign(node.outputs.size(), true);
  return run;
}

// Runs `node` on `backend`; wanted outputs that are not in place start filled
// with `fill`. An in-place output gets its input's buffer.
absl::StatusOr<BackendRun> RunOnBackend(Backend& backend, const ir::Graph& graph,
                                        const ir::Node& node, const KernelInputs& given,
                                        std::byte fill) {
  BackendRun run;
  std::vector<TensorRef> inputs;
  for (size_t i = 0; i < given.types.size(); ++i) {
    if (given.contents[i] == nullptr) {
      inputs.push_back({given.types[i], nullptr});
      continue;
    }
    ASSIGN_OR_RETURN(DeviceBuffer buffer, Upload(backend, *given.contents[i]));
    inputs.push_back({given.types[i], buffer.get()});
    run.buffers.push_back(std::move(buffer));
  }
  std::vector<TensorRef> outputs;
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const ir::TensorType& type = graph.value(node.outputs[k]).type;
    if (!given.wanted[k]) {
      outputs.push_back({&type, nullptr});
    } else if (k == 0 && given.donated_input >= 0) {
      outputs.push_back({&type, inputs[static_cast<size_t>(given.donated_input)].data});
    } else if (const int input = AliasedInput(node, k); input >= 0) {
      outputs.push_back({&type, inputs[static_cast<size_t>(input)].data});
    } else {
      ASSIGN_OR_RETURN(HostTensor filled,
                       HostTensor::Allocate(StorageBytes(type, sizeof(float)), fill));
      ASSIGN_OR_RETURN(DeviceBuffer buffer, Upload(backend, filled));
      outputs.push_back({&type, buffer.get()});
      run.buffers.push_back(std::move(buffer));
    }
  }
  const KernelCall call{.node = node, .inputs = inputs, .outputs = outputs, .context = {.step = 0}};
  const std::string where = fmt::format("backend '{}', {}", backend.name(), NodeName(node));
  RETURN_IF_ERROR(Annotate(backend.RunKernel(program::Stream::kCompute, call), where));
  RETURN_IF_ERROR(Annotate(backend.SynchronizeStream(program::Stream::kCompute), where));
  run.outputs.resize(node.outputs.size());
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    if (!given.wanted[k]) continue;
    const ir::TensorType& type = graph.value(node.outputs[k]).type;
    ASSIGN_OR_RETURN(HostTensor host,
                     HostTensor::Allocate(StorageBytes(type, sizeof(float)), std::byte{0}));
    RETURN_IF_ERROR(Annotate(backend.Download(host.data(), outputs[k].data, host.bytes()), where));
    run.outputs[k] = std::move(host);
  }
  return run;
}

std::string OutputName(const ir::Graph& graph, const ir::Node& node, size_t k) {
  return fmt::format("output {} ('{}', {})", k, graph.value(node.outputs[k]).name,
                     ir::TypeToString(graph.value(node.outputs[k]).type));
}

// Ok when `a` and `b` hold the same bytes; otherwise names the first
// element that differs.
absl::Status CompareBitwise(const ir::TensorType& type, const HostTensor& a, const HostTensor& b) {
  SPILLWAY_CHECK(a.bytes() == b.bytes(), "two runs of one output have one size");
  const auto* a_bytes = static_cast<const std::byte*>(a.data());
  const auto* b_bytes = static_cast<const std::byte*>(b.data());
  const size_t size = static_cast<size_t>(a.bytes());
  const size_t differing_byte =
      static_cast<size_t>(std::mismatch(a_bytes, a_bytes + size, b_bytes).first - a_bytes);
  if (differing_byte == size) return absl::OkStatus();
  const int64_t element = static_cast<int64_t>(differing_byte) * Elements(type) / a.bytes();
  return absl::InternalError(fmt::format(
      "first at element {} (flat {}): {} then {}", ElementName(type.shape, element), element,
      GetElement<float>(type, a.data(), element), GetElement<float>(type, b.data(), element)));
}

// Elements whose error exceeds its bound, and the one exceeding it most.
struct Mismatches {
  int64_t count = 0;
  size_t worst = 0;
};

// `error_ratio(i)` is element i's error over its bound; NaN (an unwritten
// element, a NaN result) counts as the worst.
template <typename ErrorRatio>
Mismatches FindMismatches(size_t size, ErrorRatio error_ratio) {
  Mismatches found;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < size; ++i) {
    double ratio = error_ratio(i);
    if (ratio <= 1.0) continue;
    if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
    if (found.count++ == 0 || ratio > worst_ratio) {
      worst_ratio = ratio;
      found.worst = i;
    }
  }
  return found;
}

// Ok when |got - want| <= tolerance * max(1, |want|) for every element:
// relative for large values, absolute below 1, where float results carry
// the absolute rounding error of their O(1) operands. Integers must be equal.
absl::Status CompareOutput(const ir::TensorType& type, const std::vector<double>& got,
                           const std::vector<double>& want, double tolerance) {
  const double effective = type.dtype == ir::DType::kF32 ? tolerance : 0.0;
  const Mismatches mismatches = FindMismatches(got.size(), [&](size_t i) {
    if (got[i] == want[i]) return 0.0;  // also equal infinities
    return std::abs(got[i] - want[i]) / (effective * std::max(1.0, std::abs(want[i])));
  });
  if (mismatches.count == 0) return absl::OkStatus();
  const size_t worst = mismatches.worst;
  return absl::InternalError(fmt::format(
      "{} of {} elements differ; worst element {} (flat {}): backend {}, reference {} "
      "(|difference| {:.3g}, tolerance {:.3g} relative)",
      mismatches.count, got.size(), ElementName(type.shape, static_cast<int64_t>(worst)), worst,
      got[worst], want[worst], std::abs(got[worst] - want[worst]), effective));
}

}  // namespace

OpTestCase Case(std::string name, ir::OpKind op, std::vector<ir::TensorType> inputs,
                ir::AttrMap attrs) {
  OpTestCase test_case;
  test_case.name = std::move(name);
  test_case.op = op;
  test_case.inputs = std::move(inputs);
  test_case.attrs = std::move(attrs);
  return test_case;
}

std::vector<OpTestCase> AllOpTestCases() {
  std::vector<OpTestCase> cases = SpatialOpTestCases();
  std::vector<OpTestCase> tensor = TensorOpTestCases();
  cases.insert(cases.end(), std::make_move_iterator(tensor.begin()),
               std::make_move_iterator(tensor.end()));
  return cases;
}

absl::Status CompareWithReference(Backend& backend, const OpTestCase& test_case, uint64_t seed) {
  ASSIGN_OR_RETURN(CaseGraph built, BuildComparedGraph(test_case));
  const ir::Graph& graph = built.graph;
  absl::StatusOr<std::vector<HostTensor>> reference =
      EvaluateWithReference<float>(graph, DrawInputs(test_case, built, seed));
  RETURN_IF_ERROR(Annotate(reference.status(), CaseName(test_case)));
  for (ir::NodeId id : graph.TopologicalOrder()) {
    const ir::Node& node = graph.node(id);
    absl::StatusOr<BackendRun> run =
        RunOnBackend(backend, graph, node, FullRun(graph, node, *reference), kUnwritten);
    RETURN_IF_ERROR(Annotate(run.status(), CaseName(test_case)));
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const ir::TensorType& type = graph.value(node.outputs[k]).type;
      const std::vector<double> got = ToDoubles<float>(type, run->outputs[k]);
      const std::vector<double> want =
          ToDoubles<float>(type, (*reference)[static_cast<size_t>(node.outputs[k])]);
      RETURN_IF_ERROR(Annotate(
          CompareOutput(type, got, want, test_case.float_tolerance),
          fmt::format("{}: backend '{}' against the reference, {}, {}", CaseName(test_case),
                      backend.name(), NodeName(node), OutputName(graph, node, k))));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGradient(const OpTestCase& test_case, uint64_t seed) {
  return CheckGradient(test_case, seed, DefaultRule());
}

absl::Status CheckGradient(const OpTestCase& test_case, uint64_t seed, const GradientRule& rule) {
  if (!test_case.check_gradient) {
    return absl::InvalidArgumentError(fmt::format(
        "{} does not check its gradient (check_gradient is false)", CaseName(test_case)));
  }
  ASSIGN_OR_RETURN(CaseGraph built, BuildCaseGraph(test_case, &rule));
  const ir::Graph& graph = built.graph;
  const Draw draw = DrawInputs(test_case, built, seed);
  absl::StatusOr<std::vector<HostTensor>> evaluated = EvaluateWithReference<double>(graph, draw);
  RETURN_IF_ERROR(Annotate(evaluated.status(), CaseName(test_case)));
  std::vector<HostTensor>& values = *evaluated;

  const ir::Node& node = graph.node(built.op_node);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const ir::TensorType& x_type = graph.value(node.inputs[i]).type;
    if (!ir::IsFloating(x_type.dtype) || IsNoGradient(test_case, i)) continue;
    const std::string where =
        fmt::format("{}, input {} ({})", CaseName(test_case), i, ir::TypeToString(x_type));
    const ValueId grad = built.input_grads[i];
    if (grad == kInvalidValue) {
      return absl::InternalError(fmt::format("{}: the gradient rule gives it no gradient", where));
    }
    const ir::TensorType& grad_type = graph.value(grad).type;
    if (grad_type.shape != x_type.shape || grad_type.dtype != x_type.dtype) {
      return absl::InternalError(fmt::format("{}: the gradient rule gives a gradient of type {}",
                                             where, ir::TypeToString(grad_type)));
    }
    const std::vector<double> analytic =
        ToDoubles<double>(grad_type, values[static_cast<size_t>(grad)]);
    absl::StatusOr<std::vector<double>> numeric = NumericGradient(built, i, values, draw);
    RETURN_IF_ERROR(Annotate(numeric.status(), where));

    // |a - f| <= tolerance * max(1, |a|, |f|): relative for large gradients,
    // absolute near zero, where central differences have no relative accuracy
    // (their error is about eps * |L| / h, whatever the gradient).
    const Mismatches mismatches = FindMismatches(analytic.size(), [&](size_t e) {
      const double a = analytic[e];
      const double f = (*numeric)[e];
      return std::abs(a - f) /
             (test_case.gradient_tolerance * std::max({1.0, std::abs(a), std::abs(f)}));
    });
    if (mismatches.count > 0) {
      const size_t worst = mismatches.worst;
      return absl::InternalError(fmt::format(
          "{}: the gradient differs from finite differences in {} of {} elements; worst element "
          "{} (flat {}): analytic {:.10g}, numeric {:.10g} (|difference| {:.3g}, tolerance {:.3g} "
          "relative)",
          where, mismatches.count, analytic.size(),
          ElementName(x_type.shape, static_cast<int64_t>(worst)), worst, analytic[worst],
          (*numeric)[worst], std::abs(analytic[worst] - (*numeric)[worst]),
          test_case.gradient_tolerance));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDeterministic(Backend& backend, const OpTestCase& test_case, uint64_t seed) {
  ASSIGN_OR_RETURN(CaseGraph built, BuildComparedGraph(test_case));
  const ir::Graph& graph = built.graph;
  absl::StatusOr<std::vector<HostTensor>> reference =
      EvaluateWithReference<float>(graph, DrawInputs(test_case, built, seed));
  RETURN_IF_ERROR(Annotate(reference.status(), CaseName(test_case)));
  for (ir::NodeId id : graph.TopologicalOrder()) {
    const ir::Node& node = graph.node(id);
    const std::string where =
        fmt::format("{}: backend '{}', {}", CaseName(test_case), backend.name(), NodeName(node));
    const KernelInputs full = FullRun(graph, node, *reference);
    // The first run's buffers stay allocated during the others, so every run
    // sees different addresses; the runs' outputs start with different bytes,
    // so an element left unwritten shows too.
    absl::StatusOr<BackendRun> first = RunOnBackend(backend, graph, node, full, std::byte{0});
    RETURN_IF_ERROR(Annotate(first.status(), CaseName(test_case)));
    absl::StatusOr<BackendRun> second = RunOnBackend(backend, graph, node, full, kUnwritten);
    RETURN_IF_ERROR(Annotate(second.status(), CaseName(test_case)));
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      RETURN_IF_ERROR(Annotate(
          CompareBitwise(graph.value(node.outputs[k]).type, first->outputs[k], second->outputs[k]),
          fmt::format("{}, {}: two runs on the same inputs differ (a "
                      "nondeterministic kernel, or one that leaves part of "
                      "its output unwritten)",
                      where, OutputName(graph, node, k))));
    }

    // An op that may overwrite its inputs (ir/op_registry.h) gets, in a
    // step, its first output in the buffer of any dead input of the same
    // type: it must compute the same bytes there.
    if (ir::GetOpDef(node.op).may_overwrite_inputs) {
      const ir::TensorType& type = graph.value(node.outputs[0]).type;
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (!ir::GetOpDef(node.op).MayOverwrite(i) || graph.value(node.inputs[i]).type != type) {
          continue;
        }
        KernelInputs donated = full;
        donated.donated_input = static_cast<int>(i);
        absl::StatusOr<BackendRun> over = RunOnBackend(backend, graph, node, donated, kUnwritten);
        RETURN_IF_ERROR(Annotate(over.status(), CaseName(test_case)));
        // Every output: one computed after output 0 must not read the
        // input that output 0 has overwritten.
        for (size_t k = 0; k < node.outputs.size(); ++k) {
          RETURN_IF_ERROR(Annotate(
              CompareBitwise(graph.value(node.outputs[k]).type, first->outputs[k],
                             over->outputs[k]),
              fmt::format("{}, {}: with output 0 written over input {} it differs from a run "
                          "into separate buffers",
                          where, OutputName(graph, node, k), i)));
        }
      }
    }

    // A recomputation asks only for the value it rebuilds, and must get it
    // bitwise as the step computed it. Ops with in-place outputs are never
    // recomputed, except batch norm in training mode, below.
    if (node.outputs.size() > 1 && ir::GetOpDef(node.op).in_place.empty()) {
      for (size_t k = 0; k < node.outputs.size(); ++k) {
        KernelInputs one = full;
        one.wanted.assign(node.outputs.size(), false);
        one.wanted[k] = true;
        absl::StatusOr<BackendRun> alone = RunOnBackend(backend, graph, node, one, kUnwritten);
        RETURN_IF_ERROR(Annotate(alone.status(), CaseName(test_case)));
        RETURN_IF_ERROR(Annotate(
            CompareBitwise(graph.value(node.outputs[k]).type, first->outputs[k], alone->outputs[k]),
            fmt::format("{}, {}: a run that wants only this output differs from a full run", where,
                        OutputName(graph, node, k))));
      }
    }
    // A recomputed batch norm in training mode (backends/kernel.h): the saved
    // statistics as inputs 5 and 6, no running statistics, only y wanted.
    if (node.op == ir::OpKind::kBatchNorm && node.outputs.size() == 5) {
      KernelInputs recompute = full;
      recompute.contents[3] = nullptr;
      recompute.contents[4] = nullptr;
      for (size_t k : {1, 2}) {
        recompute.types.push_back(&graph.value(node.outputs[k]).type);
        recompute.contents.push_back(&first->outputs[k]);
      }
      recompute.wanted.assign(node.outputs.size(), false);
      recompute.wanted[0] = true;
      absl::StatusOr<BackendRun> again = RunOnBackend(backend, graph, node, recompute, kUnwritten);
      RETURN_IF_ERROR(Annotate(again.status(), CaseName(test_case)));
      RETURN_IF_ERROR(Annotate(
          CompareBitwise(graph.value(node.outputs[0]).type, first->outputs[0], again->outputs[0]),
          fmt::format("{}: y recomputed from the saved statistics differs from the first run's",
                      where)));
    }
  }
  return absl::OkStatus();
}

std::set<ir::OpKind> CoveredOps(const std::vector<OpTestCase>& cases) {
  std::set<ir::OpKind> covered;
  for (const OpTestCase& test_case : cases) {
    covered.insert(test_case.op);
    // A broken case covers only its own op; the checks report why it is broken.
    absl::StatusOr<CaseGraph> built = BuildComparedGraph(test_case);
    if (!built.ok()) continue;
    for (const ir::Node& node : built->graph.nodes()) covered.insert(node.op);
  }
  return covered;
}

void PrintTo(const OpTestCase& test_case, std::ostream* out) { *out << test_case.name; }

}  // namespace spillway::backends::testing
