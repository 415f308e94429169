// The ONNX importer: an ONNX model file becomes a forward ir::Graph, as a
// model builder would make it, plus the initial values of its weights.
//
// ONNX is NCHW with OIHW convolution weights; the IR is NHWC with OHWI
// weights (docs/ops.md). The importer maps the layouts: every 4-D activation
// becomes NHWC, convolution weights are transposed, and channel-axis
// attributes are remapped. Initializers become parameters (batch-norm
// running statistics buffers) named as in the file; their values, in the
// IR's layout, come back next to the graph. The shape arithmetic exporters
// emit (Shape, Gather, Unsqueeze, Concat, Cast) is folded to constants.
//
// docs/onnx.md lists the supported ops and how to export from PyTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::onnx {

enum class LossKind { kNone, kCrossEntropy };

struct ImportOptions {
  // Shapes of graph inputs in ONNX order (NCHW for images), by input name;
  // they replace the shapes in the file.
  std::map<std::string, ir::Shape, std::less<>> input_shapes;
  // Replaces the first dimension of every input (after input_shapes): the
  // batch of a model exported with another.
  std::optional<int64_t> batch;
  // kCrossEntropy: the single output are logits [N, classes] or per-pixel
  // logits [N, classes, H, W]; an i64 input "labels" ([N] or [N, H, W]) and a
  // cross_entropy_loss node make the output a scalar loss.
  LossKind loss = LossKind::kNone;
  // Initializers whose names start with one of these prefixes are buffers:
  // used as they are, not trained (a frozen backbone). Each prefix must
  // match some initializer.
  std::vector<std::string> frozen;
  // Dropout nodes get seeds first_seed, first_seed + 1, ... in node order.
  int64_t first_seed = 0;
  // Where tensors stored as external data are read from (their `location`
  // is relative to it); ImportModelFile sets it to the model's directory.
  std::string external_data_dir;
};

struct ImportedModel {
  ir::Graph graph = ir::Graph("onnx");
  // Parameter and buffer name -> its value in the IR's layout (f32, dense,
  // native byte order).
  std::map<std::string, std::vector<std::byte>> initial_values;
  // The file's names of graph.outputs(), in order (IR values are named after
  // the nodes that make them); with a loss added, "loss".
  std::vector<std::string> output_names;
  // Initializers whose values were transposed from OIHW to OHWI
  // (convolution weights); every other initializer keeps the file's layout.
  std::set<std::string> ohwi_initializers;
};

// Errors: bytes that are not an ONNX model, a model ONNX's checker or shape
// inference rejects, an opset outside 11..17, unknown input dimensions, or
// nodes the importer does not support (all of them, each named with its op
// type, opset and the reason).
// The largest ONNX file ImportModelFile reads: protobuf's limit on one
// message, 2 GiB (larger models keep their weights as external data).
inline constexpr int64_t kMaxOnnxFileBytes = int64_t{2} << 30;

absl::StatusOr<ImportedModel> ImportModel(std::string_view bytes, const ImportOptions& options);
absl::StatusOr<ImportedModel> ImportModelFile(const std::string& path,
                                              const ImportOptions& options);

// "x=1x3x224x224" -> {"x", [1,3,224,224]}.
absl::StatusOr<std::pair<std::string, ir::Shape>> ParseInputShape(std::string_view text);

}  // namespace spillway::onnx
