// Test helpers of the ONNX importer's tests: ONNX models built in code, as
// an exporter would write them, and shortcuts to import them.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "onnx/importer.h"
#include "onnx/onnx_pb.h"
#include "support/status_macros.h"

namespace spillway::onnx::testing {

using ::onnx::NodeProto;
using ::onnx::TensorProto;

// Builds an ONNX model in code, as an exporter would write it.
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13) {
    model_.set_ir_version(8);
    model_.set_producer_name("importer_test");
    ::onnx::OperatorSetIdProto* import = model_.add_opset_import();
    import->set_domain("");
    import->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  void Input(const std::string& name, std::vector<int64_t> dims,
             int elem_type = TensorProto::FLOAT) {
    ::onnx::ValueInfoProto* info = model_.mutable_graph()->add_input();
    info->set_name(name);
    ::onnx::TypeProto::Tensor* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(elem_type);
    for (int64_t d : dims) type->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void SymbolicInput(const std::string& name) {
    ::onnx::ValueInfoProto* info = model_.mutable_graph()->add_input();
    info->set_name(name);
    ::onnx::TypeProto::Tensor* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_param("batch");
    type->mutable_shape()->add_dim()->set_dim_value(4);
  }
  // An output of known rank and unknown dimensions: the checker wants a shape.
  void Output(const std::string& name, int rank) {
    ::onnx::ValueInfoProto* info = model_.mutable_graph()->add_output();
    info->set_name(name);
    ::onnx::TypeProto::Tensor* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(TensorProto::FLOAT);
    for (int i = 0; i < rank; ++i) type->mutable_shape()->add_dim();
  }

  // A float initializer holding 0, 1, 2, ... unless values are given.
  void Weight(const std::string& name, std::vector<int64_t> dims, std::vector<float> values = {}) {
    TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    int64_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= d;
    }
    if (values.empty()) {
      for (int64_t i = 0; i < count; ++i) values.push_back(static_cast<float>(i));
    }
    t->set_raw_data(
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  }
  void Ints(const std::string& name, std::vector<int64_t> values) {
    TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }

  NodeProto& Node(const std::string& op, std::vector<std::string> inputs,
                  std::vector<std::string> outputs, const std::string& name = "") {
    NodeProto* node = model_.mutable_graph()->add_node();
    node->set_op_type(op);
    node->set_name(name.empty() ? outputs[0] : name);
    for (const std::string& in : inputs) node->add_input(in);
    for (const std::string& out : outputs) node->add_output(out);
    return *node;
  }

  // A node named after its output that holds a float scalar.
  void ScalarConstant(const std::string& name, float value) {
    ::onnx::AttributeProto* a = Node("Constant", {}, {name}).add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(TensorProto::FLOAT);
    a->mutable_t()->add_float_data(value);
  }

  ::onnx::ModelProto& model() { return model_; }
  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  ::onnx::ModelProto model_;
};

inline void SetInts(NodeProto& node, const std::string& name, std::vector<int64_t> values) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}
inline void SetInt(NodeProto& node, const std::string& name, int64_t value) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(value);
}
inline void SetFloat(NodeProto& node, const std::string& name, float value) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(value);
}
inline void SetString(NodeProto& node, const std::string& name, const std::string& value) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(value);
}

inline ImportedModel ImportOrDie(const ModelBuilder& builder, const ImportOptions& options = {}) {
  absl::StatusOr<ImportedModel> imported = ImportModel(builder.Bytes(), options);
  EXPECT_TRUE(imported.ok()) << StatusMessage(imported.status());
  if (!imported.ok()) return ImportedModel{};
  return *std::move(imported);
}

inline std::string ImportError(const ModelBuilder& builder, const ImportOptions& options = {}) {
  absl::StatusOr<ImportedModel> imported = ImportModel(builder.Bytes(), options);
  EXPECT_FALSE(imported.ok());
  return imported.ok() ? "" : std::string(StatusMessage(imported.status()));
}

inline const ir::Value& ValueNamed(const ir::Graph& graph, std::string_view name) {
  const std::optional<ir::ValueId> id = graph.FindValue(name);
  EXPECT_TRUE(id.has_value()) << name;
  return graph.value(id.value_or(0));
}

inline const ir::Value& Output(const ImportedModel& model, size_t index = 0) {
  return model.graph.value(model.graph.outputs().at(index));
}

inline std::vector<float> Floats(const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

inline std::vector<ir::OpKind> Ops(const ir::Graph& graph) {
  std::vector<ir::OpKind> ops;
  for (const ir::Node& node : graph.nodes()) ops.push_back(node.op);
  return ops;
}

}  // namespace spillway::onnx::testing
