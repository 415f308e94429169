#include "ir/attributes.h"

#include <cmath>
#include <cstdio>

#include "fmt/format.h"
#include "support/check.h"

namespace spillway::ir {
namespace {

std::string_view TypeName(const AttrValue& value) {
  switch (value.index()) {
    case 0:
      return "bool";
    case 1:
      return "int";
    case 2:
      return "float";
    case 3:
      return "string";
    case 4:
      return "int list";
    default:
      return "float list";
  }
}

absl::Status WrongType(std::string_view name, std::string_view wanted, const AttrValue& got) {
  return absl::InvalidArgumentError(
      fmt::format("attribute '{}' must be a {}, got a {}", name, wanted, TypeName(got)));
}

absl::Status Missing(std::string_view name) {
  return absl::InvalidArgumentError(fmt::format("missing attribute '{}'", name));
}

std::string FloatToString(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  char buffer[32];
  // The shortest of %.{1..17}g that reads back to the same double.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

template <typename T>
absl::StatusOr<T> Get(const AttrMap& attrs, std::string_view name, std::string_view wanted) {
  auto it = attrs.values().find(name);
  if (it == attrs.values().end()) return Missing(name);
  if (const T* value = std::get_if<T>(&it->second)) return *value;
  return WrongType(name, wanted, it->second);
}

}  // namespace

void AttrMap::Erase(std::string_view name) {
  auto it = values_.find(name);
  if (it != values_.end()) values_.erase(it);
}

absl::StatusOr<bool> AttrMap::GetBool(std::string_view name) const {
  return Get<bool>(*this, name, "bool");
}
absl::StatusOr<int64_t> AttrMap::GetInt(std::string_view name) const {
  return Get<int64_t>(*this, name, "int");
}
absl::StatusOr<double> AttrMap::GetFloat(std::string_view name) const {
  auto it = values_.find(name);
  if (it != values_.end()) {
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  }
  return Get<double>(*this, name, "float");
}
absl::StatusOr<std::string> AttrMap::GetString(std::string_view name) const {
  return Get<std::string>(*this, name, "string");
}
absl::StatusOr<IntList> AttrMap::GetInts(std::string_view name) const {
  return Get<IntList>(*this, name, "int list");
}
absl::StatusOr<FloatList> AttrMap::GetFloats(std::string_view name) const {
  auto it = values_.find(name);
  if (it != values_.end()) {
    if (const IntList* ints = std::get_if<IntList>(&it->second)) {
      return FloatList(ints->begin(), ints->end());
    }
  }
  return Get<FloatList>(*this, name, "float list");
}

absl::StatusOr<bool> AttrMap::GetBool(std::string_view name, bool fallback) const {
  return Has(name) ? GetBool(name) : fallback;
}
absl::StatusOr<int64_t> AttrMap::GetInt(std::string_view name, int64_t fallback) const {
  return Has(name) ? GetInt(name) : fallback;
}
absl::StatusOr<double> AttrMap::GetFloat(std::string_view name, double fallback) const {
  return Has(name) ? GetFloat(name) : fallback;
}
absl::StatusOr<std::string> AttrMap::GetString(std::string_view name, std::string fallback) const {
  return Has(name) ? GetString(name) : fallback;
}
absl::StatusOr<IntList> AttrMap::GetInts(std::string_view name, IntList fallback) const {
  return Has(name) ? GetInts(name) : fallback;
}

bool AttrMap::Bool(std::string_view name) const {
  auto v = GetBool(name);
  SPILLWAY_CHECK(v.ok(), "validated bool attribute missing");
  return *v;
}
int64_t AttrMap::Int(std::string_view name) const {
  auto v = GetInt(name);
  SPILLWAY_CHECK(v.ok(), "validated int attribute missing");
  return *v;
}
double AttrMap::Float(std::string_view name) const {
  auto v = GetFloat(name);
  SPILLWAY_CHECK(v.ok(), "validated float attribute missing");
  return *v;
}
std::string AttrMap::String(std::string_view name) const {
  auto v = GetString(name);
  SPILLWAY_CHECK(v.ok(), "validated string attribute missing");
  return *v;
}
IntList AttrMap::Ints(std::string_view name) const {
  auto v = GetInts(name);
  SPILLWAY_CHECK(v.ok(), "validated int list attribute missing");
  return *v;
}

std::string AttrValueToString(const AttrValue& value) {
  struct Printer {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(double d) const { return FloatToString(d); }
    std::string operator()(const std::string& s) const {
      std::string out = "\"";
      for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      return out + "\"";
    }
    std::string operator()(const IntList& list) const {
      return fmt::format("[{}]", fmt::join(list, ","));
    }
    std::string operator()(const FloatList& list) const {
      // An empty float list prints as "f[]" so it does not read back as an int list.
      if (list.empty()) return "f[]";
      std::string out = "[";
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += ",";
        out += FloatToString(list[i]);
      }
      return out + "]";
    }
  };
  return std::visit(Printer{}, value);
}

}  // namespace spillway::ir
