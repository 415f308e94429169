#include "support/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fmt/format.h"

namespace spillway {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> Bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A file as numpy.save(f, numpy.arange(6, dtype=numpy.float32).reshape(2, 3))
// writes it (NumPy 1.24): header padded to 128 bytes in all, little-endian data.
std::string NumpyWrittenFile() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::string bytes = "\x93NUMPY\x01";
  bytes.push_back('\0');
  bytes.push_back(static_cast<char>(header.size()));
  bytes.push_back('\0');
  bytes += header;
  const std::vector<std::byte> data = Bytes({0, 1, 2, 3, 4, 5});
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
  return bytes;
}

TEST(Npy, ReadsWhatNumpyWrites) {
  absl::StatusOr<NpyArray> array = ParseNpy(NumpyWrittenFile(), "a.npy");
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, NpyDType::kF32);
  EXPECT_EQ(array->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(array->data, Bytes({0, 1, 2, 3, 4, 5}));
}

std::string WithHeader(const std::string& dict, size_t data_bytes) {
  std::string bytes = "\x93NUMPY\x01";
  bytes.push_back('\0');
  bytes.push_back(static_cast<char>(dict.size() + 1));
  bytes.push_back('\0');
  bytes += dict + "\n";
  bytes.append(data_bytes, '\0');
  return bytes;
}

TEST(Npy, WritesAlignedFilesThatReadBack) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {2, 3}, {1, 2, 3, 1}, {0, 4}};
  for (const std::vector<int64_t>& shape : shapes) {
    int64_t elements = 1;
    for (int64_t dim : shape) elements *= dim;
    std::vector<float> values(static_cast<size_t>(elements));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 1.0f;
    const std::vector<std::byte> data = Bytes(values);
    const std::string bytes = SerializeNpy(NpyDType::kF32, shape, data);
    const size_t header_end = bytes.size() - data.size();
    EXPECT_EQ(header_end % 64, 0u);
    EXPECT_EQ(bytes[header_end - 1], '\n');
    absl::StatusOr<NpyArray> array = ParseNpy(bytes, "x.npy");
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_EQ(array->dtype, NpyDType::kF32);
    EXPECT_EQ(array->shape, shape);
    EXPECT_EQ(array->data, data);
  }
  // A 1-D shape is a 1-tuple, which Python spells with a trailing comma.
  EXPECT_THAT(SerializeNpy(NpyDType::kF32, std::vector<int64_t>{3}, Bytes({1, 2, 3})),
              HasSubstr("'shape': (3,)"));
}

TEST(Npy, Int64RoundTripsThroughAFile) {
  const std::vector<int64_t> labels = {3, -1, 1LL << 40};
  std::vector<std::byte> data(labels.size() * sizeof(int64_t));
  std::memcpy(data.data(), labels.data(), data.size());
  const std::string path = fmt::format("{}/npy_test_{}.npy", ::testing::TempDir(), getpid());
  const std::vector<int64_t> shape = {3};
  ASSERT_TRUE(WriteNpyFile(path, NpyDType::kI64, shape, data).ok());
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, NpyDType::kI64);
  EXPECT_EQ(array->shape, shape);
  EXPECT_EQ(array->data, data);
  std::remove(path.c_str());
}

TEST(Npy, ReadsVersion2Headers) {
  std::string bytes = WithHeader("{'descr': '<i8', 'fortran_order': False, 'shape': (2,)}", 16);
  // Version 2: a 4-byte header length.
  bytes[6] = '\x02';
  bytes.insert(10, 2, '\0');
  absl::StatusOr<NpyArray> array = ParseNpy(bytes, "v2.npy");
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->shape, (std::vector<int64_t>{2}));
}

struct BadFile {
  std::string bytes;
  std::string message;
};

TEST(Npy, RefusesWhatItCannotRepresentWithAReason) {
  const std::vector<BadFile> cases = {
      {"PK\x03\x04 a zip file", "not a NumPy .npy file"},
      {"\x93NUMPY\x01", "not a NumPy .npy file"},
      {WithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8).substr(0, 20),
       "truncated"},
      {WithHeader("{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", 8), "'>f4'"},
      {WithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", 16), "'<f8'"},
      {WithHeader("{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", 16), "'|O'"},
      {WithHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2)}", 16), "Fortran order"},
      {WithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", 20),
       "needs 24 data bytes; the file has 20"},
      {WithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", 0),
       "expected a dimension"},
      {WithHeader("{'descr': '<f4', 'fortran_order': False}", 4), "lacks"},
      {WithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8),
       "unknown key 'x'"},
      {WithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': "
                  "(4294967296, 4294967296, 4294967296)}",
                  0),
       "overflows"},
  };
  for (const BadFile& bad : cases) {
    absl::StatusOr<NpyArray> array = ParseNpy(bad.bytes, "bad.npy");
    ASSERT_FALSE(array.ok()) << bad.message;
    EXPECT_THAT(array.status().message(), HasSubstr("bad.npy: ")) << bad.message;
    EXPECT_THAT(array.status().message(), HasSubstr(bad.message));
  }
  EXPECT_THAT(ReadNpyFile("/nonexistent/x.npy").status().message(),
              HasSubstr("cannot open .npy file '/nonexistent/x.npy'"));
}

}  // namespace
}  // namespace spillway
