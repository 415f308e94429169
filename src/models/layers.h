// NetBuilder: the layers of the model zoo over ir::GraphBuilder. Each layer
// creates its parameters named after the layer ("layer1.0.conv1.weight") and
// one node named after the layer ("layer1.0.conv1"), as torchvision names
// modules, so plans and reports read like the PyTorch model.
//
// Like GraphBuilder it keeps the first error and turns every later call into a
// no-op returning ir::kInvalidValue, so a builder is a straight list of layers
// that checks status() once at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/builder.h"
#include "ir/graph.h"

namespace spillway::models {

struct ConvOptions {
  int64_t stride = 1;
  int64_t dilation = 1;
  // [top, left, bottom, right]; unset: dilation * (kernel - 1) / 2 on every
  // side, which keeps the size of an odd kernel at stride 1.
  std::optional<ir::IntList> pads = std::nullopt;
  bool bias = false;
};

class NetBuilder {
 public:
  // Dropout nodes get seeds first_seed, first_seed + 1, ... in build order.
  NetBuilder(ir::Graph& graph, int64_t first_seed) : builder_(graph), next_seed_(first_seed) {}

  // Graph inputs. A type whose byte count overflows int64 is an error here,
  // before any op sees it.
  ir::ValueId Input(std::string name, ir::TensorType type);
  ir::ValueId Parameter(std::string name, ir::TensorType type);
  ir::ValueId Buffer(std::string name, ir::TensorType type);

  // OHWI weight "<name>.weight", optional "<name>.bias"; node "<name>".
  ir::ValueId Conv2d(const std::string& name, ir::ValueId x, int64_t out_channels, int64_t kernel,
                     const ConvOptions& options = {});
  // Training mode: "<name>.weight" and "<name>.bias" (gamma, beta) are
  // parameters, "<name>.running_mean" and "<name>.running_var" buffers.
  ir::ValueId BatchNorm(const std::string& name, ir::ValueId x);
  // "<name>.weight" [out, in] and "<name>.bias" [out] over the last axis.
  ir::ValueId Linear(const std::string& name, ir::ValueId x, int64_t out_features,
                     bool bias = true);
  // "<name>.weight" and "<name>.bias" over the last axis.
  ir::ValueId LayerNorm(const std::string& name, ir::ValueId x);
  // Returns x itself when p is 0: a dropout that drops nothing is left out.
  ir::ValueId Dropout(const std::string& name, ir::ValueId x, double p);
  ir::ValueId Relu(const std::string& name, ir::ValueId x);
  ir::ValueId MaxPool(const std::string& name, ir::ValueId x, int64_t kernel, int64_t stride,
                      int64_t pad);
  ir::ValueId ResizeBilinear(const std::string& name, ir::ValueId x, int64_t height, int64_t width);
  ir::ValueId Concat(const std::string& name, std::vector<ir::ValueId> inputs, int64_t axis);

  // Any other op.
  ir::ValueId Op(ir::OpKind op, std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                 std::string name);
  void Output(ir::ValueId value);

  // The type of a value built without error; CHECKs that it is valid.
  const ir::TensorType& type(ir::ValueId value) const;
  // The last dimension: channels of an NHWC activation, features of a matrix.
  int64_t LastDim(ir::ValueId value) const;

  bool ok() const { return status_.ok() && builder_.ok(); }
  absl::Status status() const { return status_.ok() ? builder_.status() : status_; }
  ir::Graph& graph() { return builder_.graph(); }

 private:
  ir::ValueId AddInput(std::string name, ir::TensorType type, ir::ValueKind kind);

  ir::GraphBuilder builder_;
  absl::Status status_;  // errors found here rather than in GraphBuilder
  int64_t next_seed_;
};

}  // namespace spillway::models
