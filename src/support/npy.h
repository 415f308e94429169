// NumPy .npy files (format versions 1 and 2), the way tensors travel between
// Spillway and Python: `numpy.save` writes them, `numpy.load` reads them.
//
// Only what crosses that boundary is supported: little-endian float32 and
// int64 arrays in C order. Anything else (another dtype, big-endian data,
// Fortran order, object arrays) is refused with a message that names the file
// and says what it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway {

enum class NpyDType : uint8_t { kF32, kI64 };

std::string_view NpyDTypeName(NpyDType dtype);  // "float32", "int64"
int64_t NpyDTypeSize(NpyDType dtype);

struct NpyArray {
  NpyDType dtype = NpyDType::kF32;
  std::vector<int64_t> shape;   // empty: a scalar
  std::vector<std::byte> data;  // C order, native (little-endian) byte order
};

// Parses the bytes of a .npy file; `name` (the file's path) prefixes errors.
absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, std::string_view name);
// The largest .npy file ReadNpyFile reads: 16 GiB, more than any input a
// step takes on the machines Spillway plans for.
inline constexpr int64_t kMaxNpyFileBytes = int64_t{16} << 30;
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// A version 1.0 .npy file. The data size must match the shape.
std::string SerializeNpy(NpyDType dtype, std::span<const int64_t> shape,
                         std::span<const std::byte> data);
absl::Status WriteNpyFile(const std::string& path, NpyDType dtype, std::span<const int64_t> shape,
                          std::span<const std::byte> data);

}  // namespace spillway
