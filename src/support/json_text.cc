#include "support/json_text.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace spillway {
namespace {

using Json = nlohmann::json;

// A SAX pass that only checks: it keeps the path to the current value and,
// per open object, the keys seen so far.
class StrictChecker : public nlohmann::json_sax<Json> {
 public:
  const std::string& error() const { return error_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t value, const string_t& text) override {
    if (!std::isfinite(value))
      return Fail(fmt::format("the number {} does not fit a double", text));
    return Value();
  }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(/*object=*/true); }
  bool key(string_t& key) override {
    Scope& scope = scopes_.back();
    if (!scope.keys.insert(key).second) {
      scope.name = key;
      return Fail("the key is given twice");
    }
    scope.name = key;
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(/*object=*/false); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string& last_token,
                   const nlohmann::detail::exception& error) override {
    // The lexer refuses a number beyond double before number_float sees it.
    if (std::string_view(error.what()).find("number overflow") != std::string_view::npos) {
      return Fail(fmt::format("the number {} does not fit a double", last_token));
    }
    // what() starts with "[json.exception.parse_error.101] ", which says nothing to a user.
    std::string_view message = error.what();
    const size_t tag_end = message.find("] ");
    if (tag_end != std::string_view::npos) message.remove_prefix(tag_end + 2);
    error_ = fmt::format("not valid JSON: {}", message);
    return false;
  }

 private:
  struct Scope {
    bool object = false;
    std::string name;  // the current key, or the current element's index
    int64_t next_index = 0;
    std::set<std::string> keys;
  };

  // A value ends: inside an array, the next one gets the next index.
  bool Value() {
    if (!scopes_.empty() && !scopes_.back().object) {
      scopes_.back().name = std::to_string(++scopes_.back().next_index);
    }
    return true;
  }
  bool Open(bool object) {
    if (static_cast<int>(scopes_.size()) >= kMaxJsonDepth) {
      return Fail(fmt::format("nested deeper than {} levels", kMaxJsonDepth));
    }
    scopes_.push_back({.object = object, .name = object ? "" : "0", .next_index = 0, .keys = {}});
    return true;
  }
  bool Close() {
    scopes_.pop_back();
    return Value();
  }
  bool Fail(std::string_view what) {
    std::vector<std::string> path;
    for (const Scope& scope : scopes_) {
      if (!scope.name.empty()) path.push_back(scope.name);
    }
    error_ = path.empty() ? std::string(what)
                          : fmt::format("field '{}': {}", fmt::join(path, "."), what);
    return false;
  }

  std::vector<Scope> scopes_;
  std::string error_;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text) {
  StrictChecker checker;
  if (!Json::sax_parse(text.begin(), text.end(), &checker)) {
    return absl::InvalidArgumentError(checker.error());
  }
  return Json::parse(text.begin(), text.end());
}

}  // namespace spillway
