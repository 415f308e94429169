#include "onnx/exporter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx/test_util.h"
#include "support/status_macros.h"

namespace spillway::onnx {
namespace {

using testing::Floats;
using ::testing::HasSubstr;
using testing::ImportOrDie;
using testing::ModelBuilder;
using testing::NodeProto;
using testing::SetInt;
using testing::SetInts;

// conv (OHWI in the IR) -> batch norm (running statistics are buffers) ->
// flatten -> gemm, with a metadata entry an export must leave alone.
ModelBuilder SmallModel() {
  ModelBuilder m;
  m.Input("x", {2, 2, 3, 3});
  m.Weight("conv.weight", {3, 2, 3, 3});
  m.Weight("bn.weight", {3});
  m.Weight("bn.bias", {3});
  m.Weight("bn.running_mean", {3});
  m.Weight("bn.running_var", {3}, {1, 2, 3});
  m.Weight("fc.weight", {4, 27});
  m.Weight("fc.bias", {4});
  NodeProto& conv = m.Node("Conv", {"x", "conv.weight"}, {"c"}, "conv");
  SetInts(conv, "pads", {1, 1, 1, 1});
  m.Node("BatchNormalization", {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
         {"b"}, "bn");
  m.Node("Flatten", {"b"}, {"f"}, "flatten");
  SetInt(m.Node("Gemm", {"f", "fc.weight", "fc.bias"}, {"y"}, "fc"), "transB", 1);
  m.Output("y", 2);
  ::onnx::StringStringEntryProto* entry = m.model().add_metadata_props();
  entry->set_key("origin");
  entry->set_value("exporter_test");
  return m;
}

// New values, different from the file's, for every initializer.
std::map<std::string, std::vector<std::byte>> Trained(const ImportedModel& model) {
  std::map<std::string, std::vector<std::byte>> values;
  for (const auto& [name, bytes] : model.initial_values) {
    std::vector<float> floats = Floats(bytes);
    for (size_t i = 0; i < floats.size(); ++i) floats[i] = 0.5f * floats[i] - 1.0f + 0.01f * i;
    std::vector<std::byte>& out = values[name];
    out.resize(bytes.size());
    std::memcpy(out.data(), floats.data(), out.size());
  }
  return values;
}

// Importing the exported model gives exactly the trained values back, in the
// IR's layout (the convolution weight went back to OIHW and returns to OHWI),
// and nothing else in the model changed.
TEST(ExporterTest, ImportingTheExportGivesTheTrainedValuesBack) {
  ModelBuilder m = SmallModel();
  const std::string bytes = m.Bytes();
  const ImportedModel imported = ImportOrDie(m);
  EXPECT_EQ(imported.ohwi_initializers, (std::set<std::string>{"conv.weight"}));
  const std::map<std::string, std::vector<std::byte>> trained = Trained(imported);

  absl::StatusOr<std::string> exported =
      ExportTrainedValues(bytes, imported.ohwi_initializers, trained);
  ASSERT_TRUE(exported.ok()) << StatusMessage(exported.status());
  absl::StatusOr<ImportedModel> again = ImportModel(*exported, {});
  ASSERT_TRUE(again.ok()) << StatusMessage(again.status());
  EXPECT_EQ(again->initial_values, trained);

  ::onnx::ModelProto before = m.model();
  ::onnx::ModelProto after;
  ASSERT_TRUE(after.ParseFromString(*exported));
  before.mutable_graph()->clear_initializer();
  after.mutable_graph()->clear_initializer();
  EXPECT_EQ(before.SerializeAsString(), after.SerializeAsString());
}

TEST(ExporterTest, AValueForNoInitializerOrOfAnotherSizeIsAnError) {
  ModelBuilder m = SmallModel();
  const ImportedModel imported = ImportOrDie(m);
  std::map<std::string, std::vector<std::byte>> values = {{"nope", std::vector<std::byte>(4)}};
  EXPECT_THAT(
      StatusMessage(ExportTrainedValues(m.Bytes(), imported.ohwi_initializers, values).status()),
      HasSubstr("no initializer 'nope'"));
  values = {{"fc.bias", std::vector<std::byte>(8)}};
  EXPECT_THAT(
      StatusMessage(ExportTrainedValues(m.Bytes(), imported.ohwi_initializers, values).status()),
      HasSubstr("'fc.bias' has 8 bytes; the initializer holds 4 floats"));
  EXPECT_THAT(StatusMessage(ExportTrainedValues("garbage", {}, {}).status()),
              HasSubstr("not an ONNX model"));
}

}  // namespace
}  // namespace spillway::onnx
