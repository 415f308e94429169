// Hardware profiles: the presets, the JSON format and its errors, loading.
#include "analysis/hardware.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "support/status_macros.h"

namespace spillway::analysis {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A profile with every field away from its default, so that a field the JSON
// forgot to write would show up as a difference.
HardwareProfile Custom() {
  return {
      .name = "lab-gpu",
      .description = "the card under the desk",
      .device_memory_bytes = 24 * (int64_t{1} << 30),
      .reserved_bytes = 700 * (int64_t{1} << 20),
      .workspace_limit_bytes = 32 * (int64_t{1} << 20),
      .fp32_flops = 30e12,
      .tf32_flops = 60e12,
      .fp16_flops = 120e12,
      .compute_efficiency = 0.55,
      .memory_bandwidth = 936e9,
      .memory_efficiency = 0.85,
      .launch_overhead_s = 4e-6,
      .d2h_bandwidth = 20e9,
      .h2d_bandwidth = 22e9,
      .d2h_latency_s = 9e-6,
      .h2d_latency_s = 11e-6,
      .copy_engines = 1,
  };
}

// Custom() as JSON with one field set to `value` (a JSON text) or removed.
std::string WithField(const std::string& field, const std::string& value) {
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(HardwareProfileToJson(Custom()));
  json[field] = nlohmann::ordered_json::parse(value);
  return json.dump();
}

std::string WithoutField(const std::string& field) {
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(HardwareProfileToJson(Custom()));
  json.erase(field);
  return json.dump();
}

std::string ParseError(const std::string& json_text) {
  absl::StatusOr<HardwareProfile> profile = ParseHardwareProfile(json_text);
  if (profile.ok()) return "<parsed>";
  EXPECT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(StatusMessage(profile.status()));
}

TEST(HardwarePresetsTest, NamesInStableOrder) {
  std::vector<std::string> names;
  for (const HardwareProfile& preset : HardwarePresets()) names.push_back(preset.name);
  EXPECT_THAT(names, ElementsAre("v100-16g-nvlink2", "v100-16g-pcie3", "a100-40g-pcie4",
                                 "h100-80g-pcie5", "h200-141g-pcie5", "gh200-96g-c2c", "cpu"));
}

TEST(HardwarePresetsTest, EveryPresetIsValidAndDescribed) {
  for (const HardwareProfile& preset : HardwarePresets()) {
    EXPECT_TRUE(ValidateHardwareProfile(preset).ok()) << preset.name;
    EXPECT_FALSE(preset.description.empty()) << preset.name;
    EXPECT_GT(preset.default_budget_bytes(), 0) << preset.name;
  }
}

TEST(HardwarePresetsTest, EveryPresetRoundTripsThroughJson) {
  for (const HardwareProfile& preset : HardwarePresets()) {
    const std::string json = HardwareProfileToJson(preset);
    absl::StatusOr<HardwareProfile> parsed = ParseHardwareProfile(json);
    ASSERT_TRUE(parsed.ok()) << preset.name << ": " << StatusMessage(parsed.status());
    EXPECT_EQ(*parsed, preset) << json;
  }
}

TEST(HardwarePresetsTest, ThePapersMachine) {
  absl::StatusOr<HardwareProfile> v100 = LoadHardwareProfile("v100-16g-nvlink2");
  ASSERT_TRUE(v100.ok()) << StatusMessage(v100.status());
  // nvidia-smi's 16160 MiB, less a 512 MiB reserve.
  EXPECT_EQ(v100->default_budget_bytes(), (16160 - 512) * (int64_t{1} << 20));
  EXPECT_EQ(v100->peak_flops(MathMode::kFp32), 15.7e12);
  EXPECT_EQ(v100->peak_flops(MathMode::kTf32), 0);  // Volta has no tf32
  EXPECT_EQ(v100->peak_flops(MathMode::kFp16), 125e12);
  EXPECT_EQ(v100->copy_engines, 2);
  // The CUDA backend's convolution workspace limit; the CPU keeps its own.
  EXPECT_EQ(v100->workspace_limit_bytes, 64 * (int64_t{1} << 20));
  EXPECT_EQ(LoadHardwareProfile("cpu")->workspace_limit_bytes, 0);
}

TEST(HardwareProfileTest, CustomProfileRoundTrips) {
  absl::StatusOr<HardwareProfile> parsed = ParseHardwareProfile(HardwareProfileToJson(Custom()));
  ASSERT_TRUE(parsed.ok()) << StatusMessage(parsed.status());
  EXPECT_EQ(*parsed, Custom());
}

TEST(HardwareProfileTest, JsonUsesTheDocumentedFieldNamesInStructOrder) {
  const nlohmann::ordered_json json =
      nlohmann::ordered_json::parse(HardwareProfileToJson(Custom()));
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  EXPECT_THAT(keys, ElementsAre("name", "description", "device_memory_bytes", "reserved_bytes",
                                "workspace_limit_bytes", "fp32_flops", "tf32_flops", "fp16_flops",
                                "compute_efficiency", "tf32_efficiency", "fp16_efficiency",
                                "memory_bandwidth", "memory_efficiency", "launch_overhead_s",
                                "d2h_bandwidth", "h2d_bandwidth", "d2h_latency_s", "h2d_latency_s",
                                "copy_engines"));
  EXPECT_TRUE(json["device_memory_bytes"].is_number_integer());
  EXPECT_TRUE(json["copy_engines"].is_number_integer());
}

TEST(HardwareProfileTest, MinimalProfileTakesTheDefaults) {
  absl::StatusOr<HardwareProfile> profile = ParseHardwareProfile(R"({
    "name": "minimal", "device_memory_bytes": 8589934592, "fp32_flops": 1e13,
    "memory_bandwidth": 5e11, "d2h_bandwidth": 1e10, "h2d_bandwidth": 1e10})");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  EXPECT_EQ(profile->name, "minimal");
  EXPECT_EQ(profile->reserved_bytes, 0);
  EXPECT_EQ(profile->workspace_limit_bytes, 0);  // the kernels keep their own scratch
  EXPECT_EQ(profile->tf32_flops, 0);
  EXPECT_EQ(profile->compute_efficiency, 1.0);
  EXPECT_EQ(profile->tf32_efficiency, 0);  // unset: compute_efficiency applies
  EXPECT_EQ(profile->efficiency(MathMode::kTf32), 1.0);
  EXPECT_EQ(profile->memory_efficiency, 1.0);
  EXPECT_EQ(profile->launch_overhead_s, 0);
  EXPECT_EQ(profile->h2d_latency_s, 0);
  EXPECT_EQ(profile->copy_engines, 2);
}

TEST(HardwareProfileTest, ByteCountsMayUseExponentsIfWhole) {
  absl::StatusOr<HardwareProfile> profile =
      ParseHardwareProfile(WithField("device_memory_bytes", "16e9"));
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  EXPECT_EQ(profile->device_memory_bytes, 16'000'000'000);
}

struct BadProfile {
  const char* what;
  std::string json;
  std::vector<std::string> message_parts;
};

// gtest would otherwise print the parameter's bytes in every test's name.
void PrintTo(const BadProfile& bad, std::ostream* out) { *out << bad.what; }

class HardwareProfileErrorTest : public ::testing::TestWithParam<BadProfile> {};

TEST_P(HardwareProfileErrorTest, NamesTheField) {
  const std::string message = ParseError(GetParam().json);
  EXPECT_THAT(message, HasSubstr("hardware profile"));
  for (const std::string& part : GetParam().message_parts) EXPECT_THAT(message, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, HardwareProfileErrorTest,
    ::testing::Values(
        BadProfile{"missing", WithoutField("fp32_flops"), {"missing field 'fp32_flops'", "FLOP/s"}},
        BadProfile{"missing_name", WithoutField("name"), {"missing field 'name'"}},
        BadProfile{"negative",
                   WithField("memory_bandwidth", "-1"),
                   {"'memory_bandwidth' must be positive", "bytes/s", "got -1"}},
        BadProfile{"negative_latency",
                   WithField("h2d_latency_s", "-1e-6"),
                   {"'h2d_latency_s' must be zero or more", "seconds"}},
        BadProfile{
            "zero_link", WithField("d2h_bandwidth", "0"), {"'d2h_bandwidth' must be positive"}},
        BadProfile{
            "unknown", WithField("fp32_flop", "1e12"), {"unknown field 'fp32_flop'", "fp32_flops"}},
        BadProfile{"wrong_type",
                   WithField("fp32_flops", R"("fast")"),
                   {"'fp32_flops' must be a number", R"(got "fast")"}},
        BadProfile{"wrong_type_bool",
                   WithField("copy_engines", "true"),
                   {"'copy_engines' must be a whole number", "got true"}},
        BadProfile{"name_not_string", WithField("name", "7"), {"'name' must be a string", "got 7"}},
        BadProfile{"empty_name", WithField("name", R"("")"), {"'name' must not be empty"}},
        BadProfile{"fractional_bytes",
                   WithField("device_memory_bytes", "1.5"),
                   {"'device_memory_bytes' must be a whole number", "bytes", "got 1.5"}},
        BadProfile{"huge_bytes",
                   WithField("device_memory_bytes", "1e30"),
                   {"'device_memory_bytes' is too large for 64 bits"}},
        BadProfile{"negative_bytes",
                   WithField("reserved_bytes", "-1"),
                   {"'reserved_bytes' must be zero or more"}},
        BadProfile{"negative_workspace_limit",
                   WithField("workspace_limit_bytes", "-1"),
                   {"'workspace_limit_bytes' must be zero or more"}},
        BadProfile{"reserve_too_big",
                   WithField("reserved_bytes", "25769803776"),
                   {"'reserved_bytes'", "less than device_memory_bytes"}},
        BadProfile{"efficiency_above_one",
                   WithField("compute_efficiency", "1.5"),
                   {"'compute_efficiency' must be in (0, 1]", "got 1.5"}},
        BadProfile{"fp16_efficiency_above_one",
                   WithField("fp16_efficiency", "1.2"),
                   {"'fp16_efficiency' must be 0 (unset) or in (0, 1]", "got 1.2"}},
        BadProfile{"efficiency_zero",
                   WithField("memory_efficiency", "0"),
                   {"'memory_efficiency' must be in (0, 1]"}},
        BadProfile{"copy_engines",
                   WithField("copy_engines", "3"),
                   {"'copy_engines' must be 1 or 2", "got 3"}},
        BadProfile{"not_an_object", "[1, 2]", {"must be a JSON object"}},
        BadProfile{"not_json", R"({"name": "x",)", {"not valid JSON", "line 1"}},
        BadProfile{"empty", "", {"not valid JSON"}}),
    [](const ::testing::TestParamInfo<BadProfile>& param_info) {
      return std::string(param_info.param.what);
    });

TEST(MathModeTest, NamesRoundTrip) {
  for (MathMode mode : {MathMode::kFp32, MathMode::kTf32, MathMode::kFp16}) {
    EXPECT_EQ(ParseMathMode(MathModeName(mode)), mode);
  }
  EXPECT_EQ(MathModeName(MathMode::kTf32), "tf32");
  EXPECT_EQ(ParseMathMode("bf16"), std::nullopt);
}

TEST(MathModeTest, PeakFlopsPicksTheField) {
  const HardwareProfile profile = Custom();
  EXPECT_EQ(profile.peak_flops(MathMode::kFp32), 30e12);
  EXPECT_EQ(profile.peak_flops(MathMode::kTf32), 60e12);
  EXPECT_EQ(profile.peak_flops(MathMode::kFp16), 120e12);
}

TEST(LoadHardwareProfileTest, PresetByName) {
  absl::StatusOr<HardwareProfile> profile = LoadHardwareProfile("gh200-96g-c2c");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  EXPECT_EQ(profile->name, "gh200-96g-c2c");
  // NVLink-C2C measures faster towards the GPU than back.
  EXPECT_GT(profile->h2d_bandwidth, profile->d2h_bandwidth);
}

TEST(LoadHardwareProfileTest, UnknownNameListsThePresets) {
  absl::StatusOr<HardwareProfile> profile = LoadHardwareProfile("v100");
  ASSERT_FALSE(profile.ok());
  EXPECT_EQ(profile.status().code(), absl::StatusCode::kNotFound);
  const std::string message(StatusMessage(profile.status()));
  EXPECT_THAT(message, HasSubstr("'v100'"));
  for (const HardwareProfile& preset : HardwarePresets()) {
    EXPECT_THAT(message, HasSubstr(preset.name));
  }
}

// A file written in the test's temporary directory, removed at the end.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text) : path_(::testing::TempDir() + name) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(LoadHardwareProfileTest, ReadsAFile) {
  const TempFile file("spillway_lab_gpu.json", HardwareProfileToJson(Custom()));
  absl::StatusOr<HardwareProfile> profile = LoadHardwareProfile(file.path());
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  EXPECT_EQ(*profile, Custom());
}

TEST(LoadHardwareProfileTest, BadFileNamesThePathAndTheField) {
  const TempFile file("spillway_bad_gpu.json", WithField("h2d_bandwidth", R"("fast")"));
  absl::StatusOr<HardwareProfile> profile = LoadHardwareProfile(file.path());
  ASSERT_FALSE(profile.ok());
  EXPECT_THAT(StatusMessage(profile.status()),
              AllOf(HasSubstr(file.path()), HasSubstr("'h2d_bandwidth' must be a number")));
}

}  // namespace
}  // namespace spillway::analysis
