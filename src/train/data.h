// Training data: the bytes of every graph input of kind kInput, one batch per
// step. A batch is a pure function of the source's seed and the step number,
// so a run resumed from a checkpoint at step s sees exactly the batches an
// uninterrupted run would have seen from s on.
//
// Sources recognise the task from the graph's inputs of kind kInput: the
// labels are the one a cross_entropy_loss reads as its targets, the samples
// the one other input, whatever their names (the model zoo's "images",
// "tokens" and "labels", or an imported model's own):
// - classification: images f32[N,H,W,C] nhwc and labels int[N];
// - segmentation:   images f32[N,H,W,C] nhwc and labels int[N,H,W];
// - language model: tokens int[B,T] and labels int[B,T].
// The number of classes (or the vocabulary) is the last axis of the loss's
// logits. docs/training.md describes the data each source produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::train {

enum class Task { kClassification, kSegmentation, kLanguageModel };

// What the graph wants fed, found once from its inputs and loss.
struct TaskInfo {
  Task task = Task::kClassification;
  ir::ValueId samples_input = ir::kInvalidValue;  // images or tokens
  ir::ValueId labels_input = ir::kInvalidValue;
  int64_t batch = 0;
  int64_t height = 0;  // images: H, W, C; tokens: T in `length`
  int64_t width = 0;
  int64_t channels = 0;
  int64_t length = 0;
  int64_t classes = 0;          // classes, or the vocabulary
  int64_t ignore_index = -100;  // the loss's label to skip
};

// InvalidArgument if the graph has not exactly one such loss, has another
// number of samples inputs than one, or its inputs are not one of the three
// layouts above (each error names the inputs and their types).
absl::StatusOr<TaskInfo> FindTask(const ir::Graph& graph);

// One step's inputs, by graph input.
struct Batch {
  std::map<ir::ValueId, std::vector<std::byte>> inputs;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // "synthetic classification", "images in DIR (10 classes, 5000 files)".
  virtual std::string Describe() const = 0;
  // The inputs of training step `step` (0-based).
  virtual absl::StatusOr<Batch> BatchForStep(int64_t step) = 0;
};

struct DataOptions {
  // "synthetic" or a directory of images (layouts in docs/training.md).
  std::string source = "synthetic";
  uint64_t seed = 0;
};

// Errors: the graph's inputs are not a known task; the directory is missing,
// empty, has too few images for one batch, more classes than the model, or
// does not suit the task (a directory of images for a language model).
absl::StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const ir::Graph& graph,
                                                           const DataOptions& options);

}  // namespace spillway::train
