// Typed node attributes. Stored in a sorted map so printing is deterministic.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace spillway::ir {

using IntList = std::vector<int64_t>;
using FloatList = std::vector<double>;
using AttrValue = std::variant<bool, int64_t, double, std::string, IntList, FloatList>;

class AttrMap {
 public:
  AttrMap() = default;
  AttrMap(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

  void Set(std::string name, AttrValue value) { values_[std::move(name)] = std::move(value); }
  bool Has(std::string_view name) const { return values_.find(name) != values_.end(); }
  void Erase(std::string_view name);
  const std::map<std::string, AttrValue, std::less<>>& values() const { return values_; }

  // Typed reads: an error if the attribute is missing or of another type. An
  // integer attribute reads as a float too, so `momentum=0` is accepted.
  absl::StatusOr<bool> GetBool(std::string_view name) const;
  absl::StatusOr<int64_t> GetInt(std::string_view name) const;
  absl::StatusOr<double> GetFloat(std::string_view name) const;
  absl::StatusOr<std::string> GetString(std::string_view name) const;
  absl::StatusOr<IntList> GetInts(std::string_view name) const;
  absl::StatusOr<FloatList> GetFloats(std::string_view name) const;

  // Reads with a default for a missing attribute (a wrong type is still an error).
  absl::StatusOr<bool> GetBool(std::string_view name, bool fallback) const;
  absl::StatusOr<int64_t> GetInt(std::string_view name, int64_t fallback) const;
  absl::StatusOr<double> GetFloat(std::string_view name, double fallback) const;
  absl::StatusOr<std::string> GetString(std::string_view name, std::string fallback) const;
  absl::StatusOr<IntList> GetInts(std::string_view name, IntList fallback) const;

  // Reads that CHECK: for code after validation, where the attribute is known good.
  bool Bool(std::string_view name) const;
  int64_t Int(std::string_view name) const;
  double Float(std::string_view name) const;
  std::string String(std::string_view name) const;
  IntList Ints(std::string_view name) const;

  friend bool operator==(const AttrMap&, const AttrMap&) = default;

 private:
  std::map<std::string, AttrValue, std::less<>> values_;
};

// The text format's spelling of a value: true, 3, 0.5, "tanh", [1,2], [0.5,1.0].
// Floats always carry a '.' or exponent and enough digits to round-trip.
std::string AttrValueToString(const AttrValue& value);

}  // namespace spillway::ir
