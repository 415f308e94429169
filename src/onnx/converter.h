// The importer's inside: what an ONNX value name stands for while a model is
// imported, and the converters that map each ONNX op type onto IR nodes.
// Not part of the public API (importer.h); shared by importer.cc and the
// convert_*.cc files, which each register the converters of a group of ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "onnx/importer.h"
#include "onnx/onnx_pb.h"

namespace spillway::onnx::internal {

// A tensor whose value the importer knows: an initializer, a Constant node's
// value or folded shape arithmetic. Integers and floats are kept apart so
// that int64 shapes stay exact.
struct Constant {
  bool is_float = false;
  ir::Shape shape;  // ONNX order
  std::vector<float> floats;
  std::vector<int64_t> ints;

  int64_t size() const { return static_cast<int64_t>(is_float ? floats.size() : ints.size()); }
  // The single value of a one-element tensor, as a double.
  std::optional<double> Scalar() const;
};

Constant FoldedInts(ir::Shape shape, std::vector<int64_t> ints);

// Reads an initializer or a Constant node's tensor (external data must have
// been inlined by then).
absl::StatusOr<Constant> ReadTensor(const ::onnx::TensorProto& tensor);

// What an ONNX value name stands for while importing.
struct Entry {
  ir::ValueId value = ir::kInvalidValue;  // the IR value, once there is one
  // A 4-D float activation: NHWC in the IR, NCHW in ONNX. Every 4-D float
  // value the importer produces is one.
  bool nhwc = false;
  std::optional<Constant> constant;
  bool initializer = false;  // materialized as a parameter or buffer when read as data
  std::string unavailable;   // why a value the importer does not produce cannot be read
};

// Why a node cannot be imported: reported with all others at the end.
struct Unsupported {
  std::string reason;
};
using ConvertResult = absl::StatusOr<std::optional<Unsupported>>;
inline std::optional<Unsupported> Refuse(std::string reason) {
  return Unsupported{std::move(reason)};
}

// Attribute access; missing attributes give the fallback.
const ::onnx::AttributeProto* FindAttr(const ::onnx::NodeProto& node, std::string_view name);
int64_t IntAttr(const ::onnx::NodeProto& node, std::string_view name, int64_t fallback);
float FloatAttr(const ::onnx::NodeProto& node, std::string_view name, float fallback);
std::optional<ir::IntList> IntsAttr(const ::onnx::NodeProto& node, std::string_view name);
std::string StringAttr(const ::onnx::NodeProto& node, std::string_view name, std::string fallback);

// NCHW axis -> NHWC axis of a 4-D activation, and the shapes.
int64_t NhwcAxis(int64_t nchw_axis);
ir::Shape NchwToNhwc(const ir::Shape& s);
ir::Shape NhwcToNchw(const ir::Shape& s);
// Whether the NHWC and NCHW orders of a 4-D tensor (shape in ONNX order)
// hold the elements in the same sequence: when C or H·W is 1.
bool OrdersAgree(const ir::Shape& nchw);

class Importer {
 public:
  Importer(const ::onnx::ModelProto& model, int64_t opset, const ImportOptions& options);

  absl::StatusOr<ImportedModel> Run();

  // ---- For converters ----
  int64_t opset() const { return opset_; }
  const ir::Graph& graph() const { return result_.graph; }
  std::string NodeName(const ::onnx::NodeProto& node) const;

  // The entry of a name; nullptr if nothing defined it.
  const Entry* Find(const std::string& name) const;
  // The entry of input `index`; nullptr for an omitted optional input ("").
  const Entry* Input(const ::onnx::NodeProto& node, int index) const;
  bool IsNhwc(const ::onnx::NodeProto& node, int index) const;
  const Constant* ConstantInput(const ::onnx::NodeProto& node, int index) const;
  // A known value that folding may consume: any constant but a float
  // initializer, which is a parameter and must stay one.
  bool Foldable(const ::onnx::NodeProto& node, int index) const;
  bool AllInputsFoldable(const ::onnx::NodeProto& node) const;
  // The ONNX shape of input `index`, which must be present.
  ir::Shape InputShape(const ::onnx::NodeProto& node, int index) const;
  ir::Shape OnnxShapeOf(const Entry& entry) const;

  // The IR value of a data input; initializers and constants become graph
  // inputs of `kind` (Constant nodes' values always buffers, never trained).
  absl::StatusOr<ir::ValueId> Data(const ::onnx::NodeProto& node, int index,
                                   ir::ValueKind kind = ir::ValueKind::kParameter);
  absl::StatusOr<ir::ValueId> DataNamed(const std::string& name,
                                        ir::ValueKind kind = ir::ValueKind::kParameter);
  // Data input `index` in ONNX element order: an NHWC activation is
  // transposed to NCHW unless both orders agree.
  absl::StatusOr<ir::ValueId> DataInOnnxOrder(const ::onnx::NodeProto& node, int index);
  // The known value `name` as a graph input of shape `shape` and `values`
  // (in the IR's layout): a parameter if an initializer, else a buffer.
  // `ohwi`: the values are a convolution weight transposed from the file's
  // OIHW, which an export transposes back (ImportedModel::ohwi_initializers).
  ir::ValueId Materialize(const std::string& name, ir::Shape shape,
                          const std::vector<float>& values, bool ohwi);
  // A constant tensor as a graph input (a buffer) with `values` in IR order.
  ir::ValueId AddConstantBuffer(const std::string& name, ir::Shape shape,
                                const std::vector<float>& values);

  // Adds an IR node named after `node` (plus `suffix`) and returns its first output.
  absl::StatusOr<ir::ValueId> AddOp(const ::onnx::NodeProto& node, ir::OpKind op,
                                    std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                                    std::string_view suffix = "");
  absl::StatusOr<ir::NodeId> AddNode(const ::onnx::NodeProto& node, ir::OpKind op,
                                     std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                                     std::string_view suffix = "");

  void Define(const std::string& name, ir::ValueId value, bool nhwc);
  // Defines `name` as `value`, a tensor in ONNX element order: a 4-D float
  // result becomes an NHWC activation (transposed unless the orders agree).
  absl::Status DefineFromOnnxOrder(const ::onnx::NodeProto& node, const std::string& name,
                                   ir::ValueId value);
  void DefineConstant(const std::string& name, Constant constant);
  // `name` stands for what `of` stands for (Identity, inference-mode
  // Dropout). A float initializer becomes its parameter first, so that both
  // names read one parameter.
  absl::Status Alias(const std::string& name, const std::string& of);
  // Outputs `from`.. of `node` that a later node reads make that node unsupported.
  void MarkOutputsUnavailable(const ::onnx::NodeProto& node, int from, const std::string& why);

  int64_t NextDropoutSeed() { return next_seed_++; }

 private:
  // Whether an initializer of this name is frozen (ImportOptions::frozen).
  bool Frozen(std::string_view name) const;
  absl::Status AddGraphInputs();
  absl::Status AddGraphOutputs();
  ConvertResult Convert(const ::onnx::NodeProto& node);

  const ::onnx::ModelProto& model_;
  int64_t opset_;
  const ImportOptions& options_;
  int64_t next_seed_;
  ImportedModel result_;
  // Node-based: converters hold references to entries while defining others.
  absl::node_hash_map<std::string, Entry> entries_;
};

// A converter maps one ONNX node onto IR nodes (or folds it to a constant),
// or says why it cannot.
using ConvertFn = ConvertResult (*)(Importer& importer, const ::onnx::NodeProto& node);
struct Converter {
  ConvertFn convert = nullptr;
  int required_inputs = 1;  // inputs 0..required_inputs-1 must be present
};
using ConverterTable = absl::flat_hash_map<std::string, Converter>;

// Each group registers its op types (convert_tensor.cc, convert_layers.cc).
void AddTensorConverters(ConverterTable& table);
void AddLayerConverters(ConverterTable& table);
const ConverterTable& Converters();

// GELU exported as x·0.5·(1 + erf(x/√2)) (PyTorch's nn.GELU): five nodes
// that become one `gelu`. Found before conversion; see convert_layers.cc.
struct GeluPattern {
  std::string x;                      // the input's name
  absl::flat_hash_set<int> interior;  // node indices replaced by the gelu
};
// Node index of the pattern's last node -> the pattern.
absl::flat_hash_map<int, GeluPattern> FindGeluPatterns(const ::onnx::GraphProto& graph);
ConvertResult ConvertGelu(Importer& importer, const ::onnx::NodeProto& node, const std::string& x);

}  // namespace spillway::onnx::internal
