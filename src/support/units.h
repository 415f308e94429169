// Human-readable sizes and counts, and parsing of byte sizes from the CLI.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace spillway {

// "0 B", "512 B", "1.50 KiB", "23.84 GiB": binary units, three significant digits.
std::string FormatBytes(int64_t bytes);

// "950", "1.23 K", "4.09 G", "1.02 T": decimal units for FLOPs and parameter counts.
std::string FormatCount(double count);

// "+4.2%", "-0.7%" for a fraction 0.042 or -0.007 (an overhead, a speedup, a
// gap), to a tenth of a percent; a fraction that rounds to zero reads +0.0%,
// so a step a hair faster than another (summed in another order) is not -0.0%.
std::string FormatSignedPercent(double fraction);

// Parses "16GiB", "512MiB", "1.5GB", "4096" (plain bytes). Binary (KiB, MiB, GiB,
// TiB) and decimal (KB, MB, GB, TB) suffixes; case-insensitive; optional space.
absl::StatusOr<int64_t> ParseBytes(std::string_view text);

}  // namespace spillway
