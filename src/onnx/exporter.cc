#include "onnx/exporter.h"

#include <bit>
#include <climits>
#include <cstring>

#include "fmt/format.h"
#include "onnx/onnx_pb.h"
#include "support/status_macros.h"

namespace spillway::onnx {
namespace {

using ::onnx::ModelProto;
using ::onnx::TensorProto;

// OHWI bytes of a [o, kh, kw, c] weight as the file's OIHW floats.
std::vector<float> OhwiToOihw(const std::vector<float>& ohwi, int64_t o, int64_t c, int64_t kh,
                              int64_t kw) {
  std::vector<float> oihw(ohwi.size());
  for (int64_t oi = 0; oi < o; ++oi) {
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t h = 0; h < kh; ++h) {
        for (int64_t x = 0; x < kw; ++x) {
          oihw[static_cast<size_t>(((oi * c + ci) * kh + h) * kw + x)] =
              ohwi[static_cast<size_t>(((oi * kh + h) * kw + x) * c + ci)];
        }
      }
    }
  }
  return oihw;
}

}  // namespace

absl::StatusOr<std::string> ExportTrainedValues(
    std::string_view onnx_bytes, const std::set<std::string>& ohwi_initializers,
    const std::map<std::string, std::vector<std::byte>>& values) {
  if (onnx_bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::UnimplementedError("ONNX models over 2 GiB are not supported");
  }
  ModelProto model;
  if (!model.ParseFromArray(onnx_bytes.data(), static_cast<int>(onnx_bytes.size()))) {
    return absl::InvalidArgumentError("not an ONNX model: the bytes do not parse as a ModelProto");
  }
  std::map<std::string, TensorProto*> initializers;
  for (TensorProto& tensor : *model.mutable_graph()->mutable_initializer()) {
    initializers[tensor.name()] = &tensor;
  }
  for (const auto& [name, bytes] : values) {
    const auto it = initializers.find(name);
    if (it == initializers.end()) {
      return absl::InvalidArgumentError(
          fmt::format("the model has no initializer '{}' to write a trained value into", name));
    }
    TensorProto& tensor = *it->second;
    if (tensor.data_type() != TensorProto::FLOAT) {
      return absl::UnimplementedError(fmt::format(
          "initializer '{}' is {}, not float: export writes float initializers only", name,
          TensorProto::DataType_Name(static_cast<TensorProto::DataType>(tensor.data_type()))));
    }
    if (tensor.data_location() == TensorProto::EXTERNAL) {
      return absl::UnimplementedError(fmt::format(
          "initializer '{}' is stored as external data, which export does not write yet", name));
    }
    int64_t count = 1;
    for (int64_t d : tensor.dims()) count *= d;
    if (static_cast<int64_t>(bytes.size()) != count * static_cast<int64_t>(sizeof(float))) {
      return absl::InvalidArgumentError(
          fmt::format("the trained value of '{}' has {} bytes; the initializer holds {} floats",
                      name, bytes.size(), count));
    }
    std::vector<float> floats(static_cast<size_t>(count));
    std::memcpy(floats.data(), bytes.data(), bytes.size());
    if (ohwi_initializers.contains(name)) {
      if (tensor.dims_size() != 4) {
        return absl::InternalError(
            fmt::format("'{}' is a convolution weight of rank {}", name, tensor.dims_size()));
      }
      floats = OhwiToOihw(floats, tensor.dims(0), tensor.dims(1), tensor.dims(2), tensor.dims(3));
    }
    // raw_data is little-endian, as this machine's floats are.
    static_assert(std::endian::native == std::endian::little);
    tensor.clear_float_data();
    tensor.set_raw_data(
        std::string(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float)));
  }
  std::string out;
  if (!model.SerializeToString(&out)) {
    return absl::InternalError("the exported model does not serialize (over 2 GiB?)");
  }
  return out;
}

}  // namespace spillway::onnx
