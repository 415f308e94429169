#include "onnx/importer.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "support/status_macros.h"

namespace spillway::onnx {
namespace {

using ::onnx::AttributeProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

constexpr int64_t kMinOpset = 11;
constexpr int64_t kMaxOpset = 17;

// NCHW axis -> NHWC axis of a 4-D activation.
int64_t NhwcAxis(int64_t nchw_axis) {
  constexpr int64_t kMap[] = {0, 3, 1, 2};
  return kMap[nchw_axis];
}

ir::Shape NchwToNhwc(const ir::Shape& s) { return {s[0], s[2], s[3], s[1]}; }
ir::Shape NhwcToNchw(const ir::Shape& s) { return {s[0], s[3], s[1], s[2]}; }

// A tensor whose value the importer knows: an initializer, a Constant node's
// value or folded shape arithmetic. Integers and floats are kept apart so
// that int64 shapes stay exact.
struct Constant {
  bool is_float = false;
  ir::Shape shape;  // ONNX order
  std::vector<float> floats;
  std::vector<int64_t> ints;

  int64_t size() const { return static_cast<int64_t>(is_float ? floats.size() : ints.size()); }
};

// What an ONNX value name stands for while importing.
struct Entry {
  ir::ValueId value = ir::kInvalidValue;  // the IR value, once there is one
  bool nhwc = false;                      // a 4-D activation: IR NHWC, ONNX NCHW
  std::optional<Constant> constant;
  bool initializer = false;  // materialized as a parameter or buffer when read as data
  std::string unavailable;   // why a value the importer does not produce cannot be read
};

// A node the importer cannot take: reported with all others at the end.
struct Unsupported {
  std::string reason;
};

template <typename T>
std::vector<std::byte> ToBytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

absl::StatusOr<Constant> ReadTensor(const TensorProto& tensor) {
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    return absl::UnimplementedError(fmt::format(
        "tensor '{}' is stored as external data, which is not supported yet", tensor.name()));
  }
  Constant c;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0)
      return absl::InvalidArgumentError(
          fmt::format("tensor '{}' has a negative dimension", tensor.name()));
    c.shape.push_back(dim);
  }
  const std::optional<int64_t> count = ir::NumElements(c.shape);
  if (!count)
    return absl::InvalidArgumentError(fmt::format("tensor '{}' is too large", tensor.name()));
  const std::string& raw = tensor.raw_data();
  auto check_size = [&](int64_t have) -> absl::Status {
    if (have != *count) {
      return absl::InvalidArgumentError(fmt::format("tensor '{}' of shape {} has {} values",
                                                    tensor.name(), ir::ShapeToString(c.shape),
                                                    have));
    }
    return absl::OkStatus();
  };
  switch (tensor.data_type()) {
    case TensorProto::FLOAT:
      c.is_float = true;
      if (tensor.has_raw_data()) {
        RETURN_IF_ERROR(check_size(static_cast<int64_t>(raw.size() / sizeof(float))));
        if (raw.size() % sizeof(float) != 0) return absl::InvalidArgumentError("ragged raw_data");
        c.floats.resize(raw.size() / sizeof(float));
        std::memcpy(c.floats.data(), raw.data(), raw.size());
      } else {
        c.floats.assign(tensor.float_data().begin(), tensor.float_data().end());
        RETURN_IF_ERROR(check_size(c.size()));
      }
      return c;
    case TensorProto::INT64:
      if (tensor.has_raw_data()) {
        RETURN_IF_ERROR(check_size(static_cast<int64_t>(raw.size() / sizeof(int64_t))));
        if (raw.size() % sizeof(int64_t) != 0) return absl::InvalidArgumentError("ragged raw_data");
        c.ints.resize(raw.size() / sizeof(int64_t));
        std::memcpy(c.ints.data(), raw.data(), raw.size());
      } else {
        c.ints.assign(tensor.int64_data().begin(), tensor.int64_data().end());
        RETURN_IF_ERROR(check_size(c.size()));
      }
      return c;
    case TensorProto::BOOL:
      if (tensor.has_raw_data()) {
        RETURN_IF_ERROR(check_size(static_cast<int64_t>(raw.size())));
        for (char byte : raw) c.ints.push_back(byte != 0 ? 1 : 0);
      } else {
        c.ints.assign(tensor.int32_data().begin(), tensor.int32_data().end());
        RETURN_IF_ERROR(check_size(c.size()));
      }
      return c;
    case TensorProto::INT32:
      if (tensor.has_raw_data()) {
        RETURN_IF_ERROR(check_size(static_cast<int64_t>(raw.size() / sizeof(int32_t))));
        if (raw.size() % sizeof(int32_t) != 0) return absl::InvalidArgumentError("ragged raw_data");
        std::vector<int32_t> values(raw.size() / sizeof(int32_t));
        std::memcpy(values.data(), raw.data(), raw.size());
        c.ints.assign(values.begin(), values.end());
      } else {
        c.ints.assign(tensor.int32_data().begin(), tensor.int32_data().end());
        RETURN_IF_ERROR(check_size(c.size()));
      }
      return c;
    default:
      return absl::UnimplementedError(fmt::format(
          "tensor '{}' has element type {}; only float, int64, int32 and bool are supported",
          tensor.name(), TensorProto::DataType_Name(tensor.data_type())));
  }
}

class Importer {
 public:
  Importer(const ModelProto& model, int64_t opset, const ImportOptions& options)
      : model_(model), opset_(opset), options_(options), next_seed_(options.first_seed) {
    if (!model.graph().name().empty()) result_.graph = ir::Graph(model.graph().name());
  }

  absl::StatusOr<ImportedModel> Run();

 private:
  // Converts one node; an Unsupported result names why the node cannot be taken.
  absl::StatusOr<std::optional<Unsupported>> Convert(const NodeProto& node);

  absl::Status AddGraphInputs();
  absl::Status AddGraphOutputs();

  // The entry of an input name; nullptr for an omitted optional input ("").
  const Entry* Find(const NodeProto& node, int index) const;
  // The IR value of a data input; initializers and constants are made graph
  // inputs of `kind` (parameters unless told otherwise).
  absl::StatusOr<ir::ValueId> Data(const NodeProto& node, int index,
                                   ir::ValueKind kind = ir::ValueKind::kParameter);
  const Constant* ConstantInput(const NodeProto& node, int index) const;

  absl::StatusOr<ir::ValueId> AddNode(const NodeProto& node, ir::OpKind op,
                                      std::vector<ir::ValueId> inputs, ir::AttrMap attrs);
  void Define(const std::string& name, ir::ValueId value, bool nhwc);
  void DefineConstant(const std::string& name, Constant constant);
  // `name` stands for what `entry` stands for (Identity, inference-mode Dropout).
  void Alias(const std::string& name, Entry entry) { entries_[name] = std::move(entry); }
  std::string NodeName(const NodeProto& node) const;
  // The ONNX shape of a defined entry.
  ir::Shape OnnxShape(const Entry& entry) const;

  const ModelProto& model_;
  int64_t opset_;
  const ImportOptions& options_;
  int64_t next_seed_;
  ImportedModel result_;
  // Node-based: Convert holds references to entries while it defines others.
  absl::node_hash_map<std::string, Entry> entries_;
};

const AttributeProto* FindAttr(const NodeProto& node, std::string_view name) {
  for (const AttributeProto& attr : node.attribute()) {
    if (attr.name() == name) return &attr;
  }
  return nullptr;
}

int64_t IntAttr(const NodeProto& node, std::string_view name, int64_t fallback) {
  const AttributeProto* attr = FindAttr(node, name);
  return attr ? attr->i() : fallback;
}

float FloatAttr(const NodeProto& node, std::string_view name, float fallback) {
  const AttributeProto* attr = FindAttr(node, name);
  return attr ? attr->f() : fallback;
}

std::optional<ir::IntList> IntsAttr(const NodeProto& node, std::string_view name) {
  const AttributeProto* attr = FindAttr(node, name);
  if (!attr) return std::nullopt;
  return ir::IntList(attr->ints().begin(), attr->ints().end());
}

std::string StringAttr(const NodeProto& node, std::string_view name, std::string fallback) {
  const AttributeProto* attr = FindAttr(node, name);
  return attr ? attr->s() : fallback;
}

const absl::flat_hash_set<std::string>& SupportedOpTypes() {
  static const absl::flat_hash_set<std::string>* const kTypes =
      new absl::flat_hash_set<std::string>{"Conv",        "BatchNormalization",
                                           "Relu",        "MaxPool",
                                           "AveragePool", "GlobalAveragePool",
                                           "Add",         "Mul",
                                           "Concat",      "Flatten",
                                           "Gemm",        "MatMul",
                                           "Reshape",     "Softmax",
                                           "LogSoftmax",  "Dropout",
                                           "Identity",    "Constant",
                                           "Shape",       "Gather",
                                           "Unsqueeze",   "Cast"};
  return *kTypes;
}

std::optional<Unsupported> Refuse(std::string reason) { return Unsupported{std::move(reason)}; }

std::string Importer::NodeName(const NodeProto& node) const {
  if (!node.name().empty()) return node.name();
  return node.output_size() > 0 ? node.output(0) : node.op_type();
}

const Entry* Importer::Find(const NodeProto& node, int index) const {
  if (index >= node.input_size() || node.input(index).empty()) return nullptr;
  auto it = entries_.find(node.input(index));
  return it == entries_.end() ? nullptr : &it->second;
}

const Constant* Importer::ConstantInput(const NodeProto& node, int index) const {
  const Entry* entry = Find(node, index);
  return entry && entry->constant ? &*entry->constant : nullptr;
}

ir::Shape Importer::OnnxShape(const Entry& entry) const {
  if (entry.constant) return entry.constant->shape;
  const ir::Shape& shape = result_.graph.value(entry.value).type.shape;
  return entry.nhwc ? NhwcToNchw(shape) : shape;
}

absl::StatusOr<ir::ValueId> Importer::Data(const NodeProto& node, int index, ir::ValueKind kind) {
  if (Find(node, index) == nullptr) {
    return absl::InvalidArgumentError(fmt::format("input {} is missing", index));
  }
  const std::string& name = node.input(index);
  Entry& entry = entries_.at(name);
  if (entry.value != ir::kInvalidValue) return entry.value;
  if (!entry.constant) return absl::InvalidArgumentError(fmt::format("'{}' has no value", name));
  const Constant& c = *entry.constant;
  if (!c.is_float) {
    return absl::UnimplementedError(
        fmt::format("integer constant '{}' used as data (only as shapes and indices)", name));
  }
  // A constant that is no initializer (a Constant node's value) is not trained.
  if (!entry.initializer) kind = ir::ValueKind::kBuffer;
  entry.value = result_.graph.AddInput(name, ir::F32(c.shape), kind);
  result_.initial_values[result_.graph.value(entry.value).name] = ToBytes(c.floats);
  return entry.value;
}

absl::StatusOr<ir::ValueId> Importer::AddNode(const NodeProto& node, ir::OpKind op,
                                              std::vector<ir::ValueId> inputs, ir::AttrMap attrs) {
  return result_.graph.AddNode(op, std::move(inputs), std::move(attrs), NodeName(node));
}

void Importer::Define(const std::string& name, ir::ValueId value, bool nhwc) {
  Entry& entry = entries_[name];
  entry.value = value;
  entry.nhwc = nhwc;
}

void Importer::DefineConstant(const std::string& name, Constant constant) {
  entries_[name].constant = std::move(constant);
}

absl::Status Importer::AddGraphInputs() {
  for (const TensorProto& init : model_.graph().initializer()) {
    ASSIGN_OR_RETURN(Constant c, ReadTensor(init));
    Entry& entry = entries_[init.name()];
    entry.constant = std::move(c);
    entry.initializer = true;
  }
  for (const ::onnx::ValueInfoProto& input : model_.graph().input()) {
    if (entries_.contains(input.name())) continue;  // IR version < 4 lists initializers too
    const ::onnx::TypeProto& type = input.type();
    if (!type.has_tensor_type()) {
      return absl::UnimplementedError(fmt::format("input '{}' is not a tensor", input.name()));
    }
    // ImportModel has written --input-shape and --batch into the file's shapes.
    ir::Shape shape;
    for (const ::onnx::TensorShapeProto::Dimension& dim : type.tensor_type().shape().dim()) {
      if (!dim.has_dim_value()) {
        return absl::InvalidArgumentError(fmt::format(
            "input '{}' has an unknown dimension{}; give its shape with --input-shape {}=...",
            input.name(), dim.has_dim_param() ? fmt::format(" '{}'", dim.dim_param()) : "",
            input.name()));
      }
      shape.push_back(dim.dim_value());
    }
    ir::TensorType ir_type;
    const bool nhwc = shape.size() == 4;
    switch (type.tensor_type().elem_type()) {
      case TensorProto::FLOAT:
        ir_type = nhwc ? ir::Activation(NchwToNhwc(shape)) : ir::F32(shape);
        break;
      case TensorProto::INT64:
        ir_type = ir::I64(shape);
        break;
      default:
        return absl::UnimplementedError(fmt::format(
            "input '{}' has element type {}; only float and int64 are supported", input.name(),
            TensorProto::DataType_Name(
                static_cast<TensorProto::DataType>(type.tensor_type().elem_type()))));
    }
    if (!ir_type.Bytes()) {
      return absl::InvalidArgumentError(fmt::format("input '{}' of shape {} is too large",
                                                    input.name(), ir::ShapeToString(shape)));
    }
    Define(input.name(), result_.graph.AddInput(input.name(), ir_type),
           nhwc && ir_type.dtype == ir::DType::kF32);
  }
  return absl::OkStatus();
}

absl::Status Importer::AddGraphOutputs() {
  std::vector<ir::ValueId> outputs;
  for (const ::onnx::ValueInfoProto& output : model_.graph().output()) {
    auto it = entries_.find(output.name());
    if (it == entries_.end() || it->second.value == ir::kInvalidValue) {
      return absl::UnimplementedError(
          fmt::format("output '{}' is not computed by a supported node", output.name()));
    }
    outputs.push_back(it->second.value);
  }
  if (options_.loss == LossKind::kNone) {
    for (ir::ValueId value : outputs) result_.graph.AddOutput(value);
    return absl::OkStatus();
  }
  if (outputs.size() != 1) {
    return absl::InvalidArgumentError(fmt::format(
        "--loss cross-entropy needs a model with one output (the logits); this one has {}",
        outputs.size()));
  }
  const ir::TensorType& logits = result_.graph.value(outputs[0]).type;
  if (logits.rank() != 2) {
    return absl::InvalidArgumentError(
        fmt::format("--loss cross-entropy needs logits [N, classes]; the output is {}",
                    ir::TypeToString(logits)));
  }
  const ir::ValueId labels = result_.graph.AddInput("labels", ir::I64({logits.shape[0]}));
  ASSIGN_OR_RETURN(const ir::NodeId loss, result_.graph.AddNode(ir::OpKind::kCrossEntropyLoss,
                                                                {outputs[0], labels}, {}, "loss"));
  result_.graph.AddOutput(result_.graph.node(loss).outputs[0]);
  return absl::OkStatus();
}

absl::StatusOr<ImportedModel> Importer::Run() {
  RETURN_IF_ERROR(AddGraphInputs());
  std::vector<std::string> unsupported;
  for (const NodeProto& node : model_.graph().node()) {
    const std::string where =
        fmt::format("node '{}' ({}, opset {})", NodeName(node), node.op_type(), opset_);
    std::optional<Unsupported> refusal;
    bool skipped = false;  // an input comes from a node already reported
    for (int i = 0; i < node.input_size() && !refusal; ++i) {
      if (node.input(i).empty()) continue;
      auto it = entries_.find(node.input(i));
      if (it == entries_.end()) {
        skipped = true;
      } else if (!it->second.unavailable.empty()) {
        refusal = Unsupported{it->second.unavailable};
      }
    }
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      refusal = Unsupported{fmt::format("domain '{}' is not supported", node.domain())};
    }
    if (!refusal && !SupportedOpTypes().contains(node.op_type())) {
      refusal = Unsupported{"op type not supported (see docs/onnx.md)"};
    }
    // A node downstream of an unsupported one is reported only for its own op type.
    if (!refusal && !skipped) {
      absl::StatusOr<std::optional<Unsupported>> converted = Convert(node);
      if (absl::IsUnimplemented(converted.status())) {
        refusal = Unsupported{std::string(StatusMessage(converted.status()))};
      } else if (!converted.ok()) {
        return Annotate(converted.status(), where);
      } else {
        refusal = *std::move(converted);
      }
    }
    if (refusal) unsupported.push_back(fmt::format("{}: {}", where, refusal->reason));
  }
  if (!unsupported.empty()) {
    return absl::UnimplementedError(
        fmt::format("{} unsupported node{} in the ONNX model:\n  {}", unsupported.size(),
                    unsupported.size() == 1 ? "" : "s", fmt::join(unsupported, "\n  ")));
  }
  RETURN_IF_ERROR(AddGraphOutputs());
  return std::move(result_);
}

}  // namespace

namespace {

// Constant folding helpers over 1-D integer shapes.
Constant FoldedInts(ir::Shape shape, std::vector<int64_t> ints) {
  Constant c;
  c.shape = std::move(shape);
  c.ints = std::move(ints);
  return c;
}

}  // namespace

namespace {

absl::StatusOr<std::optional<Unsupported>> Importer::Convert(const NodeProto& node) {
  const std::string& type = node.op_type();
  if (node.output_size() == 0 || node.output(0).empty()) {
    return absl::InvalidArgumentError("the node has no output");
  }
  const std::string& out = node.output(0);
  auto input = [&](int i) -> const Entry* { return Find(node, i); };
  auto is_nhwc = [&](int i) { return input(i) && input(i)->nhwc; };
  // Every output past the first that a later node could read is marked so.
  auto outputs_unavailable = [&](int from, const std::string& why) {
    for (int i = from; i < node.output_size(); ++i) {
      if (!node.output(i).empty()) entries_[node.output(i)].unavailable = why;
    }
  };
  auto all_constant = [&] {
    for (int i = 0; i < node.input_size(); ++i) {
      if (!node.input(i).empty() && !ConstantInput(node, i)) return false;
    }
    return true;
  };

  // Every op but Constant reads input 0; the binary ones input 1 too.
  const int required =
      type == "Constant" ? 0
      : (type == "Conv" || type == "Add" || type == "Mul" || type == "Gemm" || type == "MatMul" ||
         type == "Gather" || type == "Reshape" || type == "BatchNormalization")
          ? 2
          : 1;
  for (int i = 0; i < required; ++i) {
    if (input(i) == nullptr)
      return absl::InvalidArgumentError(fmt::format("input {} is missing", i));
  }

  // Shape arithmetic, folded.
  if (type == "Constant") {
    const AttributeProto* attr = nullptr;
    for (const AttributeProto& a : node.attribute()) attr = &a;
    if (attr == nullptr) return absl::InvalidArgumentError("Constant without a value");
    Constant c;
    if (attr->name() == "value") {
      ASSIGN_OR_RETURN(c, ReadTensor(attr->t()));
    } else if (attr->name() == "value_float") {
      c.is_float = true;
      c.floats = {attr->f()};
    } else if (attr->name() == "value_floats") {
      c.is_float = true;
      c.floats.assign(attr->floats().begin(), attr->floats().end());
      c.shape = {c.size()};
    } else if (attr->name() == "value_int") {
      c.ints = {attr->i()};
    } else if (attr->name() == "value_ints") {
      c.ints.assign(attr->ints().begin(), attr->ints().end());
      c.shape = {c.size()};
    } else {
      return Refuse(fmt::format("Constant attribute '{}' is not supported", attr->name()));
    }
    DefineConstant(out, std::move(c));
    return std::nullopt;
  }
  if (type == "Shape") {
    const ir::Shape shape = OnnxShape(*input(0));
    const auto rank = static_cast<int64_t>(shape.size());
    auto clamp = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
    const int64_t start = clamp(IntAttr(node, "start", 0));
    const int64_t end = clamp(IntAttr(node, "end", rank));
    std::vector<int64_t> dims;
    for (int64_t i = start; i < end; ++i) dims.push_back(shape[static_cast<size_t>(i)]);
    DefineConstant(out, FoldedInts({static_cast<int64_t>(dims.size())}, dims));
    return std::nullopt;
  }
  if (type == "Gather" || type == "Unsqueeze" || type == "Cast" ||
      (type == "Concat" && all_constant())) {
    if (!all_constant()) {
      if (type == "Cast" && input(0)->value != ir::kInvalidValue) {
        const ir::DType dtype = result_.graph.value(input(0)->value).type.dtype;
        const int64_t to = IntAttr(node, "to", 0);
        if ((to == TensorProto::FLOAT && dtype == ir::DType::kF32) ||
            (to == TensorProto::INT64 && dtype == ir::DType::kI64)) {
          Define(out, input(0)->value, input(0)->nhwc);
          return std::nullopt;
        }
      }
      return Refuse("only folded over constant inputs (shape arithmetic)");
    }
    const Constant& x = entries_.at(node.input(0)).constant.value();
    if (type == "Cast") {
      Constant c = x;
      const int64_t to = IntAttr(node, "to", 0);
      if (to == TensorProto::FLOAT && !x.is_float) {
        c.is_float = true;
        c.floats.assign(x.ints.begin(), x.ints.end());
        c.ints.clear();
      } else if ((to == TensorProto::INT64 || to == TensorProto::INT32) && x.is_float) {
        c.is_float = false;
        for (float f : x.floats) c.ints.push_back(static_cast<int64_t>(f));
        c.floats.clear();
      } else if (to != TensorProto::FLOAT && to != TensorProto::INT64 && to != TensorProto::INT32) {
        return Refuse("Cast to a type other than float, int64 or int32");
      }
      DefineConstant(out, std::move(c));
      return std::nullopt;
    }
    if (x.is_float || x.shape.size() > 1) {
      return Refuse("folding supports 1-D integer tensors (shapes) only");
    }
    if (type == "Gather") {
      const Constant& indices = entries_.at(node.input(1)).constant.value();
      if (IntAttr(node, "axis", 0) != 0 || indices.is_float || indices.shape.size() > 1) {
        return Refuse("folding supports gathering scalars or 1-D indices from a shape");
      }
      std::vector<int64_t> picked;
      for (int64_t i : indices.ints) {
        const int64_t n = x.size();
        if (i < -n || i >= n) return absl::InvalidArgumentError("Gather index out of range");
        picked.push_back(x.ints[static_cast<size_t>(i < 0 ? i + n : i)]);
      }
      DefineConstant(out, FoldedInts(indices.shape, std::move(picked)));
      return std::nullopt;
    }
    if (type == "Unsqueeze") {
      std::optional<ir::IntList> axes = IntsAttr(node, "axes");
      if (const Constant* a = ConstantInput(node, 1)) axes = a->ints;
      if (!axes || axes->size() != 1 || (*axes)[0] != 0 || !x.shape.empty()) {
        return Refuse("folding supports unsqueezing a scalar at axis 0 only");
      }
      DefineConstant(out, FoldedInts({1}, x.ints));
      return std::nullopt;
    }
    // Concat of shapes.
    std::vector<int64_t> joined;
    for (int i = 0; i < node.input_size(); ++i) {
      const Constant& part = entries_.at(node.input(i)).constant.value();
      if (part.is_float || part.shape.size() != 1)
        return Refuse("folding concatenates 1-D shapes only");
      joined.insert(joined.end(), part.ints.begin(), part.ints.end());
    }
    DefineConstant(out, FoldedInts({static_cast<int64_t>(joined.size())}, std::move(joined)));
    return std::nullopt;
  }
  if (type == "Identity") {
    Alias(out, *input(0));
    return std::nullopt;
  }

  // Every other op reads activations.
  if (type == "Conv") {
    if (!is_nhwc(0)) return Refuse("only 2-D convolutions over NCHW activations are supported");
    const Constant* w = ConstantInput(node, 1);
    if (!w || !w->is_float || w->shape.size() != 4) {
      return Refuse("the weight must be a 4-D float initializer");
    }
    const std::string auto_pad = StringAttr(node, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") {
      return Refuse(
          fmt::format("auto_pad {} is not supported; export with explicit pads", auto_pad));
    }
    // OIHW -> OHWI.
    const int64_t o = w->shape[0], c = w->shape[1], kh = w->shape[2], kw = w->shape[3];
    std::vector<float> ohwi(w->floats.size());
    for (int64_t oi = 0; oi < o; ++oi) {
      for (int64_t ci = 0; ci < c; ++ci) {
        for (int64_t h = 0; h < kh; ++h) {
          for (int64_t x = 0; x < kw; ++x) {
            ohwi[static_cast<size_t>(((oi * kh + h) * kw + x) * c + ci)] =
                w->floats[static_cast<size_t>(((oi * c + ci) * kh + h) * kw + x)];
          }
        }
      }
    }
    Entry& weight = entries_.at(node.input(1));
    if (weight.value == ir::kInvalidValue) {
      const ir::ValueKind kind =
          weight.initializer ? ir::ValueKind::kParameter : ir::ValueKind::kBuffer;
      weight.value = result_.graph.AddInput(node.input(1), ir::F32({o, kh, kw, c}), kind);
      result_.initial_values[result_.graph.value(weight.value).name] = ToBytes(ohwi);
    } else if (result_.graph.value(weight.value).type.shape != ir::Shape{o, kh, kw, c}) {
      return Refuse("the weight is shared with a node that reads it in another layout");
    }
    std::vector<ir::ValueId> inputs = {input(0)->value, weight.value};
    if (input(2)) {
      ASSIGN_OR_RETURN(ir::ValueId bias, Data(node, 2));
      inputs.push_back(bias);
    }
    ir::AttrMap attrs;
    attrs.Set("strides", IntsAttr(node, "strides").value_or(ir::IntList{1, 1}));
    attrs.Set("dilations", IntsAttr(node, "dilations").value_or(ir::IntList{1, 1}));
    attrs.Set("pads", IntsAttr(node, "pads").value_or(ir::IntList{0, 0, 0, 0}));
    attrs.Set("groups", IntAttr(node, "group", 1));
    ASSIGN_OR_RETURN(ir::NodeId id, AddNode(node, ir::OpKind::kConv2d, inputs, std::move(attrs)));
    Define(out, result_.graph.node(id).outputs[0], true);
    return std::nullopt;
  }
  if (type == "BatchNormalization") {
    const bool training =
        opset_ >= 14 ? IntAttr(node, "training_mode", 0) != 0 : node.output_size() > 1;
    if (!input(0)->nhwc && OnnxShape(*input(0)).size() != 2) {
      return Refuse("batch normalization over 4-D or 2-D activations only");
    }
    std::vector<ir::ValueId> inputs = {input(0)->value};
    for (int i = 1; i <= 4; ++i) {
      ASSIGN_OR_RETURN(ir::ValueId v,
                       Data(node, i, i <= 2 ? ir::ValueKind::kParameter : ir::ValueKind::kBuffer));
      inputs.push_back(v);
    }
    ir::AttrMap attrs;
    attrs.Set("training", training);
    attrs.Set("epsilon", static_cast<double>(FloatAttr(node, "epsilon", 1e-5f)));
    // ONNX keeps `momentum` of the old statistics, PyTorch and the IR take it of the new.
    attrs.Set("momentum", 1.0 - static_cast<double>(FloatAttr(node, "momentum", 0.9f)));
    ASSIGN_OR_RETURN(ir::NodeId id,
                     AddNode(node, ir::OpKind::kBatchNorm, inputs, std::move(attrs)));
    const ir::Node& bn = result_.graph.node(id);
    Define(out, bn.outputs[0], input(0)->nhwc);
    if (training) {
      // ONNX's running mean and variance are the IR's outputs 3 and 4.
      for (int i = 1; i <= 2 && i < node.output_size(); ++i) {
        if (!node.output(i).empty())
          Define(node.output(i), bn.outputs[static_cast<size_t>(i + 2)], false);
      }
      outputs_unavailable(3,
                          "reads batch normalization's saved statistics, which are not imported");
    }
    return std::nullopt;
  }
  if (type == "Relu") {
    ASSIGN_OR_RETURN(ir::ValueId x, Data(node, 0));
    ASSIGN_OR_RETURN(ir::NodeId id, AddNode(node, ir::OpKind::kRelu, {x}, {}));
    Define(out, result_.graph.node(id).outputs[0], is_nhwc(0));
    return std::nullopt;
  }
  if (type == "MaxPool" || type == "AveragePool") {
    if (!is_nhwc(0)) return Refuse("only 2-D pooling over NCHW activations is supported");
    if (IntAttr(node, "ceil_mode", 0) != 0) return Refuse("ceil_mode=1 is not supported");
    const std::string auto_pad = StringAttr(node, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") {
      return Refuse(
          fmt::format("auto_pad {} is not supported; export with explicit pads", auto_pad));
    }
    if (const std::optional<ir::IntList> d = IntsAttr(node, "dilations");
        d && *d != ir::IntList{1, 1}) {
      return Refuse("dilated pooling is not supported");
    }
    if (node.output_size() > 1 && !node.output(1).empty()) {
      outputs_unavailable(1, "reads MaxPool's indices, which are not supported");
    }
    ir::AttrMap attrs;
    const std::optional<ir::IntList> kernel = IntsAttr(node, "kernel_shape");
    if (!kernel) return absl::InvalidArgumentError("kernel_shape is missing");
    attrs.Set("kernel", *kernel);
    attrs.Set("strides", IntsAttr(node, "strides").value_or(ir::IntList{1, 1}));
    attrs.Set("pads", IntsAttr(node, "pads").value_or(ir::IntList{0, 0, 0, 0}));
    ir::OpKind op = ir::OpKind::kMaxPool;
    if (type == "AveragePool") {
      op = ir::OpKind::kAvgPool;
      attrs.Set("count_include_pad", IntAttr(node, "count_include_pad", 0) != 0);
    }
    ASSIGN_OR_RETURN(ir::NodeId id, AddNode(node, op, {input(0)->value}, std::move(attrs)));
    Define(out, result_.graph.node(id).outputs[0], true);
    return std::nullopt;
  }
  if (type == "GlobalAveragePool") {
    if (!is_nhwc(0)) return Refuse("only 2-D pooling over NCHW activations is supported");
    ASSIGN_OR_RETURN(ir::NodeId id,
                     AddNode(node, ir::OpKind::kGlobalAvgPool, {input(0)->value}, {}));
    Define(out, result_.graph.node(id).outputs[0], true);
    return std::nullopt;
  }
  if (type == "Add" || type == "Mul") {
    // Broadcasting against a 4-D activation would need the other operand in
    // NHWC order too; same shapes and single values need nothing.
    const ir::Shape a = OnnxShape(*input(0));
    const ir::Shape b = OnnxShape(*input(1));
    const bool single = ir::NumElements(a) == 1 || ir::NumElements(b) == 1;
    if ((a.size() == 4 || b.size() == 4) && a != b && !single) {
      return Refuse(fmt::format("broadcasting {} against {} over a 4-D activation is not supported",
                                ir::ShapeToString(a), ir::ShapeToString(b)));
    }
    ASSIGN_OR_RETURN(ir::ValueId x, Data(node, 0));
    ASSIGN_OR_RETURN(ir::ValueId y, Data(node, 1));
    ASSIGN_OR_RETURN(
        ir::NodeId id,
        AddNode(node, type == "Add" ? ir::OpKind::kAdd : ir::OpKind::kMul, {x, y}, {}));
    Define(out, result_.graph.node(id).outputs[0], is_nhwc(0) || is_nhwc(1));
    return std::nullopt;
  }
  if (type == "Concat") {
    std::vector<ir::ValueId> inputs;
    const size_t rank = OnnxShape(*input(0)).size();
    for (int i = 0; i < node.input_size(); ++i) {
      if (is_nhwc(i) != is_nhwc(0)) return Refuse("concatenating activations of different layouts");
      ASSIGN_OR_RETURN(ir::ValueId v, Data(node, i));
      inputs.push_back(v);
    }
    int64_t axis = IntAttr(node, "axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(rank);
    if (is_nhwc(0) && axis >= 0 && axis < 4) axis = NhwcAxis(axis);
    ir::AttrMap attrs;
    attrs.Set("axis", axis);
    ASSIGN_OR_RETURN(ir::NodeId id, AddNode(node, ir::OpKind::kConcat, inputs, std::move(attrs)));
    Define(out, result_.graph.node(id).outputs[0], is_nhwc(0));
    return std::nullopt;
  }
  if (type == "Flatten" || type == "Reshape") {
    const ir::Shape x = OnnxShape(*input(0));
    ir::Shape target;
    if (type == "Flatten") {
      int64_t axis = IntAttr(node, "axis", 1);
      if (axis < 0) axis += static_cast<int64_t>(x.size());
      if (axis < 0 || axis > static_cast<int64_t>(x.size())) {
        return absl::InvalidArgumentError("Flatten axis out of range");
      }
      const auto split = x.begin() + axis;
      target = {*ir::NumElements(ir::Shape(x.begin(), split)),
                *ir::NumElements(ir::Shape(split, x.end()))};
    } else {
      const Constant* shape = ConstantInput(node, 1);
      if (!shape || shape->is_float) return Refuse("the target shape must be a known constant");
      const bool allowzero = IntAttr(node, "allowzero", 0) != 0;
      for (size_t i = 0; i < shape->ints.size(); ++i) {
        int64_t dim = shape->ints[i];
        if (dim == 0 && !allowzero) {
          if (i >= x.size())
            return absl::InvalidArgumentError("Reshape copies a missing dimension");
          dim = x[i];
        }
        target.push_back(dim);
      }
    }
    // The NCHW and NHWC orders of a 4-D activation agree when its spatial
    // extent is 1 ([N,C,1,1] after a global pool); otherwise the elements
    // would have to be transposed first.
    if (is_nhwc(0) && x[2] * x[3] != 1) {
      return Refuse(
          fmt::format("{} of a 4-D activation {} with spatial extent > 1 needs an NCHW "
                      "transpose, which is not supported yet",
                      type, ir::ShapeToString(x)));
    }
    if (target.size() == 4) return Refuse("reshaping to a 4-D activation is not supported yet");
    ASSIGN_OR_RETURN(ir::ValueId v, Data(node, 0));
    ir::AttrMap attrs;
    attrs.Set("shape", target);
    ASSIGN_OR_RETURN(ir::NodeId id, AddNode(node, ir::OpKind::kReshape, {v}, std::move(attrs)));
    Define(out, result_.graph.node(id).outputs[0], false);
    return std::nullopt;
  }
  if (type == "Gemm" || type == "MatMul") {
    if (is_nhwc(0) || is_nhwc(1))
      return Refuse("matrix products of 4-D activations are not supported");
    const bool trans_a = IntAttr(node, "transA", 0) != 0;
    const bool trans_b = IntAttr(node, "transB", 0) != 0;
    const float alpha = FloatAttr(node, "alpha", 1.0f);
    const float beta = FloatAttr(node, "beta", 1.0f);
    const bool has_c = input(2) != nullptr;
    if (has_c && beta != 1.0f) return Refuse("Gemm with beta != 1 is not supported");
    ASSIGN_OR_RETURN(ir::ValueId a, Data(node, 0));
    ASSIGN_OR_RETURN(ir::ValueId b, Data(node, 1));
    const bool c_is_vector = has_c && OnnxShape(*input(2)).size() == 1;
    ir::NodeId id = ir::kNoNode;
    if (type == "Gemm" && trans_b && !trans_a && alpha == 1.0f && (!has_c || c_is_vector)) {
      // y = a·bᵀ + c with b [out, in]: a linear layer.
      std::vector<ir::ValueId> inputs = {a, b};
      if (has_c) {
        ASSIGN_OR_RETURN(ir::ValueId c, Data(node, 2));
        inputs.push_back(c);
      }
      ASSIGN_OR_RETURN(id, AddNode(node, ir::OpKind::kLinear, inputs, {}));
    } else {
      ir::AttrMap attrs;
      if (type == "Gemm") {
        attrs.Set("transpose_a", trans_a);
        attrs.Set("transpose_b", trans_b);
        attrs.Set("alpha", static_cast<double>(alpha));
      }
      ASSIGN_OR_RETURN(id, result_.graph.AddNode(ir::OpKind::kMatMul, {a, b}, std::move(attrs),
                                                 NodeName(node) + (has_c ? ".matmul" : "")));
      if (has_c) {
        ASSIGN_OR_RETURN(ir::ValueId c, Data(node, 2));
        ASSIGN_OR_RETURN(
            id, AddNode(node, ir::OpKind::kAdd, {result_.graph.node(id).outputs[0], c}, {}));
      }
    }
    Define(out, result_.graph.node(id).outputs[0], false);
    return std::nullopt;
  }
  if (type == "Softmax" || type == "LogSoftmax") {
    const auto rank = static_cast<int64_t>(OnnxShape(*input(0)).size());
    int64_t axis = IntAttr(node, "axis", opset_ >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("axis out of range");
    // Before opset 13 the input is coerced to 2-D at `axis`: the same as a
    // softmax over one axis only when that axis is the last.
    if (opset_ < 13 && axis != rank - 1) {
      return Refuse("before opset 13, softmax is supported over the last axis only");
    }
    if (is_nhwc(0)) axis = NhwcAxis(axis);
    ASSIGN_OR_RETURN(ir::ValueId x, Data(node, 0));
    ir::AttrMap attrs;
    attrs.Set("axis", axis);
    ASSIGN_OR_RETURN(
        ir::NodeId id,
        AddNode(node, type == "Softmax" ? ir::OpKind::kSoftmax : ir::OpKind::kLogSoftmax, {x},
                std::move(attrs)));
    Define(out, result_.graph.node(id).outputs[0], is_nhwc(0));
    return std::nullopt;
  }
  if (type == "Dropout") {
    double ratio = FloatAttr(node, "ratio", 0.5f);
    bool training = opset_ < 12;  // Dropout-10 is always training-mode in a training export
    if (opset_ >= 12) {
      if (input(1)) {
        const Constant* r = ConstantInput(node, 1);
        if (!r || !r->is_float || r->size() != 1) return Refuse("the ratio must be a constant");
        ratio = static_cast<double>(r->floats[0]);
      }
      if (input(2)) {
        const Constant* t = ConstantInput(node, 2);
        if (!t || t->size() != 1) return Refuse("training_mode must be a constant");
        training = t->is_float ? t->floats[0] != 0.0f : t->ints[0] != 0;
      }
    }
    outputs_unavailable(1, "reads Dropout's mask, which is not supported");
    if (!training || ratio == 0.0) {
      Alias(out, *input(0));
      return std::nullopt;
    }
    ASSIGN_OR_RETURN(ir::ValueId x, Data(node, 0));
    ir::AttrMap attrs;
    attrs.Set("p", ratio);
    attrs.Set("seed", next_seed_++);
    ASSIGN_OR_RETURN(ir::NodeId id, AddNode(node, ir::OpKind::kDropout, {x}, std::move(attrs)));
    Define(out, result_.graph.node(id).outputs[0], is_nhwc(0));
    return std::nullopt;
  }
  return Refuse("op type not supported (see docs/onnx.md)");
}

int64_t DefaultOpset(const ModelProto& model) {
  for (const ::onnx::OperatorSetIdProto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") return opset.version();
  }
  return -1;
}

}  // namespace

absl::StatusOr<ImportedModel> ImportModel(std::string_view bytes, const ImportOptions& options) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::UnimplementedError("ONNX models over 2 GiB are not supported");
  }
  ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("not an ONNX model: the bytes do not parse as a ModelProto");
  }
  if (!model.has_graph()) return absl::InvalidArgumentError("the ONNX model has no graph");
  const int64_t opset = DefaultOpset(model);
  if (opset < kMinOpset || opset > kMaxOpset) {
    return absl::UnimplementedError(fmt::format(
        "the model's opset is {}; opsets {} to {} are supported (re-export with opset_version)",
        opset, kMinOpset, kMaxOpset));
  }
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format("ONNX checker: {}", e.what()));
  }
  // Given shapes replace the file's; shapes inferred for the old ones would then conflict.
  for (const auto& [name, shape] : options.input_shapes) {
    ::onnx::ValueInfoProto* info = nullptr;
    for (::onnx::ValueInfoProto& input : *model.mutable_graph()->mutable_input()) {
      if (input.name() == name) info = &input;
    }
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("--input-shape: the model has no input '{}'", name));
    }
    ::onnx::TensorShapeProto* dims = info->mutable_type()->mutable_tensor_type()->mutable_shape();
    if (dims->dim_size() != 0 && dims->dim_size() != static_cast<int>(shape.size())) {
      return absl::InvalidArgumentError(fmt::format("--input-shape: input '{}' has rank {}, not {}",
                                                    name, dims->dim_size(), shape.size()));
    }
    dims->clear_dim();
    for (int64_t d : shape) dims->add_dim()->set_dim_value(d);
  }
  if (options.batch) {
    if (*options.batch <= 0) {
      return absl::InvalidArgumentError(
          fmt::format("the batch must be positive, got {}", *options.batch));
    }
    absl::flat_hash_set<std::string> initializers;
    for (const TensorProto& init : model.graph().initializer()) initializers.insert(init.name());
    for (::onnx::ValueInfoProto& input : *model.mutable_graph()->mutable_input()) {
      if (initializers.contains(input.name())) continue;
      ::onnx::TensorShapeProto* dims = input.mutable_type()->mutable_tensor_type()->mutable_shape();
      if (dims->dim_size() == 0) {
        return absl::InvalidArgumentError(fmt::format(
            "--batch: input '{}' is a scalar, so it has no batch dimension", input.name()));
      }
      dims->mutable_dim(0)->set_dim_value(*options.batch);
    }
  }
  if (!options.input_shapes.empty() || options.batch) {
    model.mutable_graph()->clear_value_info();
    for (::onnx::ValueInfoProto& output : *model.mutable_graph()->mutable_output()) {
      output.mutable_type()->mutable_tensor_type()->clear_shape();
    }
  }
  Importer importer(model, opset, options);
  ASSIGN_OR_RETURN(ImportedModel imported, importer.Run());
  // ONNX's shape inference cross-checks the file. It runs last because in
  // libonnx 1.12 it dereferences out of bounds on some inconsistent nodes (a
  // 2-D kernel over a 3-D input); the importer has refused those by now.
  try {
    ::onnx::shape_inference::InferShapes(model, ::onnx::OpSchemaRegistry::Instance(),
                                         ::onnx::ShapeInferenceOptions(/*check_type_val=*/true,
                                                                       /*strict_mode_val=*/1));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format("ONNX shape inference: {}", e.what()));
  }
  return imported;
}

absl::StatusOr<ImportedModel> ImportModelFile(const std::string& path,
                                              const ImportOptions& options) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(fmt::format("cannot open ONNX file '{}'", path));
  std::ostringstream bytes;
  bytes << file.rdbuf();
  if (!file && !file.eof()) return absl::DataLossError(fmt::format("cannot read '{}'", path));
  absl::StatusOr<ImportedModel> imported = ImportModel(bytes.str(), options);
  if (!imported.ok()) return Annotate(imported.status(), path);
  return imported;
}

absl::StatusOr<std::pair<std::string, ir::Shape>> ParseInputShape(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    return absl::InvalidArgumentError(
        fmt::format("--input-shape '{}': expected NAME=DxDx..., e.g. input=1x3x224x224", text));
  }
  ir::Shape shape;
  std::string_view dims = text.substr(eq + 1);
  while (true) {
    const size_t x = dims.find('x');
    const std::string_view part = dims.substr(0, x);
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (ec != std::errc() || end != part.data() + part.size() || value <= 0) {
      return absl::InvalidArgumentError(
          fmt::format("--input-shape '{}': '{}' is not a positive dimension", text, part));
    }
    shape.push_back(value);
    if (x == std::string_view::npos) break;
    dims = dims.substr(x + 1);
  }
  return std::make_pair(std::string(text.substr(0, eq)), std::move(shape));
}

}  // namespace spillway::onnx
