#include "train/data.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "fmt/format.h"
#include "support/status_macros.h"
#include "train/image_io.h"
#include "train/random.h"

namespace spillway::train {
namespace {

namespace fs = std::filesystem;

// The streams of synthetic data, told apart by the first part of their key.
enum StreamTag : uint64_t {
  kClassColor = 1,
  kClassTexture,
  kLabels,
  kNoise,
  kSegmentationCells,
  kTokenStride,
  kTokenStart,
  kShuffle,
};

// How strongly the class shows in a synthetic image, against noise of
// amplitude kNoise: strong enough that a small network separates the classes
// within a few dozen steps, noisy enough that it has something to learn.
constexpr float kColorAmplitude = 0.8f;
constexpr float kTextureAmplitude = 0.5f;
constexpr float kNoiseAmplitude = 0.5f;
// Synthetic segmentation images are a kCellsPerSide x kCellsPerSide grid of
// cells, each one class.
constexpr int64_t kCellsPerSide = 4;

bool IsInteger(ir::DType dtype) { return dtype == ir::DType::kI64 || dtype == ir::DType::kI32; }

std::vector<std::byte> ZeroBytes(const ir::TensorType& type) {
  return std::vector<std::byte>(static_cast<size_t>(type.bytes()));
}

// Writes `label` as element `index` of an i64 or i32 tensor.
void PutLabel(std::vector<std::byte>& bytes, ir::DType dtype, int64_t index, int64_t label) {
  if (dtype == ir::DType::kI64) {
    std::memcpy(bytes.data() + index * 8, &label, 8);
  } else {
    const auto narrow = static_cast<int32_t>(label);
    std::memcpy(bytes.data() + index * 4, &narrow, 4);
  }
}

void PutFloat(std::vector<std::byte>& bytes, int64_t index, float value) {
  std::memcpy(bytes.data() + index * 4, &value, 4);
}

// What marks class c at pixel (y, x), channel ch: a colour, and for
// classification a texture too. Segmentation has only the colour, so that a
// pixel's class shows where the pixel is.
class ClassPattern {
 public:
  ClassPattern(uint64_t seed, const TaskInfo& task)
      : seed_(seed),
        width_(task.width),
        channels_(task.channels),
        texture_(task.task == Task::kClassification) {}

  float At(int64_t c, int64_t y, int64_t x, int64_t ch) const {
    const RandomStream color(StreamKey(seed_, {kClassColor, static_cast<uint64_t>(c)}));
    float value = kColorAmplitude * color.Uniform(static_cast<uint64_t>(ch), -1, 1);
    if (texture_) {
      const RandomStream texture(StreamKey(seed_, {kClassTexture, static_cast<uint64_t>(c)}));
      const auto pixel = static_cast<uint64_t>((y * width_ + x) * channels_ + ch);
      value += kTextureAmplitude * texture.Uniform(pixel, -1, 1);
    }
    return value;
  }

 private:
  uint64_t seed_;
  int64_t width_;
  int64_t channels_;
  bool texture_;
};

// Images whose class (or whose pixels' classes) they show.
class SyntheticImages final : public DataSource {
 public:
  SyntheticImages(const ir::Graph& graph, TaskInfo task, uint64_t seed)
      : task_(std::move(task)),
        seed_(seed),
        pattern_(seed, task_),
        images_type_(graph.value(task_.samples_input).type),
        labels_type_(graph.value(task_.labels_input).type) {}

  std::string Describe() const override {
    return task_.task == Task::kClassification
               ? fmt::format("synthetic classification ({} classes)", task_.classes)
               : fmt::format("synthetic segmentation ({} classes)", task_.classes);
  }

  absl::StatusOr<Batch> BatchForStep(int64_t step) override {
    std::vector<std::byte> images = ZeroBytes(images_type_);
    std::vector<std::byte> labels = ZeroBytes(labels_type_);
    const auto s = static_cast<uint64_t>(step);
    const RandomStream label_stream(StreamKey(seed_, {kLabels, s}));
    const int64_t cell_h = std::max<int64_t>(1, task_.height / kCellsPerSide);
    const int64_t cell_w = std::max<int64_t>(1, task_.width / kCellsPerSide);
    const int64_t cells_across = (task_.width + cell_w - 1) / cell_w;
    for (int64_t n = 0; n < task_.batch; ++n) {
      const auto sample = static_cast<uint64_t>(n);
      const RandomStream noise(StreamKey(seed_, {kNoise, s, sample}));
      const RandomStream cells(StreamKey(seed_, {kSegmentationCells, s, sample}));
      const auto image_label =
          static_cast<int64_t>(label_stream.Below(sample, static_cast<uint64_t>(task_.classes)));
      if (task_.task == Task::kClassification) {
        PutLabel(labels, labels_type_.dtype, n, image_label);
      }
      for (int64_t y = 0; y < task_.height; ++y) {
        for (int64_t x = 0; x < task_.width; ++x) {
          int64_t label = image_label;
          if (task_.task == Task::kSegmentation) {
            const int64_t cell = (y / cell_h) * cells_across + x / cell_w;
            label = static_cast<int64_t>(
                cells.Below(static_cast<uint64_t>(cell), static_cast<uint64_t>(task_.classes)));
            PutLabel(labels, labels_type_.dtype, (n * task_.height + y) * task_.width + x, label);
          }
          for (int64_t ch = 0; ch < task_.channels; ++ch) {
            const int64_t index = ((n * task_.height + y) * task_.width + x) * task_.channels + ch;
            const float value =
                pattern_.At(label, y, x, ch) +
                kNoiseAmplitude * noise.Uniform(static_cast<uint64_t>(index), -1, 1);
            PutFloat(images, index, value);
          }
        }
      }
    }
    Batch batch;
    batch.inputs[task_.samples_input] = std::move(images);
    batch.inputs[task_.labels_input] = std::move(labels);
    return batch;
  }

 private:
  TaskInfo task_;
  uint64_t seed_;
  ClassPattern pattern_;
  ir::TensorType images_type_;
  ir::TensorType labels_type_;
};

// Arithmetic sequences modulo the vocabulary: token t+1 = token t + stride,
// so the next token is a function of the current one, which even a tiny
// model learns.
class SyntheticTokens final : public DataSource {
 public:
  SyntheticTokens(const ir::Graph& graph, TaskInfo task, uint64_t seed)
      : task_(std::move(task)),
        seed_(seed),
        tokens_type_(graph.value(task_.samples_input).type),
        labels_type_(graph.value(task_.labels_input).type) {
    const auto vocab = static_cast<uint64_t>(task_.classes);
    stride_ = vocab > 1 ? 1 + RandomStream(StreamKey(seed, {kTokenStride})).Below(0, vocab - 1) : 0;
  }

  std::string Describe() const override {
    return fmt::format("synthetic token sequences (vocabulary {}, stride {})", task_.classes,
                       stride_);
  }

  absl::StatusOr<Batch> BatchForStep(int64_t step) override {
    std::vector<std::byte> tokens = ZeroBytes(tokens_type_);
    std::vector<std::byte> labels = ZeroBytes(labels_type_);
    const auto vocab = static_cast<uint64_t>(task_.classes);
    const RandomStream starts(StreamKey(seed_, {kTokenStart, static_cast<uint64_t>(step)}));
    for (int64_t b = 0; b < task_.batch; ++b) {
      uint64_t token = starts.Below(static_cast<uint64_t>(b), vocab);
      for (int64_t t = 0; t < task_.length; ++t) {
        const uint64_t next = (token + stride_) % vocab;
        PutLabel(tokens, tokens_type_.dtype, b * task_.length + t, static_cast<int64_t>(token));
        PutLabel(labels, labels_type_.dtype, b * task_.length + t, static_cast<int64_t>(next));
        token = next;
      }
    }
    Batch batch;
    batch.inputs[task_.samples_input] = std::move(tokens);
    batch.inputs[task_.labels_input] = std::move(labels);
    return batch;
  }

 private:
  TaskInfo task_;
  uint64_t seed_;
  uint64_t stride_ = 0;
  ir::TensorType tokens_type_;
  ir::TensorType labels_type_;
};

// ---- A directory of images ----

struct Example {
  std::string image;
  std::string mask;   // segmentation
  int64_t label = 0;  // classification
};

// Per-channel mean and standard deviation of pixels scaled to [0, 1]:
// ImageNet's for RGB (what pretrained torchvision models expect), 0.5 and
// 0.25 for gray.
constexpr std::array<float, 3> kRgbMean = {0.485f, 0.456f, 0.406f};
constexpr std::array<float, 3> kRgbStd = {0.229f, 0.224f, 0.225f};
constexpr float kGrayMean = 0.5f;
constexpr float kGrayStd = 0.25f;

// A file named as an image must start like one: checked for every file when
// the data set is listed, so a stray file fails before training starts, not
// at the step that first reads it. Eight bytes per file; decoding errors
// further into a file still surface at that step.
absl::Status CheckImageSignature(const std::string& path) {
  constexpr std::array<unsigned char, 8> kPng = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  constexpr std::array<unsigned char, 3> kJpeg = {0xff, 0xd8, 0xff};
  std::array<unsigned char, 8> head{};
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        fmt::format("cannot open image '{}': {}", path, std::strerror(errno)));
  }
  file.read(reinterpret_cast<char*>(head.data()), head.size());
  const bool png = std::equal(kPng.begin(), kPng.end(), head.begin());
  const bool jpeg = std::equal(kJpeg.begin(), kJpeg.end(), head.begin());
  if (png || jpeg) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("'{}' is named as an image but is neither a PNG nor a JPEG file", path));
}

// The regular files of a directory whose names end in an image extension,
// sorted by name, each checked to start like an image.
absl::StatusOr<std::vector<std::string>> ListImages(const fs::path& directory) {
  std::error_code error;
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
    if (entry.is_regular_file() && HasImageExtension(entry.path().string())) {
      files.push_back(entry.path().string());
    }
  }
  if (error) {
    return absl::NotFoundError(
        fmt::format("cannot list '{}': {}", directory.string(), error.message()));
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) RETURN_IF_ERROR(CheckImageSignature(file));
  return files;
}

class ImageDirectory final : public DataSource {
 public:
  ImageDirectory(const ir::Graph& graph, TaskInfo task, uint64_t seed, std::string directory,
                 std::vector<Example> examples, int64_t class_directories)
      : task_(std::move(task)),
        seed_(seed),
        directory_(std::move(directory)),
        examples_(std::move(examples)),
        class_directories_(class_directories),
        images_type_(graph.value(task_.samples_input).type),
        labels_type_(graph.value(task_.labels_input).type) {}

  std::string Describe() const override {
    if (task_.task == Task::kClassification) {
      return fmt::format("images in {} ({} classes, {} files)", directory_, class_directories_,
                         examples_.size());
    }
    return fmt::format("images and masks in {} ({} pairs)", directory_, examples_.size());
  }

  absl::StatusOr<Batch> BatchForStep(int64_t step) override {
    std::vector<std::byte> images = ZeroBytes(images_type_);
    std::vector<std::byte> labels = ZeroBytes(labels_type_);
    const auto count = static_cast<int64_t>(examples_.size());
    for (int64_t n = 0; n < task_.batch; ++n) {
      const int64_t sample = step * task_.batch + n;
      const Example& example =
          examples_[Order(sample / count)[static_cast<size_t>(sample % count)]];
      RETURN_IF_ERROR(LoadImage(example.image, n, images));
      if (task_.task == Task::kClassification) {
        PutLabel(labels, labels_type_.dtype, n, example.label);
      } else {
        RETURN_IF_ERROR(LoadMask(example.mask, n, labels));
      }
    }
    Batch batch;
    batch.inputs[task_.samples_input] = std::move(images);
    batch.inputs[task_.labels_input] = std::move(labels);
    return batch;
  }

 private:
  // The order of the examples in one epoch: a Fisher-Yates shuffle keyed by
  // the seed and the epoch.
  const std::vector<size_t>& Order(int64_t epoch) {
    if (epoch != order_epoch_) {
      order_.resize(examples_.size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
      const RandomStream shuffle(StreamKey(seed_, {kShuffle, static_cast<uint64_t>(epoch)}));
      for (size_t i = order_.size(); i > 1; --i) {
        std::swap(order_[i - 1], order_[shuffle.Below(i, i)]);
      }
      order_epoch_ = epoch;
    }
    return order_;
  }

  absl::Status CheckSize(const std::string& path, const Image& image) const {
    if (image.height != task_.height || image.width != task_.width) {
      return absl::InvalidArgumentError(fmt::format(
          "'{}' is {}x{} (height x width), but the model takes {}x{}: resize the images or "
          "build the model at their size (--height {} --width {}, or --input-shape for an ONNX "
          "model)",
          path, image.height, image.width, task_.height, task_.width, image.height, image.width));
    }
    return absl::OkStatus();
  }

  absl::Status LoadImage(const std::string& path, int64_t n, std::vector<std::byte>& images) const {
    ASSIGN_OR_RETURN(const Image image, ReadImage(path, task_.channels));
    RETURN_IF_ERROR(CheckSize(path, image));
    const int64_t pixels = task_.height * task_.width * task_.channels;
    for (int64_t i = 0; i < pixels; ++i) {
      const auto ch = static_cast<size_t>(i % task_.channels);
      const float mean = task_.channels == 3 ? kRgbMean[ch] : kGrayMean;
      const float std = task_.channels == 3 ? kRgbStd[ch] : kGrayStd;
      const float unit = static_cast<float>(image.pixels[static_cast<size_t>(i)]) / 255.0f;
      PutFloat(images, n * pixels + i, (unit - mean) / std);
    }
    return absl::OkStatus();
  }

  absl::Status LoadMask(const std::string& path, int64_t n, std::vector<std::byte>& labels) const {
    ASSIGN_OR_RETURN(const Image mask, ReadMask(path));
    RETURN_IF_ERROR(CheckSize(path, mask));
    const int64_t pixels = task_.height * task_.width;
    for (int64_t i = 0; i < pixels; ++i) {
      const int64_t value = mask.pixels[static_cast<size_t>(i)];
      int64_t label = value;
      if (value == kIgnoreMaskValue) {
        label = task_.ignore_index;
      } else if (value >= task_.classes) {
        return absl::InvalidArgumentError(fmt::format(
            "mask '{}' has class {} at row {}, column {}, but the model has {} classes (255 "
            "marks pixels to ignore)",
            path, value, i / task_.width, i % task_.width, task_.classes));
      }
      PutLabel(labels, labels_type_.dtype, n * pixels + i, label);
    }
    return absl::OkStatus();
  }

  static constexpr int64_t kIgnoreMaskValue = 255;

  TaskInfo task_;
  uint64_t seed_;
  std::string directory_;
  std::vector<Example> examples_;
  int64_t class_directories_;
  ir::TensorType images_type_;
  ir::TensorType labels_type_;
  int64_t order_epoch_ = -1;
  std::vector<size_t> order_;  // of the examples in epoch order_epoch_
};

// DIR/<class>/*.png|jpg, classes in name order.
absl::StatusOr<std::unique_ptr<DataSource>> ClassificationDirectory(const ir::Graph& graph,
                                                                    const TaskInfo& task,
                                                                    const DataOptions& options) {
  std::error_code error;
  std::vector<fs::path> classes;
  for (const fs::directory_entry& entry : fs::directory_iterator(options.source, error)) {
    if (entry.is_directory()) classes.push_back(entry.path());
  }
  if (error) {
    return absl::NotFoundError(
        fmt::format("cannot list the data directory '{}': {}", options.source, error.message()));
  }
  if (classes.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "'{}' has no class directories: a classification data set is DIR/<class>/*.png|jpg",
        options.source));
  }
  std::sort(classes.begin(), classes.end());
  if (static_cast<int64_t>(classes.size()) > task.classes) {
    return absl::InvalidArgumentError(fmt::format(
        "'{}' has {} class directories but the model has {} classes: build it with --classes {} "
        "(an ONNX model's classes are its output's last dimension)",
        options.source, classes.size(), task.classes, classes.size()));
  }
  std::vector<Example> examples;
  for (size_t c = 0; c < classes.size(); ++c) {
    ASSIGN_OR_RETURN(const std::vector<std::string> files, ListImages(classes[c]));
    for (const std::string& file : files) {
      examples.push_back({.image = file, .mask = "", .label = static_cast<int64_t>(c)});
    }
  }
  if (static_cast<int64_t>(examples.size()) < task.batch) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' has {} images (.png, .jpg, .jpeg) in its class directories, fewer than "
                    "one batch of {}",
                    options.source, examples.size(), task.batch));
  }
  return std::make_unique<ImageDirectory>(graph, task, options.seed, options.source,
                                          std::move(examples),
                                          static_cast<int64_t>(classes.size()));
}

// DIR/images/X.png|jpg with DIR/masks/X.png.
absl::StatusOr<std::unique_ptr<DataSource>> SegmentationDirectory(const ir::Graph& graph,
                                                                  const TaskInfo& task,
                                                                  const DataOptions& options) {
  const fs::path root(options.source);
  ASSIGN_OR_RETURN(const std::vector<std::string> images, ListImages(root / "images"));
  std::vector<Example> examples;
  for (const std::string& image : images) {
    const fs::path mask = root / "masks" / fs::path(image).stem().concat(".png");
    if (!fs::is_regular_file(mask)) {
      return absl::InvalidArgumentError(
          fmt::format("image '{}' has no mask: expected '{}'", image, mask.string()));
    }
    RETURN_IF_ERROR(CheckImageSignature(mask.string()));
    examples.push_back({.image = image, .mask = mask.string(), .label = 0});
  }
  if (static_cast<int64_t>(examples.size()) < task.batch) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' has {} images, fewer than one batch of {}: a segmentation data set is "
                    "DIR/images/X.png|jpg with DIR/masks/X.png",
                    (root / "images").string(), examples.size(), task.batch));
  }
  return std::make_unique<ImageDirectory>(graph, task, options.seed, options.source,
                                          std::move(examples), 0);
}

}  // namespace

absl::StatusOr<TaskInfo> FindTask(const ir::Graph& graph) {
  // The labels are the graph input a cross_entropy_loss reads as its targets;
  // the samples, the one other input fed each step.
  std::vector<const ir::Node*> losses;
  for (const ir::Node& node : graph.nodes()) {
    if (node.op == ir::OpKind::kCrossEntropyLoss && node.inputs.size() == 2 &&
        graph.value(node.inputs[1]).kind == ir::ValueKind::kInput) {
      losses.push_back(&node);
    }
  }
  if (losses.size() != 1) {
    return absl::InvalidArgumentError(fmt::format(
        "graph '{}' has {} cross_entropy_loss nodes over labels fed as a graph input; the "
        "trainer needs exactly one (an ONNX model gets it with --loss cross-entropy)",
        graph.name(), losses.size()));
  }
  const ir::Node& loss = *losses.front();
  TaskInfo task;
  task.labels_input = loss.inputs[1];
  task.classes = graph.value(loss.inputs[0]).type.shape.back();
  ASSIGN_OR_RETURN(task.ignore_index, loss.attrs.GetInt("ignore_index", -100));

  std::vector<ir::ValueId> samples;
  for (ir::ValueId input : graph.InputsOfKind(ir::ValueKind::kInput)) {
    if (input != task.labels_input) samples.push_back(input);
  }
  if (samples.size() != 1) {
    std::string names;
    for (ir::ValueId input : samples) {
      names += fmt::format("{}'{}'", names.empty() ? "" : ", ", graph.value(input).name);
    }
    return absl::InvalidArgumentError(fmt::format(
        "graph '{}' has {} inputs besides the labels ({}); the trainer feeds one: images "
        "f32[N,H,W,C] nhwc or tokens int[B,T]",
        graph.name(), samples.size(), names.empty() ? "none" : names));
  }
  task.samples_input = samples.front();
  const ir::Value& samples_value = graph.value(task.samples_input);
  const ir::Value& labels_value = graph.value(task.labels_input);
  const ir::TensorType& type = samples_value.type;
  const ir::TensorType& labels = labels_value.type;
  const auto unfed = [&]() {
    return absl::InvalidArgumentError(fmt::format(
        "graph '{}': the trainer cannot feed input '{}' {} with labels '{}' {}; it feeds images "
        "f32[N,H,W,C] nhwc with labels int[N] (classification) or int[N,H,W] (segmentation), "
        "or tokens int[B,T] with labels int[B,T]",
        graph.name(), samples_value.name, ir::TypeToString(type), labels_value.name,
        ir::TypeToString(labels)));
  };
  if (!IsInteger(labels.dtype)) return unfed();
  if (type.dtype == ir::DType::kF32) {
    if (type.rank() != 4 || type.layout != ir::Layout::kNHWC) return unfed();
    task.batch = type.shape[0];
    task.height = type.shape[1];
    task.width = type.shape[2];
    task.channels = type.shape[3];
    if (labels.shape == ir::Shape{task.batch}) {
      task.task = Task::kClassification;
    } else if (labels.shape == ir::Shape{task.batch, task.height, task.width}) {
      task.task = Task::kSegmentation;
    } else {
      return unfed();
    }
  } else if (IsInteger(type.dtype) && type.rank() == 2 && labels.shape == type.shape) {
    task.task = Task::kLanguageModel;
    task.batch = type.shape[0];
    task.length = type.shape[1];
  } else {
    return unfed();
  }
  return task;
}

absl::StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const ir::Graph& graph,
                                                           const DataOptions& options) {
  ASSIGN_OR_RETURN(const TaskInfo task, FindTask(graph));
  if (options.source == "synthetic") {
    if (task.task == Task::kLanguageModel) {
      return std::make_unique<SyntheticTokens>(graph, task, options.seed);
    }
    return std::make_unique<SyntheticImages>(graph, task, options.seed);
  }
  if (!fs::is_directory(options.source)) {
    return absl::NotFoundError(
        fmt::format("--data must be 'synthetic' or a directory of images; '{}' is not a directory",
                    options.source));
  }
  switch (task.task) {
    case Task::kClassification:
      return ClassificationDirectory(graph, task, options);
    case Task::kSegmentation:
      return SegmentationDirectory(graph, task, options);
    case Task::kLanguageModel:
      break;
  }
  return absl::InvalidArgumentError(
      fmt::format("graph '{}' reads tokens; a directory of images cannot feed it (use --data "
                  "synthetic)",
                  graph.name()));
}

}  // namespace spillway::train
