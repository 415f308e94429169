#include "models/models.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>

#include "fmt/format.h"
#include "models/deeplab.h"
#include "models/gpt2.h"
#include "models/resnet.h"
#include "models/unet.h"
#include "models/vgg.h"
#include "support/status_macros.h"

namespace spillway::models {
namespace {

using Builder = std::function<absl::StatusOr<ir::Graph>(const ModelOptions&)>;

struct ModelEntry {
  ModelInfo info;
  Builder build;
};

ModelOptionInfo Option(std::string name, std::string default_value, std::string description) {
  return {std::move(name), std::move(default_value), std::move(description)};
}

std::vector<ModelOptionInfo> ImageOptions(int64_t default_classes) {
  return {
      Option("batch", "1", "images per step"),
      Option("height", "224", "image height in pixels"),
      Option("width", "224", "image width in pixels"),
      Option("in_channels", "3", "channels of the input image"),
      Option("classes", fmt::format("{}", default_classes), "output classes"),
  };
}

const std::vector<ModelEntry>& Registry() {
  static const std::vector<ModelEntry>* registry = [] {
    auto* entries = new std::vector<ModelEntry>();
    for (int depth : {18, 34, 50, 101, 152}) {
      std::vector<ModelOptionInfo> options = ImageOptions(1000);
      options.push_back(Option("base_width", "64", "channels of conv1 and layer1 (x2 per stage)"));
      entries->push_back({{fmt::format("resnet{}", depth),
                           fmt::format("ResNet-{} v1.5 classifier (torchvision layout){}", depth,
                                       depth >= 50 ? ", bottleneck blocks" : ", basic blocks"),
                           std::move(options)},
                          [depth](const ModelOptions& o) { return BuildResNet(depth, o); }});
    }
    {
      std::vector<ModelOptionInfo> options = ImageOptions(1000);
      options.push_back(Option("dropout", "0.5", "dropout probability of the classifier"));
      options.push_back(Option("seed", "0", "seed of the first dropout; later ones count up"));
      entries->push_back(
          {{"vgg16", "VGG-16 classifier (torchvision layout, no batch norm)", std::move(options)},
           BuildVgg16});
    }
    {
      std::vector<ModelOptionInfo> options = ImageOptions(21);
      options.push_back(Option("backbone", "resnet50", "resnet50 or resnet101, layer4 dilated"));
      options.push_back(Option("base_width", "64", "channels of the backbone's first stage"));
      options.push_back(Option("dropout", "0.5", "dropout probability after the ASPP projection"));
      options.push_back(Option("seed", "0", "seed of the dropout"));
      entries->push_back(
          {{"deeplabv3plus",
            "DeepLabV3+ segmentation, ResNet backbone at output stride 16, ASPP and decoder",
            std::move(options)},
           BuildDeepLabV3Plus});
    }
    {
      std::vector<ModelOptionInfo> options = ImageOptions(2);
      options.push_back(Option("base_width", "64", "channels of the first level (x2 per level)"));
      options.push_back(Option("depth", "4",
                               "2x2 downsamplings; height and width divisible by "
                               "2^depth"));
      entries->push_back(
          {{"unet", "U-Net segmentation (Ronneberger 2015) with size-preserving convolutions",
            std::move(options)},
           BuildUNet});
    }
    entries->push_back(
        {{"gpt2",
          "GPT-2 decoder-only transformer with tied LM head (124M at the defaults)",
          {
              Option("batch", "1", "sequences per step"),
              Option("n_layer", "12", "transformer blocks"),
              Option("n_head", "12", "attention heads; must divide d_model"),
              Option("d_model", "768", "embedding width"),
              Option("seq_len", "1024", "tokens per sequence (also the rows of wpe)"),
              Option("vocab", "50257", "vocabulary size"),
              Option("dropout", "0.1", "embedding, attention and residual dropout"),
              Option("seed", "0", "seed of the first dropout; later ones count up"),
          }},
         BuildGpt2});
    return entries;
  }();
  return *registry;
}

absl::StatusOr<int64_t> ParseInt(std::string_view name, std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return absl::InvalidArgumentError(
        fmt::format("option '{}' expects an integer, got '{}'", name, text));
  }
  return value;
}

absl::StatusOr<double> ParseFloat(std::string_view name, std::string_view text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return absl::InvalidArgumentError(
        fmt::format("option '{}' expects a number, got '{}'", name, text));
  }
  return value;
}

}  // namespace

absl::StatusOr<ir::Graph> BuildModel(std::string_view name, const ModelOptions& options) {
  std::vector<std::string_view> known;
  for (const ModelEntry& entry : Registry()) {
    if (entry.info.name == name) {
      absl::StatusOr<ir::Graph> graph = entry.build(options);
      if (!graph.ok()) return Annotate(graph.status(), fmt::format("building {}", name));
      return graph;
    }
    known.push_back(entry.info.name);
  }
  return absl::NotFoundError(
      fmt::format("unknown model '{}'; known models: {}", name, fmt::join(known, ", ")));
}

absl::Status CheckOptionsApply(std::string_view model, const std::vector<GivenOption>& given,
                               const std::function<std::string(std::string_view)>& spell) {
  for (const ModelEntry& entry : Registry()) {
    if (entry.info.name != model) continue;
    const std::vector<ModelOptionInfo>& reads = entry.info.options;
    for (const GivenOption& option : given) {
      const bool read = std::any_of(reads.begin(), reads.end(), [&](const ModelOptionInfo& info) {
        return info.name == option.field;
      });
      if (read) continue;
      std::vector<std::string> spelt;
      for (const ModelOptionInfo& info : reads) spelt.push_back(spell(info.name));
      return absl::InvalidArgumentError(
          fmt::format("{} does not apply to {}; its options are {}",
                      option.spelt.empty() ? spell(option.field) : option.spelt, model,
                      fmt::join(spelt, ", ")));
    }
    return absl::OkStatus();
  }
  return BuildModel(model, ModelOptions{}).status();  // the unknown-model error
}

std::vector<ModelInfo> ListModels() {
  std::vector<ModelInfo> infos;
  for (const ModelEntry& entry : Registry()) infos.push_back(entry.info);
  return infos;
}

absl::Status SetModelOption(ModelOptions& options, std::string_view name, std::string_view value) {
  const std::map<std::string_view, int64_t*> int_options = {
      {"batch", &options.batch},           {"height", &options.height},
      {"width", &options.width},           {"in_channels", &options.in_channels},
      {"base_width", &options.base_width}, {"seed", &options.seed},
      {"depth", &options.depth},           {"n_layer", &options.n_layer},
      {"n_head", &options.n_head},         {"d_model", &options.d_model},
      {"seq_len", &options.seq_len},       {"vocab", &options.vocab},
  };
  if (auto it = int_options.find(name); it != int_options.end()) {
    ASSIGN_OR_RETURN(*it->second, ParseInt(name, value));
    return absl::OkStatus();
  }
  if (name == "classes") {
    ASSIGN_OR_RETURN(options.classes, ParseInt(name, value));
    return absl::OkStatus();
  }
  if (name == "dropout") {
    ASSIGN_OR_RETURN(options.dropout, ParseFloat(name, value));
    return absl::OkStatus();
  }
  if (name == "backbone") {
    options.backbone = std::string(value);
    return absl::OkStatus();
  }
  std::vector<std::string_view> known;
  for (const auto& [option, field] : int_options) known.push_back(option);
  known.insert(known.end(), {"classes", "dropout", "backbone"});
  return absl::InvalidArgumentError(
      fmt::format("unknown model option '{}'; known options: {}", name, fmt::join(known, ", ")));
}

}  // namespace spillway::models
