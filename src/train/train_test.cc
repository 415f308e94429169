// Tests of the trainer's parts (data, checkpoints, initialization, progress)
// and of whole training runs on the CPU backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

// clang-format off: jpeglib.h needs <cstdio> first.
#include <jpeglib.h>
#include <png.h>

#include <cstdio>
// clang-format on

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "analysis/hardware.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "models/layers.h"
#include "models/models.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/image_io.h"
#include "train/initializer.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace spillway::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---- Helpers ----

ir::Graph Model(const std::string& name, models::ModelOptions options) {
  absl::StatusOr<ir::Graph> graph = models::BuildModel(name, options);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

// ResNet-18 at 32x32 with 8 channels in its first stage: a real network with
// batch norm, residual adds and pooling that trains in milliseconds a step.
models::ModelOptions TinyResNet(int64_t classes = 4) {
  models::ModelOptions options;
  options.batch = 4;
  options.height = 32;
  options.width = 32;
  options.base_width = 8;
  options.classes = classes;
  return options;
}

models::ModelOptions TinyGpt2() {
  models::ModelOptions options;
  options.batch = 2;
  options.n_layer = 1;
  options.n_head = 2;
  options.d_model = 16;
  options.seq_len = 8;
  options.vocab = 11;
  options.dropout = 0.1;
  return options;
}

// A classifier named as an imported ONNX model is: the image input and the
// labels have their own names. conv 3x3 -> relu -> global pool -> linear over
// `input` f32[2,8,8,3] nhwc and `labels` i64[2], 5 classes.
ir::Graph ImportedClassifier(const std::string& input, const std::string& labels) {
  ir::Graph graph("imported");
  models::NetBuilder net(graph, 0);
  ir::ValueId x = net.Input(input, ir::Activation({2, 8, 8, 3}));
  const ir::ValueId targets = net.Input(labels, ir::I64({2}));
  x = net.Relu("relu", net.Conv2d("conv", x, 4, 3));
  x = net.Op(ir::OpKind::kGlobalAvgPool, {x}, {}, "pool");
  x = net.Op(ir::OpKind::kFlatten, {x}, {{"axis", int64_t{1}}}, "flatten");
  x = net.Linear("fc", x, 5);
  net.Output(net.Op(ir::OpKind::kCrossEntropyLoss, {x, targets}, {}, "loss"));
  EXPECT_TRUE(net.ok()) << net.status();
  return graph;
}

// A fresh directory under the test's temporary directory.
fs::path TempDir(const std::string& name) {
  const fs::path path = fs::path(::testing::TempDir()) / ("spillway_train_" + name);
  fs::remove_all(path);
  fs::create_directories(path);
  return path;
}

std::vector<float> Floats(const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

std::vector<int64_t> Int64s(const std::vector<std::byte>& bytes) {
  std::vector<int64_t> values(bytes.size() / 8);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// Writes 8-bit gray (1 channel), RGB (3) or, with a colormap, palette pixels.
void WritePng(const fs::path& path, int width, int height, int channels,
              const std::vector<uint8_t>& pixels, const std::vector<uint8_t>& colormap = {}) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  if (!colormap.empty()) {
    image.format = PNG_FORMAT_RGB_COLORMAP;
    image.colormap_entries = static_cast<png_uint_32>(colormap.size() / 3);
  } else {
    image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  }
  ASSERT_NE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0,
                                    colormap.empty() ? nullptr : colormap.data()),
            0)
      << image.message;
}

void WriteJpeg(const fs::path& path, int width, int height, const std::vector<uint8_t>& rgb) {
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  jpeg_compress_struct compress;
  jpeg_error_mgr error;
  compress.err = jpeg_std_error(&error);
  jpeg_create_compress(&compress);
  jpeg_stdio_dest(&compress, file);
  compress.image_width = static_cast<JDIMENSION>(width);
  compress.image_height = static_cast<JDIMENSION>(height);
  compress.input_components = 3;
  compress.in_color_space = JCS_RGB;
  jpeg_set_defaults(&compress);
  jpeg_set_quality(&compress, 100, TRUE);
  jpeg_start_compress(&compress, TRUE);
  while (compress.next_scanline < compress.image_height) {
    auto* row = const_cast<JSAMPLE*>(rgb.data() + compress.next_scanline * width * 3);
    jpeg_write_scanlines(&compress, &row, 1);
  }
  jpeg_finish_compress(&compress);
  jpeg_destroy_compress(&compress);
  std::fclose(file);
}

std::vector<uint8_t> Solid(int pixels, std::vector<uint8_t> color) {
  std::vector<uint8_t> result;
  for (int i = 0; i < pixels; ++i) result.insert(result.end(), color.begin(), color.end());
  return result;
}

// ---- Data ----

TEST(FindTask, RecognisesTheModelZoosInputs) {
  absl::StatusOr<TaskInfo> resnet = FindTask(Model("resnet18", TinyResNet(7)));
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  EXPECT_EQ(resnet->task, Task::kClassification);
  EXPECT_EQ(resnet->classes, 7);
  EXPECT_EQ(resnet->height, 32);
  EXPECT_EQ(resnet->channels, 3);

  models::ModelOptions seg = TinyResNet(5);
  seg.base_width = 4;
  absl::StatusOr<TaskInfo> deeplab = FindTask(Model("deeplabv3plus", seg));
  ASSERT_TRUE(deeplab.ok()) << deeplab.status();
  EXPECT_EQ(deeplab->task, Task::kSegmentation);
  EXPECT_EQ(deeplab->ignore_index, 255);

  absl::StatusOr<TaskInfo> gpt2 = FindTask(Model("gpt2", TinyGpt2()));
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ(gpt2->task, Task::kLanguageModel);
  EXPECT_EQ(gpt2->classes, 11);
  EXPECT_EQ(gpt2->length, 8);
}

TEST(FindTask, TakesAnyNamesForTheSamplesAndTheLabelsTheLossReads) {
  const ir::Graph graph = ImportedClassifier("x.1", "targets");
  absl::StatusOr<TaskInfo> task = FindTask(graph);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->task, Task::kClassification);
  EXPECT_EQ(task->samples_input, *graph.FindValue("x.1"));
  EXPECT_EQ(task->labels_input, *graph.FindValue("targets"));
  EXPECT_EQ(task->batch, 2);
  EXPECT_EQ(task->height, 8);
  EXPECT_EQ(task->channels, 3);
  EXPECT_EQ(task->classes, 5);

  auto source = MakeDataSource(graph, {.source = "synthetic", .seed = 1});
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<Batch> batch = (*source)->BatchForStep(0);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->inputs.at(task->samples_input).size(), 2u * 8 * 8 * 3 * 4);
  EXPECT_EQ(batch->inputs.at(task->labels_input).size(), 2u * 8);
}

TEST(FindTask, ErrorsNameTheInputsItCannotFeed) {
  ir::Graph two_inputs = ImportedClassifier("x", "labels");
  two_inputs.AddInput("mask", ir::Activation({2, 8, 8, 1}));
  EXPECT_THAT(FindTask(two_inputs).status().message(),
              HasSubstr("has 2 inputs besides the labels ('x', 'mask')"));

  // Features rather than images: f32[N, F].
  ir::Graph features("features");
  models::NetBuilder net(features, 0);
  const ir::ValueId x = net.Input("x", ir::F32({2, 6}));
  const ir::ValueId labels = net.Input("labels", ir::I64({2}));
  net.Output(net.Op(ir::OpKind::kCrossEntropyLoss, {net.Linear("fc", x, 3), labels}, {}, "loss"));
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_THAT(FindTask(features).status().message(),
              HasSubstr("cannot feed input 'x' f32[2,6] with labels 'labels' i64[2]"));

  // No loss over fed labels.
  ir::Graph no_loss("no_loss");
  no_loss.AddInput("x", ir::Activation({2, 8, 8, 3}));
  EXPECT_THAT(FindTask(no_loss).status().message(),
              HasSubstr("has 0 cross_entropy_loss nodes over labels fed as a graph input"));
}

TEST(SyntheticData, IsAFunctionOfSeedAndStep) {
  const ir::Graph graph = Model("resnet18", TinyResNet());
  auto a = MakeDataSource(graph, {.source = "synthetic", .seed = 3});
  auto b = MakeDataSource(graph, {.source = "synthetic", .seed = 3});
  auto other_seed = MakeDataSource(graph, {.source = "synthetic", .seed = 4});
  ASSERT_TRUE(a.ok() && b.ok() && other_seed.ok());
  // Out of order and repeated: each batch depends only on its step.
  const Batch a5 = *(*a)->BatchForStep(5);
  const Batch a2 = *(*a)->BatchForStep(2);
  EXPECT_EQ((*b)->BatchForStep(5)->inputs, a5.inputs);
  EXPECT_EQ((*a)->BatchForStep(5)->inputs, a5.inputs);
  EXPECT_NE(a2.inputs, a5.inputs);
  EXPECT_NE((*other_seed)->BatchForStep(5)->inputs, a5.inputs);

  const ir::ValueId labels = *graph.FindValue("labels");
  std::set<int64_t> seen;
  for (int step = 0; step < 10; ++step) {
    for (int64_t label : Int64s((*a)->BatchForStep(step)->inputs.at(labels))) {
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 4);
      seen.insert(label);
    }
  }
  EXPECT_EQ(seen.size(), 4u) << "40 draws should hit each of 4 classes";
}

TEST(SyntheticData, SegmentationLabelsFollowTheImage) {
  models::ModelOptions options;
  options.batch = 1;
  options.height = 16;
  options.width = 16;
  options.depth = 1;
  options.base_width = 4;
  options.classes = 3;
  const ir::Graph graph = Model("unet", options);
  auto source = MakeDataSource(graph, {.source = "synthetic", .seed = 1});
  ASSERT_TRUE(source.ok()) << source.status();
  const Batch batch = *(*source)->BatchForStep(0);
  const std::vector<float> images = Floats(batch.inputs.at(*graph.FindValue("images")));
  const std::vector<int64_t> labels = Int64s(batch.inputs.at(*graph.FindValue("labels")));
  ASSERT_EQ(labels.size(), 256u);
  // The cells are 4x4 pixels, one class each.
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      EXPECT_EQ(labels[static_cast<size_t>(y * 16 + x)],
                labels[static_cast<size_t>((y / 4 * 4) * 16 + x / 4 * 4)]);
    }
  }
  // Two pixels of one class are closer, on average over the image, than two
  // of different classes: the image reveals the labels.
  double same = 0, different = 0;
  int same_count = 0, different_count = 0;
  for (size_t i = 0; i + 1 < labels.size(); ++i) {
    const double distance = std::abs(images[i * 3] - images[(i + 1) * 3]);
    if (labels[i] == labels[i + 1]) {
      same += distance;
      ++same_count;
    } else {
      different += distance;
      ++different_count;
    }
  }
  ASSERT_GT(same_count, 0);
  ASSERT_GT(different_count, 0);
  EXPECT_LT(same / same_count, different / different_count);
}

TEST(SyntheticData, TokenLabelsAreTheNextToken) {
  const ir::Graph graph = Model("gpt2", TinyGpt2());
  auto source = MakeDataSource(graph, {.source = "synthetic", .seed = 9});
  ASSERT_TRUE(source.ok()) << source.status();
  const Batch batch = *(*source)->BatchForStep(3);
  const std::vector<int64_t> tokens = Int64s(batch.inputs.at(*graph.FindValue("tokens")));
  const std::vector<int64_t> labels = Int64s(batch.inputs.at(*graph.FindValue("labels")));
  ASSERT_EQ(tokens.size(), 16u);
  for (size_t b = 0; b < 2; ++b) {
    for (size_t t = 0; t + 1 < 8; ++t) EXPECT_EQ(labels[b * 8 + t], tokens[b * 8 + t + 1]);
    for (size_t t = 0; t < 8; ++t) {
      EXPECT_GE(tokens[b * 8 + t], 0);
      EXPECT_LT(tokens[b * 8 + t], 11);
    }
  }
}

TEST(ImageDirectory, ReadsClassDirectoriesOfPngAndJpeg) {
  const fs::path root = TempDir("classification");
  models::ModelOptions options = TinyResNet(3);
  options.batch = 2;
  options.height = 4;
  options.width = 4;
  const ir::Graph graph = Model("resnet18", options);
  // Two classes (sorted by name: "cat" is 0, "dog" 1), three files.
  fs::create_directories(root / "cat");
  fs::create_directories(root / "dog");
  WritePng(root / "cat" / "a.png", 4, 4, 3, Solid(16, {255, 0, 0}));
  WritePng(root / "dog" / "b.PNG", 4, 4, 1, Solid(16, {128}));
  WriteJpeg(root / "dog" / "c.jpg", 4, 4, Solid(16, {0, 0, 255}));
  std::ofstream(root / "dog" / "notes.txt") << "not an image";

  auto source = MakeDataSource(graph, {.source = root.string(), .seed = 0});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->Describe(), HasSubstr("2 classes, 3 files"));
  const ir::ValueId images = *graph.FindValue("images");
  const ir::ValueId labels = *graph.FindValue("labels");
  // Steps 0..2 cover 6 samples: every file twice (two epochs), each once
  // per epoch.
  std::multiset<int64_t> labels_seen;
  std::vector<float> red_pixels;
  for (int step = 0; step < 3; ++step) {
    const Batch batch = *(*source)->BatchForStep(step);
    const std::vector<float> pixels = Floats(batch.inputs.at(images));
    const std::vector<int64_t> step_labels = Int64s(batch.inputs.at(labels));
    for (size_t n = 0; n < 2; ++n) {
      labels_seen.insert(step_labels[n]);
      if (step_labels[n] == 0)
        red_pixels.assign(pixels.begin() + n * 48, pixels.begin() + n * 48 + 3);
    }
  }
  EXPECT_EQ(labels_seen.count(0), 2u);
  EXPECT_EQ(labels_seen.count(1), 4u);
  // Red, scaled to [0, 1] and normalized with ImageNet's mean and std.
  ASSERT_EQ(red_pixels.size(), 3u);
  EXPECT_FLOAT_EQ(red_pixels[0], (1.0f - 0.485f) / 0.229f);
  EXPECT_FLOAT_EQ(red_pixels[1], (0.0f - 0.456f) / 0.224f);
  EXPECT_FLOAT_EQ(red_pixels[2], (0.0f - 0.406f) / 0.225f);
}

TEST(ImageDirectory, ReadsSegmentationMasksAsClassIds) {
  const fs::path root = TempDir("segmentation");
  models::ModelOptions options;
  options.batch = 1;
  options.height = 2;
  options.width = 2;
  options.depth = 1;
  options.base_width = 4;
  options.classes = 3;
  const ir::Graph graph = Model("unet", options);  // ignore_index -100
  fs::create_directories(root / "images");
  fs::create_directories(root / "masks");
  WritePng(root / "images" / "x.png", 2, 2, 3, Solid(4, {10, 20, 30}));
  // A palette mask: the values are palette indices, whatever their colours.
  WritePng(root / "masks" / "x.png", 2, 2, 1, {0, 2, 255, 1}, std::vector<uint8_t>(256 * 3, 7));
  auto source = MakeDataSource(graph, {.source = root.string(), .seed = 0});
  ASSERT_TRUE(source.ok()) << source.status();
  const Batch batch = *(*source)->BatchForStep(0);
  EXPECT_EQ(Int64s(batch.inputs.at(*graph.FindValue("labels"))),
            (std::vector<int64_t>{0, 2, -100, 1}));

  WritePng(root / "masks" / "x.png", 2, 2, 1, {0, 2, 3, 1});
  auto bad = MakeDataSource(graph, {.source = root.string(), .seed = 0});
  ASSERT_TRUE(bad.ok());
  const absl::StatusOr<Batch> out_of_range = (*bad)->BatchForStep(0);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("has class 3 at row 1, column 0"));

  fs::remove(root / "masks" / "x.png");
  auto missing = MakeDataSource(graph, {.source = root.string(), .seed = 0});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("has no mask"));
}

// 16-bit and alpha PNGs would be converted by libpng (gamma-encoded 8 bits,
// alpha composited in linear light), not scaled as documented: refused.
TEST(ImageDirectory, SixteenBitAndAlphaPngsAreRefused) {
  const fs::path dir = TempDir("png_kinds");
  const auto write = [](const fs::path& path, png_uint_32 format, const void* pixels) {
    png_image image;
    std::memset(&image, 0, sizeof(image));
    image.version = PNG_IMAGE_VERSION;
    image.width = 2;
    image.height = 2;
    image.format = format;
    ASSERT_NE(png_image_write_to_file(&image, path.c_str(), 0, pixels, 0, nullptr), 0)
        << image.message;
  };
  const std::vector<uint16_t> wide(2 * 2 * 3, 40000);
  write(dir / "rgb16.png", PNG_FORMAT_LINEAR_RGB, wide.data());
  const std::vector<uint8_t> rgba(2 * 2 * 4, 128);
  write(dir / "rgba.png", PNG_FORMAT_RGBA, rgba.data());
  const std::vector<uint8_t> gray_alpha(2 * 2 * 2, 128);
  write(dir / "graya.png", PNG_FORMAT_GA, gray_alpha.data());
  for (const char* name : {"rgb16.png", "rgba.png", "graya.png"}) {
    const absl::StatusOr<Image> image = ReadImage((dir / name).string(), 3);
    ASSERT_FALSE(image.ok()) << name;
    const std::string message(image.status().message());
    EXPECT_THAT(message, HasSubstr(name));
    EXPECT_THAT(message, HasSubstr("must be 8-bit gray, RGB or palette PNGs without alpha"));
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  EXPECT_THAT(std::string(ReadImage((dir / "rgb16.png").string(), 3).status().message()),
              HasSubstr("16-bit samples"));
  EXPECT_THAT(std::string(ReadImage((dir / "rgba.png").string(), 1).status().message()),
              HasSubstr("alpha"));
  // 8-bit RGB reads, scaled as stored.
  WritePng(dir / "rgb8.png", 2, 2, 3, Solid(4, {10, 20, 30}));
  const absl::StatusOr<Image> plain = ReadImage((dir / "rgb8.png").string(), 3);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->pixels[0], 10);
  EXPECT_EQ(plain->pixels[2], 30);
}

TEST(ImageDirectory, ErrorsNameTheProblem) {
  models::ModelOptions options = TinyResNet(2);
  options.batch = 2;
  options.height = 4;
  options.width = 4;
  const ir::Graph graph = Model("resnet18", options);
  const auto error = [&graph](const fs::path& root) {
    return std::string(
        MakeDataSource(graph, {.source = root.string(), .seed = 0}).status().message());
  };
  const fs::path empty = TempDir("empty");
  EXPECT_THAT(error(empty), HasSubstr("has no class directories"));
  EXPECT_THAT(error(empty / "nowhere"), HasSubstr("is not a directory"));

  const fs::path few = TempDir("few");
  fs::create_directories(few / "a");
  WritePng(few / "a" / "1.png", 4, 4, 3, Solid(16, {1, 2, 3}));
  EXPECT_THAT(error(few), HasSubstr("1 images"));

  const fs::path many = TempDir("many_classes");
  for (const char* name : {"a", "b", "c"}) fs::create_directories(many / name);
  EXPECT_THAT(error(many), HasSubstr("--classes 3"));

  const fs::path sizes = TempDir("sizes");
  fs::create_directories(sizes / "a");
  WritePng(sizes / "a" / "1.png", 4, 4, 3, Solid(16, {1, 2, 3}));
  WritePng(sizes / "a" / "2.png", 5, 4, 3, Solid(20, {1, 2, 3}));
  auto source = MakeDataSource(graph, {.source = sizes.string(), .seed = 0});
  ASSERT_TRUE(source.ok()) << source.status();
  // Two files, batch 2: every batch reads both.
  EXPECT_THAT((*source)->BatchForStep(0).status().message(),
              HasSubstr("2.png' is 4x5 (height x width), but the model takes 4x4"));

  std::ofstream(sizes / "3.jpg") << "not a jpeg";
  EXPECT_THAT(ReadImage((sizes / "3.jpg").string(), 3).status().message(),
              HasSubstr("cannot read JPEG"));

  const ir::Graph gpt2 = Model("gpt2", TinyGpt2());
  EXPECT_THAT(MakeDataSource(gpt2, {.source = sizes.string(), .seed = 0}).status().message(),
              HasSubstr("cannot feed it"));

  // A file named as an image that is none fails when the directory is
  // listed, not at the step that would first read it.
  const fs::path stray = TempDir("stray");
  fs::create_directories(stray / "a");
  fs::create_directories(stray / "b");
  WritePng(stray / "a" / "1.png", 4, 4, 3, Solid(16, {1, 2, 3}));
  WritePng(stray / "a" / "2.png", 4, 4, 3, Solid(16, {1, 2, 3}));
  std::ofstream(stray / "b" / "notes.jpg") << "not a jpeg";
  EXPECT_THAT(error(stray), HasSubstr("notes.jpg' is named as an image but is neither a PNG nor a "
                                      "JPEG file"));
}

// ---- Checkpoints ----

Checkpoint SmallCheckpoint(const ir::Graph& graph) {
  Checkpoint checkpoint;
  checkpoint.fingerprint = ModelFingerprint(graph);
  checkpoint.step = 12;
  checkpoint.seed = 5;
  for (ir::ValueId id : PersistentValues(graph)) {
    const ir::Value& value = graph.value(id);
    CheckpointTensor tensor{
        .name = value.name, .kind = value.kind, .type = value.type, .bytes = {}};
    tensor.bytes.resize(static_cast<size_t>(value.type.bytes()));
    for (size_t i = 0; i < tensor.bytes.size(); ++i) {
      tensor.bytes[i] = static_cast<std::byte>(i * 7 + static_cast<size_t>(id));
    }
    checkpoint.tensors.push_back(std::move(tensor));
  }
  return checkpoint;
}

std::vector<char> ReadAll(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

void WriteAll(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Checkpoint, RoundTripsEveryField) {
  const ir::Graph graph = Model("resnet18", TinyResNet());
  const Checkpoint saved = SmallCheckpoint(graph);
  const fs::path path = TempDir("checkpoint") / "model.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path.string(), saved).ok());
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  absl::StatusOr<Checkpoint> loaded = ReadCheckpoint(path.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->fingerprint, saved.fingerprint);
  EXPECT_EQ(loaded->step, 12);
  EXPECT_EQ(loaded->seed, 5u);
  ASSERT_EQ(loaded->tensors.size(), saved.tensors.size());
  for (size_t i = 0; i < saved.tensors.size(); ++i) {
    EXPECT_EQ(loaded->tensors[i].name, saved.tensors[i].name);
    EXPECT_EQ(loaded->tensors[i].kind, saved.tensors[i].kind);
    EXPECT_EQ(loaded->tensors[i].type.shape, saved.tensors[i].type.shape);
    EXPECT_EQ(loaded->tensors[i].bytes, saved.tensors[i].bytes);
  }
  EXPECT_TRUE(CheckCheckpointMatches(*loaded, graph).ok());
}

TEST(Checkpoint, CorruptFilesAreClearErrors) {
  const ir::Graph graph = Model("resnet18", TinyResNet());
  const fs::path dir = TempDir("corrupt");
  const fs::path good = dir / "good.ckpt";
  ASSERT_TRUE(WriteCheckpoint(good.string(), SmallCheckpoint(graph)).ok());
  const std::vector<char> bytes = ReadAll(good);
  const auto error = [&dir](const std::vector<char>& contents) {
    WriteAll(dir / "bad.ckpt", contents);
    absl::StatusOr<Checkpoint> loaded = ReadCheckpoint((dir / "bad.ckpt").string());
    EXPECT_FALSE(loaded.ok());
    return std::string(loaded.status().message());
  };
  // Truncated anywhere: in the header, in a tensor, in the checksum.
  for (size_t size : {size_t{20}, bytes.size() / 2, bytes.size() - 3}) {
    EXPECT_THAT(error({bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(size)}),
                HasSubstr("is truncated or corrupt: it ends at byte " + std::to_string(size)));
  }
  // One flipped bit in a parameter's bytes.
  std::vector<char> flipped = bytes;
  flipped[bytes.size() - 100] ^= 0x10;
  EXPECT_THAT(error(flipped), HasSubstr("checksum does not match"));
  // A flipped bit in a length field is caught before anything is allocated.
  std::vector<char> bad_count = bytes;
  bad_count[13 + 4 + 8 + 8 + 8 + 3] ^= 0x40;  // the top byte of the tensor count
  EXPECT_THAT(error(bad_count), HasSubstr("truncated or corrupt"));
  EXPECT_THAT(error({'h', 'e', 'l', 'l', 'o'}), HasSubstr("not a Spillway checkpoint"));
  std::vector<char> future = bytes;
  future[13] = 9;
  EXPECT_THAT(error(future), HasSubstr("format version 9"));
  std::vector<char> trailing = bytes;
  trailing.push_back('x');
  EXPECT_THAT(error(trailing), HasSubstr("follow the checksum"));
  EXPECT_THAT(std::string(ReadCheckpoint((dir / "missing.ckpt").string()).status().message()),
              HasSubstr("cannot open checkpoint"));
}

TEST(Checkpoint, AnotherModelOrOptimizerIsAClearError) {
  const ir::Graph resnet = Model("resnet18", TinyResNet(4));
  const Checkpoint checkpoint = SmallCheckpoint(resnet);
  const absl::Status classes = CheckCheckpointMatches(checkpoint, Model("resnet18", TinyResNet(5)));
  EXPECT_THAT(classes.message(), HasSubstr("'fc.weight' is f32[4,64] in the checkpoint and "
                                           "f32[5,64] here"));
  const absl::Status model = CheckCheckpointMatches(checkpoint, Model("gpt2", TinyGpt2()));
  EXPECT_THAT(model.message(), HasSubstr("another model or optimizer"));

  absl::StatusOr<autodiff::TrainingGraph> sgd = autodiff::BuildTrainingGraph(resnet, {});
  autodiff::OptimizerOptions adam_options;
  adam_options.kind = autodiff::OptimizerKind::kAdam;
  absl::StatusOr<autodiff::TrainingGraph> adam = autodiff::BuildTrainingGraph(resnet, adam_options);
  ASSERT_TRUE(sgd.ok() && adam.ok());
  const absl::Status optimizer = CheckCheckpointMatches(SmallCheckpoint(sgd->graph), adam->graph);
  EXPECT_EQ(optimizer.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(optimizer.message(), HasSubstr("adam"));
}

// ---- Initialization ----

TEST(Initializer, GivesEachRoleItsValuesFromTheSeed) {
  absl::StatusOr<autodiff::TrainingGraph> training =
      autodiff::BuildTrainingGraph(Model("resnet18", TinyResNet()), {});
  ASSERT_TRUE(training.ok());
  const ir::Graph& graph = training->graph;
  auto state = InitialState(graph, 1);
  auto again = InitialState(graph, 1);
  auto other = InitialState(graph, 2);
  ASSERT_TRUE(state.ok() && again.ok() && other.ok());
  EXPECT_EQ(*state, *again);
  const auto values = [&](const std::string& name) {
    return Floats(state->at(*graph.FindValue(name)));
  };
  EXPECT_THAT(values("bn1.weight"), ::testing::Each(1.0f));
  EXPECT_THAT(values("bn1.bias"), ::testing::Each(0.0f));
  EXPECT_THAT(values("bn1.running_mean"), ::testing::Each(0.0f));
  EXPECT_THAT(values("bn1.running_var"), ::testing::Each(1.0f));
  EXPECT_THAT(values("fc.bias"), ::testing::Each(0.0f));
  // conv1: OHWI [8,7,7,3], fan_in 147, bound sqrt(6/147) = 0.202.
  const std::vector<float> conv1 = values("conv1.weight");
  const float bound = static_cast<float>(std::sqrt(6.0 / 147.0));
  float largest = 0;
  for (float w : conv1) largest = std::max(largest, std::abs(w));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.9f * bound);
  EXPECT_NE(state->at(*graph.FindValue("conv1.weight")),
            other->at(*graph.FindValue("conv1.weight")));
  // Momentum buffers start at zero.
  for (const auto& [param, buffers] : training->optimizer_state) {
    for (ir::ValueId buffer : buffers)
      EXPECT_THAT(Floats(state->at(buffer)), ::testing::Each(0.0f));
  }
}

TEST(Initializer, StartsAdamsStepCounterAtOne) {
  autodiff::OptimizerOptions adam;
  adam.kind = autodiff::OptimizerKind::kAdam;
  absl::StatusOr<autodiff::TrainingGraph> training =
      autodiff::BuildTrainingGraph(Model("gpt2", TinyGpt2()), adam);
  ASSERT_TRUE(training.ok());
  auto state = InitialState(training->graph, 0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(Int64s(state->at(training->adam_step)), std::vector<int64_t>{1});
  EXPECT_THAT(Floats(state->at(*training->graph.FindValue("h.0.ln_1.weight"))),
              ::testing::Each(1.0f));
}

// ---- Progress ----

TEST(Progress, PlainModeLogsEveryKStepsAndTheLast) {
  std::ostringstream out;
  Progress progress(out, Progress::Mode::kPlain, 4, "img");
  for (int64_t step = 1; step <= 10; ++step) {
    progress.Update({.step = step,
                     .last_step = 10,
                     .loss = 1.0 / static_cast<double>(step),
                     .seconds = 0.5,
                     .recompute_seconds = 0.1,
                     .samples = 8,
                     .arena_high_water = 3 << 20,
                     .bytes_to_host = 1 << 20});
  }
  progress.Finish();
  const std::string text = out.str();
  // Steps 1, 4, 8 and 10.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  // Mean of 1/1, 1/2, 1/3, 1/4.
  EXPECT_THAT(text,
              HasSubstr("step 4/10  loss 0.2500 (mean 0.5208)  16.0 img/s  arena 3.00 MiB  spilled "
                        "1.00 MiB/step  recompute 0.40s  eta 3s"));
  EXPECT_THAT(text, HasSubstr("step 10/10"));
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(Progress, TerminalModeRedrawsOneLine) {
  std::ostringstream out;
  Progress progress(out, Progress::Mode::kTerminal, 4, "seq");
  for (int64_t step = 1; step <= 3; ++step) {
    progress.Update({.step = step, .last_step = 3, .loss = 2, .seconds = 1, .samples = 2});
  }
  progress.Finish();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 3);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_THAT(text, HasSubstr("2.0 seq/s"));
}

// A redrawn line fits the terminal, leaving out the fields that matter least
// instead of wrapping; a log file gets every field.
TEST(Progress, TerminalLineFitsTheWidth) {
  const StepReport report{.step = 15,
                          .last_step = 30,
                          .loss = 0.5727,
                          .seconds = 0.5,
                          .recompute_seconds = 0.25,
                          .samples = 8,
                          .arena_high_water = 7 << 20,
                          .bytes_to_host = 5 << 19};
  const auto line_at = [&](int columns) {
    std::ostringstream out;
    {
      Progress progress(out, Progress::Mode::kTerminal, 5, "img", columns);
      progress.Update(report);
    }
    std::string text = out.str();
    // "\r" LINE "\x1b[K" "\n"
    EXPECT_EQ(text.substr(0, 1), "\r");
    const size_t end = text.find("\x1b[K");
    EXPECT_NE(end, std::string::npos);
    return text.substr(1, end - 1);
  };
  const std::string wide = line_at(0);
  EXPECT_EQ(wide,
            "step 15/30  loss 0.5727 (mean 0.5727)  16.0 img/s  arena 7.00 MiB  spilled 2.50 "
            "MiB/step  recompute 0.25s  eta 8s");
  const std::string at80 = line_at(80);
  EXPECT_LE(at80.size(), 79u);
  EXPECT_EQ(at80, "step 15/30  loss 0.5727 (mean 0.5727)  16.0 img/s  arena 7.00 MiB  eta 8s");
  const std::string at40 = line_at(40);
  EXPECT_LE(at40.size(), 39u);
  EXPECT_EQ(at40, "step 15/30  loss 0.5727 (mean 0.5727)");
  EXPECT_EQ(line_at(11), "step 15/30");
  EXPECT_EQ(line_at(8), "step...");
  // A log file is not a terminal: every field, whatever the width.
  std::ostringstream plain;
  {
    Progress progress(plain, Progress::Mode::kPlain, 5, "img", 40);
    progress.Update(report);
  }
  EXPECT_EQ(plain.str(), wide + "\n");
}

// ---- Training runs ----
//
// One thread per kernel: the runs are small, and OpenMP's barriers crawl when
// the machine is busy with other work.

TrainerOptions CpuOptions(int64_t budget_bytes, const std::string& policy = "hybrid") {
  TrainerOptions options;
  options.policy = policy;
  options.budget_bytes = budget_bytes;
  options.hardware = *analysis::LoadHardwareProfile("cpu");
  options.planner.max_evaluations = 200;
  options.optimizer.lr = 0.01;
  return options;
}

// The arena `none` needs for a graph: budgets below it make the planner spill
// or recompute.
int64_t NoneArena(const ir::Graph& forward, const TrainerOptions& options,
                  backends::Backend& backend) {
  TrainerOptions none = options;
  none.policy = "none";
  none.budget_bytes = int64_t{1} << 40;
  auto trainer = Trainer::Create(forward, none, backend);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return (*trainer)->plan().best.arena_bytes();
}

RunOptions Steps(int64_t steps) {
  RunOptions options;
  options.steps = steps;
  return options;
}

double Mean(const std::vector<double>& values, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += values[i];
  return sum / static_cast<double>(end - begin);
}

TEST(Trainer, LossFallsOnSyntheticImagesUnderABudget) {
  // At 64x64, batch 8, activations are a fifth of the arena (parameters,
  // gradients and momentum the rest): `none` needs 1.65 MiB, hybrid 1.30 MiB
  // at least.
  models::ModelOptions model = TinyResNet();
  model.height = 64;
  model.width = 64;
  model.batch = 8;
  model.base_width = 4;
  const ir::Graph forward = Model("resnet18", model);
  backends::cpu::CpuBackend backend({.threads = 1});
  TrainerOptions options = CpuOptions(0);
  const int64_t none_arena = NoneArena(forward, options, backend);
  options.budget_bytes = none_arena * 17 / 20;
  auto trainer = Trainer::Create(forward, options, backend);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<TrainingSummary> summary = (*trainer)->Run(Steps(40));
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(summary->losses.size(), 40u);
  // ln(4) = 1.39 at chance; one batch's loss is noisy, so compare means (about
  // 1.5 over the first five steps and 0.3 over the last ten, with 1 or 2
  // threads).
  EXPECT_LT(Mean(summary->losses, 30, 40), 0.5 * Mean(summary->losses, 0, 5));
  EXPECT_LE(summary->arena_high_water_bytes, summary->arena_bytes);
  EXPECT_LE(summary->arena_bytes, options.budget_bytes);
  EXPECT_GT(summary->bytes_to_host_per_step + summary->mean_recompute_s, 0)
      << "under the budget the plan must spill or recompute";
  EXPECT_EQ(summary->first_step, 1);
  EXPECT_EQ(summary->last_step, 40);
}

// The plan is costed in the backend's math: TF32 convolutions make the H200's
// predicted step shorter; the V100, which has no TF32, runs them in fp32.
TEST(Trainer, PlansTheStepInItsMathMode) {
  models::ModelOptions model = TinyResNet();
  model.height = 64;
  model.width = 64;
  const ir::Graph forward = Model("resnet18", model);
  backends::cpu::CpuBackend backend({.threads = 1});
  for (const char* preset : {"h200-141g-pcie5", "v100-16g-nvlink2"}) {
    std::map<analysis::MathMode, double> step_s;
    for (analysis::MathMode mode : {analysis::MathMode::kFp32, analysis::MathMode::kTf32}) {
      TrainerOptions options = CpuOptions(int64_t{1} << 30, "none");
      options.hardware = *analysis::LoadHardwareProfile(preset);
      options.math_mode = mode;
      auto trainer = Trainer::Create(forward, options, backend);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      step_s[mode] = (*trainer)->plan().best.step_time_s();
    }
    if (std::string_view(preset) == "h200-141g-pcie5") {
      EXPECT_LT(step_s[analysis::MathMode::kTf32], step_s[analysis::MathMode::kFp32]) << preset;
    } else {
      EXPECT_EQ(step_s[analysis::MathMode::kTf32], step_s[analysis::MathMode::kFp32]) << preset;
    }
  }
}

TEST(Trainer, LossFallsOnSyntheticTokensWithAdam) {
  const ir::Graph forward = Model("gpt2", TinyGpt2());
  backends::cpu::CpuBackend backend({.threads = 1});
  TrainerOptions options = CpuOptions(int64_t{1} << 30);
  options.optimizer.kind = autodiff::OptimizerKind::kAdam;
  options.optimizer.lr = 0.01;
  auto trainer = Trainer::Create(forward, options, backend);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<TrainingSummary> summary = (*trainer)->Run(Steps(40));
  ASSERT_TRUE(summary.ok()) << summary.status();
  // ln(11) = 2.40 at chance; the next token is a function of this one.
  EXPECT_LT(Mean(summary->losses, 35, 40), 0.7 * Mean(summary->losses, 0, 5));
}

TEST(Trainer, ResumingContinuesBitwiseAsIfNeverStopped) {
  const ir::Graph forward = Model("resnet18", TinyResNet());
  backends::cpu::CpuBackend backend({.threads = 1});
  TrainerOptions options = CpuOptions(int64_t{1} << 30);
  options.optimizer.kind = autodiff::OptimizerKind::kAdam;
  options.optimizer.lr = 1e-3;
  options.data.seed = 7;

  auto straight = Trainer::Create(forward, options, backend);
  ASSERT_TRUE(straight.ok()) << straight.status();
  absl::StatusOr<TrainingSummary> four = (*straight)->Run(Steps(4));
  ASSERT_TRUE(four.ok()) << four.status();

  const fs::path path = TempDir("resume") / "run.ckpt";
  auto first = Trainer::Create(forward, options, backend);
  ASSERT_TRUE(first.ok());
  absl::StatusOr<TrainingSummary> two =
      (*first)->Run({.steps = 2, .save_path = path.string(), .save_every = 0, .progress = nullptr});
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_NE(two->checksum, four->checksum);

  // Another policy and budget for the second half: plans never change numbers.
  TrainerOptions resumed_options = options;
  resumed_options.policy = "recompute";
  auto resumed = Trainer::Create(forward, resumed_options, backend);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->Resume(path.string()).ok());
  EXPECT_EQ(FormatChecksum(*(*resumed)->StateChecksum()), two->checksum);
  absl::StatusOr<TrainingSummary> rest = (*resumed)->Run(Steps(2));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->first_step, 3);
  EXPECT_EQ(rest->last_step, 4);
  EXPECT_EQ(rest->checksum, four->checksum);
  EXPECT_EQ(rest->losses.back(), four->losses.back());

  // Another seed would replay other data: refused, and nothing changes.
  TrainerOptions other_seed = options;
  other_seed.data.seed = 8;
  auto wrong = Trainer::Create(forward, other_seed, backend);
  ASSERT_TRUE(wrong.ok());
  const uint64_t before = *(*wrong)->StateChecksum();
  EXPECT_THAT((*wrong)->Resume(path.string()).message(), HasSubstr("resume with --seed 7"));
  EXPECT_EQ(*(*wrong)->StateChecksum(), before);
  EXPECT_EQ((*wrong)->steps_done(), 0);
}

// The bytes of a persistent value as the runtime holds it.
std::vector<std::byte> Held(Trainer& trainer, const std::string& name) {
  const ir::Graph& graph = trainer.training().graph;
  const ir::ValueId id = *graph.FindValue(name);
  std::vector<std::byte> bytes(static_cast<size_t>(graph.value(id).type.bytes()));
  EXPECT_TRUE(trainer.runtime().Read(id, bytes).ok());
  return bytes;
}

std::vector<std::byte> FloatBytes(size_t count, float value) {
  const std::vector<float> floats(count, value);
  std::vector<std::byte> bytes(count * 4);
  std::memcpy(bytes.data(), floats.data(), bytes.size());
  return bytes;
}

TEST(Trainer, StartsFromTheGivenValuesAndTheSeedForTheRest) {
  const ir::Graph forward = Model("resnet18", TinyResNet());
  backends::cpu::CpuBackend backend({.threads = 1});
  TrainerOptions options = CpuOptions(int64_t{1} << 30, "none");
  options.data.seed = 3;
  // fc is [4, 64] at base width 8; bn1 has 8 channels.
  const NamedValues given = {{"fc.weight", FloatBytes(4 * 64, 0.25f)},
                             {"bn1.running_var", FloatBytes(8, 2.0f)}};
  options.initial_values = &given;
  auto trainer = Trainer::Create(forward, options, backend);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ(Held(**trainer, "fc.weight"), given.at("fc.weight"));
  EXPECT_EQ(Held(**trainer, "bn1.running_var"), given.at("bn1.running_var"));
  const ir::Graph& graph = (*trainer)->training().graph;
  auto seeded = InitialState(graph, 3);
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  EXPECT_EQ(Held(**trainer, "conv1.weight"), seeded->at(*graph.FindValue("conv1.weight")));

  // A checkpoint wins over both.
  TrainerOptions plain_options = options;
  plain_options.initial_values = nullptr;
  auto plain = Trainer::Create(forward, plain_options, backend);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const fs::path path = TempDir("initial_values") / "plain.ckpt";
  ASSERT_TRUE((*plain)->Save(path.string()).ok());
  ASSERT_TRUE((*trainer)->Resume(path.string()).ok());
  EXPECT_EQ(*(*trainer)->StateChecksum(), *(*plain)->StateChecksum());
  EXPECT_EQ(Held(**trainer, "fc.weight"), seeded->at(*graph.FindValue("fc.weight")));
}

TEST(Trainer, InitialValuesOfAnotherSizeOrNameAreClearErrors) {
  const ir::Graph forward = Model("resnet18", TinyResNet());
  backends::cpu::CpuBackend backend({.threads = 1});
  TrainerOptions options = CpuOptions(int64_t{1} << 30, "none");
  const NamedValues short_weight = {{"fc.weight", FloatBytes(1, 0.0f)}};
  options.initial_values = &short_weight;
  EXPECT_THAT(Trainer::Create(forward, options, backend).status().message(),
              HasSubstr("the initial value of param 'fc.weight' has 4 bytes, but its type "
                        "f32[4,64] takes 1024"));
  const NamedValues unknown = {{"fc.weights", FloatBytes(4 * 64, 0.0f)}};
  options.initial_values = &unknown;
  EXPECT_THAT(Trainer::Create(forward, options, backend).status().message(),
              HasSubstr("an initial value is given for 'fc.weights', but graph 'resnet18' has no "
                        "parameter or buffer of that name"));
}

TEST(Trainer, AnInfeasibleBudgetNamesTheSmallestArena) {
  const ir::Graph forward = Model("resnet18", TinyResNet());
  backends::cpu::CpuBackend backend({.threads = 1});
  auto trainer = Trainer::Create(forward, CpuOptions(4096), backend);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(trainer.status().message(), HasSubstr("the smallest arena it reaches is"));
  EXPECT_THAT(trainer.status().message(), HasSubstr("rerun with --budget"));
}

// ---- Reproducibility and odd channel counts ----
//
// CI runs these on the machine's widest ISA, restricted to AVX2 and to
// SSE4.1 (.ci/run), and the OddChannels tests under valgrind too: oneDNN's
// JIT code is invisible to AddressSanitizer, and its AVX2 weight gradient of
// strided 1x1 convolutions with fewer than 8 input channels wrote past its
// buffer (docs/backends.md).

// Three steps of `forward` under `policy` on a fresh CPU backend, planned and
// run from scratch: the checksum of every parameter, buffer and optimizer
// state afterwards.
std::string TrainedChecksum(const ir::Graph& forward, int threads, const std::string& policy,
                            double budget_share) {
  backends::cpu::CpuBackend backend({.threads = threads});
  TrainerOptions options = CpuOptions(0, policy);
  options.budget_bytes = static_cast<int64_t>(
      budget_share * static_cast<double>(NoneArena(forward, options, backend)));
  auto trainer = Trainer::Create(forward, options, backend);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return "";
  absl::StatusOr<TrainingSummary> summary = (*trainer)->Run(Steps(3));
  EXPECT_TRUE(summary.ok()) << summary.status();
  return summary.ok() ? summary->checksum : "";
}

// The same run twice gives the same bits, for each thread count: the
// promise `train --json` records its configuration for. ResNet-18 with a
// base width of 4 has the strided 1x1 convolutions with 4 input channels
// that once made this run differ from itself on AVX2.
TEST(Reproducibility, TheSameRunTwiceGivesTheSameChecksum) {
  models::ModelOptions model = TinyResNet();
  model.height = model.width = 64;
  model.batch = 8;
  model.base_width = 4;
  const ir::Graph forward = Model("resnet18", model);
  for (const int threads : {1, 2}) {
    for (const auto& [policy, share] :
         std::vector<std::pair<std::string, double>>{{"none", 1.0}, {"hybrid", 0.85}}) {
      const std::string first = TrainedChecksum(forward, threads, policy, share);
      EXPECT_FALSE(first.empty());
      EXPECT_EQ(TrainedChecksum(forward, threads, policy, share), first)
          << policy << " with " << threads << " threads";
    }
  }
}

// Convolutions of every kind (3x3 and 1x1, strides 1 and 2, forward and
// both gradients) over 1, 3, 4, 5, 7 and 12 channels: the stem reads
// in_channels, and base_width sets the first stage's channels, which the
// strided 1x1 shortcut of the second stage reads. One step of the CPU
// backend must give the reference backend's loss and then reproduce itself.
// At 64x64 the last stage still has 2x2 pixels per image: batch norm over
// fewer values turns fp32 rounding into visible differences in the loss.
class OddChannels : public ::testing::TestWithParam<std::tuple<std::string, int64_t>> {};

TEST_P(OddChannels, OneStepMatchesTheReferenceAndReproduces) {
  const auto& [name, channels] = GetParam();
  models::ModelOptions model;
  model.batch = 2;
  model.height = model.width = 64;
  model.in_channels = channels;
  model.base_width = channels;
  model.classes = 3;
  const ir::Graph forward = Model(name, model);
  TrainerOptions options = CpuOptions(int64_t{1} << 30, "none");
  auto step = [&](backends::Backend& backend) -> absl::StatusOr<TrainingSummary> {
    auto trainer = Trainer::Create(forward, options, backend);
    if (!trainer.ok()) return trainer.status();
    return (*trainer)->Run(Steps(1));
  };
  backends::cpu::CpuBackend cpu({.threads = 1});
  absl::StatusOr<TrainingSummary> first = step(cpu);
  ASSERT_TRUE(first.ok()) << first.status();
  backends::cpu::CpuBackend again({.threads = 1});
  absl::StatusOr<TrainingSummary> second = step(again);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->checksum, first->checksum);
  backends::reference::ReferenceBackend reference;
  absl::StatusOr<TrainingSummary> expected = step(reference);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_NEAR(first->losses[0], expected->losses[0], 1e-3 * std::abs(expected->losses[0]));
}

INSTANTIATE_TEST_SUITE_P(Models, OddChannels,
                         ::testing::Combine(::testing::Values("resnet18", "resnet50"),
                                            ::testing::Values(1, 3, 4, 5, 7, 12)),
                         [](const ::testing::TestParamInfo<OddChannels::ParamType>& test) {
                           return std::get<0>(test.param) + "_" +
                                  std::to_string(std::get<1>(test.param));
                         });

}  // namespace
}  // namespace spillway::train
