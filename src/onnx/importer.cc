#include "onnx/importer.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "onnx/checker.h"
#include "onnx/converter.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "support/check.h"
#include "support/file_io.h"
#include "support/status_macros.h"

namespace spillway::onnx {
namespace internal {

using ::onnx::AttributeProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

constexpr int64_t kMinOpset = 11;
constexpr int64_t kMaxOpset = 17;

int64_t NhwcAxis(int64_t nchw_axis) {
  constexpr int64_t kMap[] = {0, 3, 1, 2};
  return kMap[nchw_axis];
}

ir::Shape NchwToNhwc(const ir::Shape& s) { return {s[0], s[2], s[3], s[1]}; }
ir::Shape NhwcToNchw(const ir::Shape& s) { return {s[0], s[3], s[1], s[2]}; }

bool OrdersAgree(const ir::Shape& nchw) { return nchw[1] == 1 || nchw[2] * nchw[3] == 1; }

std::optional<double> Constant::Scalar() const {
  if (size() != 1) return std::nullopt;
  return is_float ? static_cast<double>(floats[0]) : static_cast<double>(ints[0]);
}

Constant FoldedInts(ir::Shape shape, std::vector<int64_t> ints) {
  Constant c;
  c.shape = std::move(shape);
  c.ints = std::move(ints);
  return c;
}

namespace {

template <typename T>
std::vector<std::byte> ToBytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

}  // namespace

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

const ConverterTable& Converters() {
  static const ConverterTable* const kTable = [] {
    auto* table = new ConverterTable;
    AddTensorConverters(*table);
    AddLayerConverters(*table);
    return table;
  }();
  return *kTable;
}

Importer::Importer(const ModelProto& model, int64_t opset, const ImportOptions& options)
    : model_(model), opset_(opset), options_(options), next_seed_(options.first_seed) {
  if (!model.graph().name().empty()) result_.graph = ir::Graph(model.graph().name());
}

std::string Importer::NodeName(const NodeProto& node) const {
  if (!node.name().empty()) return node.name();
  return node.output_size() > 0 ? node.output(0) : node.op_type();
}

const Entry* Importer::Find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

const Entry* Importer::Input(const NodeProto& node, int index) const {
  if (index >= node.input_size() || node.input(index).empty()) return nullptr;
  return Find(node.input(index));
}

bool Importer::IsNhwc(const NodeProto& node, int index) const {
  const Entry* entry = Input(node, index);
  return entry && entry->nhwc;
}

const Constant* Importer::ConstantInput(const NodeProto& node, int index) const {
  const Entry* entry = Input(node, index);
  return entry && entry->constant ? &*entry->constant : nullptr;
}

bool Importer::Foldable(const NodeProto& node, int index) const {
  const Entry* entry = Input(node, index);
  return entry && entry->constant && !(entry->initializer && entry->constant->is_float);
}

bool Importer::AllInputsFoldable(const NodeProto& node) const {
  for (int i = 0; i < node.input_size(); ++i) {
    if (!node.input(i).empty() && !Foldable(node, i)) return false;
  }
  return true;
}

ir::Shape Importer::InputShape(const NodeProto& node, int index) const {
  const Entry* found = Input(node, index);
  SPILLWAY_CHECK(found != nullptr, "InputShape of a missing input");
  return OnnxShapeOf(*found);
}

ir::Shape Importer::OnnxShapeOf(const Entry& entry) const {
  if (entry.constant) return entry.constant->shape;
  const ir::Shape& shape = result_.graph.value(entry.value).type.shape;
  return entry.nhwc ? NhwcToNchw(shape) : shape;
}

absl::StatusOr<ir::ValueId> Importer::Data(const NodeProto& node, int index, ir::ValueKind kind) {
  if (Input(node, index) == nullptr) {
    return absl::InvalidArgumentError(fmt::format("input {} is missing", index));
  }
  return DataNamed(node.input(index), kind);
}

absl::StatusOr<ir::ValueId> Importer::DataNamed(const std::string& name, ir::ValueKind kind) {
  if (Find(name) == nullptr)
    return absl::InvalidArgumentError(fmt::format("'{}' is undefined", name));
  Entry& entry = entries_.at(name);
  if (entry.value != ir::kInvalidValue) return entry.value;
  if (!entry.constant) return absl::InvalidArgumentError(fmt::format("'{}' has no value", name));
  const Constant& c = *entry.constant;
  if (!c.is_float) {
    return absl::UnimplementedError(
        fmt::format("integer constant '{}' used as data (only as shapes and indices)", name));
  }
  // A constant that is no initializer (a Constant node's value) is not trained.
  if (!entry.initializer || Frozen(name)) kind = ir::ValueKind::kBuffer;
  entry.value = result_.graph.AddInput(name, ir::F32(c.shape), kind);
  result_.initial_values[result_.graph.value(entry.value).name] = ToBytes(c.floats);
  return entry.value;
}

ir::ValueId Importer::Materialize(const std::string& name, ir::Shape shape,
                                  const std::vector<float>& values, bool ohwi) {
  Entry& entry = entries_.at(name);
  if (ohwi) result_.ohwi_initializers.insert(name);
  const ir::ValueKind kind =
      entry.initializer && !Frozen(name) ? ir::ValueKind::kParameter : ir::ValueKind::kBuffer;
  entry.value = result_.graph.AddInput(name, ir::F32(std::move(shape)), kind);
  result_.initial_values[result_.graph.value(entry.value).name] = ToBytes(values);
  return entry.value;
}

absl::StatusOr<ir::ValueId> Importer::DataInOnnxOrder(const NodeProto& node, int index) {
  ASSIGN_OR_RETURN(const ir::ValueId value, Data(node, index));
  if (!IsNhwc(node, index)) return value;
  const ir::Shape nchw = InputShape(node, index);
  ir::AttrMap attrs;
  if (OrdersAgree(nchw)) {
    attrs.Set("shape", nchw);
    return AddOp(node, ir::OpKind::kReshape, {value}, std::move(attrs),
                 fmt::format(".in{}_nchw", index));
  }
  attrs.Set("perm", ir::IntList{0, 3, 1, 2});
  return AddOp(node, ir::OpKind::kTranspose, {value}, std::move(attrs),
               fmt::format(".in{}_nchw", index));
}

ir::ValueId Importer::AddConstantBuffer(const std::string& name, ir::Shape shape,
                                        const std::vector<float>& values) {
  const ir::ValueId value =
      result_.graph.AddInput(name, ir::F32(std::move(shape)), ir::ValueKind::kBuffer);
  result_.initial_values[result_.graph.value(value).name] = ToBytes(values);
  return value;
}

absl::StatusOr<ir::NodeId> Importer::AddNode(const NodeProto& node, ir::OpKind op,
                                             std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                                             std::string_view suffix) {
  return result_.graph.AddNode(op, std::move(inputs), std::move(attrs),
                               NodeName(node) + std::string(suffix));
}

absl::StatusOr<ir::ValueId> Importer::AddOp(const NodeProto& node, ir::OpKind op,
                                            std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                                            std::string_view suffix) {
  ASSIGN_OR_RETURN(const ir::NodeId id,
                   AddNode(node, op, std::move(inputs), std::move(attrs), suffix));
  return result_.graph.node(id).outputs[0];
}

void Importer::Define(const std::string& name, ir::ValueId value, bool nhwc) {
  Entry& entry = entries_[name];
  entry.value = value;
  entry.nhwc = nhwc;
}

absl::Status Importer::DefineFromOnnxOrder(const NodeProto& node, const std::string& name,
                                           ir::ValueId value) {
  const ir::TensorType& type = result_.graph.value(value).type;
  if (type.rank() != 4 || type.dtype != ir::DType::kF32) {
    Define(name, value, false);
    return absl::OkStatus();
  }
  const ir::Shape nchw = type.shape;
  ir::AttrMap attrs;
  if (OrdersAgree(nchw)) {
    attrs.Set("shape", NchwToNhwc(nchw));
    attrs.Set("layout", std::string("nhwc"));
    ASSIGN_OR_RETURN(value, AddOp(node, ir::OpKind::kReshape, {value}, std::move(attrs), ".nhwc"));
  } else {
    attrs.Set("perm", ir::IntList{0, 2, 3, 1});
    attrs.Set("layout", std::string("nhwc"));
    ASSIGN_OR_RETURN(value,
                     AddOp(node, ir::OpKind::kTranspose, {value}, std::move(attrs), ".nhwc"));
  }
  Define(name, value, true);
  return absl::OkStatus();
}

absl::Status Importer::Alias(const std::string& name, const std::string& of) {
  const Entry& source = entries_.at(of);
  if (source.value == ir::kInvalidValue && source.initializer && source.constant &&
      source.constant->is_float) {
    RETURN_IF_ERROR(DataNamed(of).status());
  }
  Entry copy = entries_.at(of);
  entries_[name] = std::move(copy);
  return absl::OkStatus();
}

void Importer::DefineConstant(const std::string& name, Constant constant) {
  entries_[name].constant = std::move(constant);
}

void Importer::MarkOutputsUnavailable(const NodeProto& node, int from, const std::string& why) {
  for (int i = from; i < node.output_size(); ++i) {
    if (!node.output(i).empty()) entries_[node.output(i)].unavailable = why;
  }
}

bool Importer::Frozen(std::string_view name) const {
  return std::any_of(options_.frozen.begin(), options_.frozen.end(),
                     [name](const std::string& prefix) { return name.starts_with(prefix); });
}

absl::Status Importer::AddGraphInputs() {
  for (const std::string& prefix : options_.frozen) {
    const auto& inits = model_.graph().initializer();
    if (std::none_of(inits.begin(), inits.end(), [&prefix](const TensorProto& init) {
          return std::string_view(init.name()).starts_with(prefix);
        })) {
      return absl::InvalidArgumentError(
          fmt::format("--freeze '{}' matches no initializer of the model", prefix));
    }
  }
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
            "input '{}' has an unknown dimension{}; give its shape with --input-shape {}=... "
            "(or only the batch with --batch)",
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
  std::vector<const Entry*> outputs;
  for (const ::onnx::ValueInfoProto& output : model_.graph().output()) {
    auto it = entries_.find(output.name());
    if (it == entries_.end() || it->second.value == ir::kInvalidValue) {
      return absl::UnimplementedError(
          fmt::format("output '{}' is not computed by a supported node", output.name()));
    }
    outputs.push_back(&it->second);
  }
  if (options_.loss == LossKind::kNone) {
    for (const Entry* entry : outputs) result_.graph.AddOutput(entry->value);
    for (const ::onnx::ValueInfoProto& output : model_.graph().output()) {
      result_.output_names.push_back(output.name());
    }
    return absl::OkStatus();
  }
  if (outputs.size() != 1) {
    return absl::InvalidArgumentError(fmt::format(
        "--loss cross-entropy needs a model with one output (the logits); this one has {}",
        outputs.size()));
  }
  // Logits [N, classes] take labels [N]; per-pixel logits [N, classes, H, W]
  // (NHWC in the IR, classes last as the loss wants them) take labels [N, H, W].
  const ir::ValueId logits = outputs[0]->value;
  const ir::Shape& shape = result_.graph.value(logits).type.shape;
  ir::Shape label_shape;
  if (shape.size() == 2) {
    label_shape = {shape[0]};
  } else if (outputs[0]->nhwc) {
    label_shape = {shape[0], shape[1], shape[2]};
  } else {
    return absl::InvalidArgumentError(
        fmt::format("--loss cross-entropy needs logits [N, classes] or per-pixel logits "
                    "[N, classes, H, W]; the output is {}",
                    ir::ShapeToString(OnnxShapeOf(*outputs[0]))));
  }
  if (entries_.contains("labels")) {
    return absl::InvalidArgumentError(
        "--loss cross-entropy adds an input 'labels', but the model already has a value of "
        "that name");
  }
  const ir::ValueId labels = result_.graph.AddInput("labels", ir::I64(std::move(label_shape)));
  ASSIGN_OR_RETURN(const ir::NodeId loss, result_.graph.AddNode(ir::OpKind::kCrossEntropyLoss,
                                                                {logits, labels}, {}, "loss"));
  result_.graph.AddOutput(result_.graph.node(loss).outputs[0]);
  result_.output_names = {"loss"};
  return absl::OkStatus();
}

ConvertResult Importer::Convert(const NodeProto& node) {
  if (node.output_size() == 0 || node.output(0).empty()) {
    return absl::InvalidArgumentError("the node has no output");
  }
  const Converter& converter = Converters().at(node.op_type());
  for (int i = 0; i < converter.required_inputs; ++i) {
    if (Input(node, i) == nullptr) {
      return absl::InvalidArgumentError(fmt::format("input {} is missing", i));
    }
  }
  return converter.convert(*this, node);
}

absl::StatusOr<ImportedModel> Importer::Run() {
  RETURN_IF_ERROR(AddGraphInputs());
  const absl::flat_hash_map<int, GeluPattern> gelus = FindGeluPatterns(model_.graph());
  absl::flat_hash_set<int> fused;
  for (const auto& [last, pattern] : gelus)
    fused.insert(pattern.interior.begin(), pattern.interior.end());

  std::vector<std::string> unsupported;
  for (int index = 0; index < model_.graph().node_size(); ++index) {
    const NodeProto& node = model_.graph().node(index);
    if (fused.contains(index)) continue;
    const std::string where =
        fmt::format("node '{}' ({}, opset {})", NodeName(node), node.op_type(), opset_);
    std::optional<Unsupported> refusal;
    // A fused GELU reads only its x; the pattern's other values are never defined.
    const auto gelu = gelus.find(index);
    std::vector<std::string> reads(node.input().begin(), node.input().end());
    if (gelu != gelus.end()) reads = {gelu->second.x};
    bool skipped = false;  // an input comes from a node already reported
    for (const std::string& name : reads) {
      if (name.empty()) continue;
      auto it = entries_.find(name);
      if (it == entries_.end()) {
        skipped = true;
      } else if (!it->second.unavailable.empty() && !refusal) {
        refusal = Unsupported{it->second.unavailable};
      }
    }
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      refusal = Unsupported{fmt::format("domain '{}' is not supported", node.domain())};
    }
    if (!refusal && gelu == gelus.end() && !Converters().contains(node.op_type())) {
      refusal = Unsupported{node.op_type() == "Erf"
                                ? "Erf is supported only inside GELU's x·0.5·(1 + erf(x/√2))"
                                : "op type not supported (see docs/onnx.md)"};
    }
    // A node downstream of an unsupported one is reported only for its own op type.
    if (!refusal && !skipped) {
      ConvertResult converted =
          gelu != gelus.end() ? ConvertGelu(*this, node, gelu->second.x) : Convert(node);
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

namespace {

// Reads a tensor's values, stored as `Stored` in raw_data (little-endian, as
// ONNX writes it) or in the typed repeated field, into `out`.
template <typename Stored, typename Out, typename Field>
absl::Status ReadValues(const TensorProto& tensor, const Field& field, int64_t count,
                        std::vector<Out>& out) {
  if (tensor.has_raw_data()) {
    const std::string& raw = tensor.raw_data();
    if (raw.size() % sizeof(Stored) != 0) {
      return absl::InvalidArgumentError(
          fmt::format("tensor '{}' has {} bytes of raw_data, not a whole number of values",
                      tensor.name(), raw.size()));
    }
    if constexpr (std::is_same_v<Stored, Out>) {
      out.resize(raw.size() / sizeof(Stored));
      if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    } else {
      std::vector<Stored> stored(raw.size() / sizeof(Stored));
      if (!raw.empty()) std::memcpy(stored.data(), raw.data(), raw.size());
      out.assign(stored.begin(), stored.end());
    }
  } else {
    out.assign(field.begin(), field.end());
  }
  if (static_cast<int64_t>(out.size()) != count) {
    return absl::InvalidArgumentError(fmt::format(
        "tensor '{}' of shape {} has {} values", tensor.name(),
        ir::ShapeToString(ir::Shape(tensor.dims().begin(), tensor.dims().end())), out.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Constant> ReadTensor(const TensorProto& tensor) {
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    return absl::UnimplementedError(fmt::format(
        "tensor '{}' is stored as external data, which only initializers may be", tensor.name()));
  }
  Constant c;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          fmt::format("tensor '{}' has a negative dimension", tensor.name()));
    }
    c.shape.push_back(dim);
  }
  const std::optional<int64_t> count = ir::NumElements(c.shape);
  if (!count)
    return absl::InvalidArgumentError(fmt::format("tensor '{}' is too large", tensor.name()));
  c.is_float =
      tensor.data_type() == TensorProto::FLOAT || tensor.data_type() == TensorProto::DOUBLE;
  switch (tensor.data_type()) {
    case TensorProto::FLOAT:
      RETURN_IF_ERROR(ReadValues<float>(tensor, tensor.float_data(), *count, c.floats));
      return c;
    case TensorProto::DOUBLE:  // PyTorch's scalar constants; the IR computes in f32
      RETURN_IF_ERROR(ReadValues<double>(tensor, tensor.double_data(), *count, c.floats));
      return c;
    case TensorProto::INT64:
      RETURN_IF_ERROR(ReadValues<int64_t>(tensor, tensor.int64_data(), *count, c.ints));
      return c;
    case TensorProto::INT32:
      RETURN_IF_ERROR(ReadValues<int32_t>(tensor, tensor.int32_data(), *count, c.ints));
      return c;
    case TensorProto::BOOL:  // one byte per value in raw_data
      RETURN_IF_ERROR(ReadValues<uint8_t>(tensor, tensor.int32_data(), *count, c.ints));
      for (int64_t& value : c.ints) value = value != 0 ? 1 : 0;
      return c;
    default:
      return absl::UnimplementedError(
          fmt::format("tensor '{}' has element type {}; only float, double, int64, int32 and bool "
                      "are supported",
                      tensor.name(), TensorProto::DataType_Name(tensor.data_type())));
  }
}

namespace {

// Reads every initializer stored as external data into its raw_data, so
// that ONNX's checker (which would look for the files relative to the
// working directory) and the importer see one self-contained model.
absl::Status InlineExternalData(ModelProto& model, const std::string& dir) {
  for (TensorProto& tensor : *model.mutable_graph()->mutable_initializer()) {
    if (tensor.data_location() != TensorProto::EXTERNAL) continue;
    std::string location;
    int64_t offset = 0;
    std::optional<int64_t> length;
    for (const ::onnx::StringStringEntryProto& entry : tensor.external_data()) {
      const std::string& value = entry.value();
      int64_t number = 0;
      if (entry.key() == "offset" || entry.key() == "length") {
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
        if (ec != std::errc() || end != value.data() + value.size() || number < 0) {
          return absl::InvalidArgumentError(
              fmt::format("tensor '{}': external data {} '{}' is not a byte count", tensor.name(),
                          entry.key(), value));
        }
      }
      if (entry.key() == "location") location = value;
      if (entry.key() == "offset") offset = number;
      if (entry.key() == "length") length = number;
    }
    const std::filesystem::path relative(location);
    const bool escapes =
        std::any_of(relative.begin(), relative.end(),
                    [](const std::filesystem::path& part) { return part == ".."; });
    if (location.empty() || relative.is_absolute() || escapes) {
      return absl::InvalidArgumentError(fmt::format(
          "tensor '{}': external data location '{}' must be a path inside the model's directory",
          tensor.name(), location));
    }
    if (dir.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "tensor '{}' is stored as external data ('{}'): import the model from its file so "
          "that the data can be found next to it",
          tensor.name(), location));
    }
    const std::filesystem::path path = std::filesystem::path(dir) / relative;
    std::ifstream file(path, std::ios::binary);
    if (!file) {
      return absl::NotFoundError(fmt::format("tensor '{}': cannot open external data file '{}'",
                                             tensor.name(), path.string()));
    }
    file.seekg(0, std::ios::end);
    const auto file_size = static_cast<int64_t>(file.tellg());
    const int64_t count = length.value_or(file_size - offset);
    if (offset > file_size || count > file_size - offset) {
      return absl::DataLossError(fmt::format(
          "tensor '{}': external data file '{}' has {} bytes, fewer than offset {} + length {}",
          tensor.name(), path.string(), file_size, offset, count));
    }
    std::string bytes(static_cast<size_t>(count), '\0');
    file.seekg(offset);
    if (!file.read(bytes.data(), count)) {
      return absl::DataLossError(
          fmt::format("tensor '{}': cannot read '{}'", tensor.name(), path.string()));
    }
    tensor.set_raw_data(std::move(bytes));
    tensor.clear_external_data();
    tensor.set_data_location(TensorProto::DEFAULT);
  }
  return absl::OkStatus();
}

int64_t DefaultOpset(const ModelProto& model) {
  for (const ::onnx::OperatorSetIdProto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") return opset.version();
  }
  return -1;
}

}  // namespace
}  // namespace internal

using internal::Importer;
using ::onnx::ModelProto;
using ::onnx::TensorProto;

absl::StatusOr<ImportedModel> ImportModel(std::string_view bytes, const ImportOptions& options) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::UnimplementedError("ONNX models over 2 GiB are not supported");
  }
  ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("not an ONNX model: the bytes do not parse as a ModelProto");
  }
  if (!model.has_graph()) return absl::InvalidArgumentError("the ONNX model has no graph");
  const int64_t opset = internal::DefaultOpset(model);
  if (opset < internal::kMinOpset || opset > internal::kMaxOpset) {
    return absl::UnimplementedError(fmt::format(
        "the model's opset is {}; opsets {} to {} are supported (re-export with opset_version)",
        opset, internal::kMinOpset, internal::kMaxOpset));
  }
  RETURN_IF_ERROR(internal::InlineExternalData(model, options.external_data_dir));
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
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path, kMaxOnnxFileBytes, "ONNX file"));
  ImportOptions with_dir = options;
  if (with_dir.external_data_dir.empty()) {
    with_dir.external_data_dir = std::filesystem::path(path).parent_path().string();
    if (with_dir.external_data_dir.empty()) with_dir.external_data_dir = ".";
  }
  absl::StatusOr<ImportedModel> imported = ImportModel(bytes, with_dir);
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
