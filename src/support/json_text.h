// JSON parsing for the files users write (hardware profiles), stricter than
// the JSON grammar: the errors it gives name the field they are about.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace spillway {

// Objects and arrays nest at most this deep; a deeper document is refused
// before it is built (destroying a deeply nested value recurses).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`, refusing what JSON allows but a file of fields should not
// hold: a key given twice in one object, a number beyond double's range, and
// nesting deeper than kMaxJsonDepth. Errors are InvalidArgument and name the
// field by its path ("field 'links.0.bandwidth': ...") or give the position
// of a syntax error.
absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text);

}  // namespace spillway
