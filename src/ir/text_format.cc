#include "ir/text_format.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fmt/format.h"
#include "ir/verifier.h"
#include "support/status_macros.h"

namespace spillway::ir {
namespace {

// Characters of a name written without quotes. '.' and '/' appear in the names
// autodiff and the ONNX importer make ("bn1.saved_mean", "/layer1/conv").
bool IsBareNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-' || c == '/';
}

bool IsBareName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!IsBareNameChar(c)) return false;
  }
  return true;
}

// A name as written: bare when it can be, else quoted like a string attribute.
std::string NameToString(std::string_view name) {
  if (IsBareName(name)) return std::string(name);
  return AttrValueToString(std::string(name));
}

// ---------------------------------------------------------------------------
// Printer

class Printer {
 public:
  explicit Printer(const Graph& graph) : graph_(graph) {}

  std::string Print() {
    out_ = fmt::format("graph {} {{\n", NameToString(graph_.name()));
    std::set<ValueId> graph_inputs(graph_.inputs().begin(), graph_.inputs().end());
    // Inputs and nodes are printed in creation order, interleaved as they
    // were made, so that parsing the text gives every value and node its id again.
    size_t next_input = 0;
    for (const Node& node : graph_.nodes()) {
      if (!node.outputs.empty()) {
        while (next_input < graph_.inputs().size() &&
               graph_.inputs()[next_input] < node.outputs.front()) {
          PrintInput(graph_.inputs()[next_input++]);
        }
      }
      PrintNode(node);
    }
    while (next_input < graph_.inputs().size()) PrintInput(graph_.inputs()[next_input++]);
    for (const Value& value : graph_.values()) {
      // A value without producer that is not a graph input has no statement of
      // its own; a comment keeps it visible in a dump of a broken graph.
      if (value.producer == kNoNode && !graph_inputs.contains(value.id)) {
        out_ +=
            fmt::format("  # orphan value {}: {}\n", ValueRef(value.id), TypeToString(value.type));
      }
    }
    for (ValueId output : graph_.outputs()) out_ += fmt::format("  output {}\n", ValueRef(output));
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  bool ValidValue(ValueId id) const { return id >= 0 && id < graph_.num_values(); }
  bool ValidNode(NodeId id) const { return id >= 0 && id < graph_.num_nodes(); }

  std::string ValueRef(ValueId id) const {
    if (!ValidValue(id)) return fmt::format("%\"<missing value {}>\"", id);
    return "%" + NameToString(graph_.value(id).name);
  }

  std::string NodeRef(NodeId id) const {
    if (!ValidNode(id)) return fmt::format("\"<missing node {}>\"", id);
    return NameToString(graph_.node(id).name);
  }

  void PrintInput(ValueId id) {
    if (!ValidValue(id)) {
      out_ += fmt::format("  input {}: f32[]\n", ValueRef(id));
      return;
    }
    const Value& value = graph_.value(id);
    out_ += fmt::format("  {} {}: {}\n", ValueKindName(value.kind), ValueRef(id),
                        TypeToString(value.type));
  }

  void PrintNode(const Node& node) {
    out_ += "  ";
    // The node's name is implied by its first output unless they differ.
    bool implied_name = !node.outputs.empty() && ValidValue(node.outputs.front()) &&
                        graph_.value(node.outputs.front()).name == node.name;
    if (!implied_name) out_ += fmt::format("node {}: ", NameToString(node.name));
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      ValueId id = node.outputs[i];
      std::string type = ValidValue(id) ? TypeToString(graph_.value(id).type) : "f32[]";
      out_ += fmt::format("{}{}: {}", i == 0 ? "" : ", ", ValueRef(id), type);
    }
    if (!node.outputs.empty()) out_ += " = ";
    out_ += OpName(node.op);
    out_ += "(";
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      out_ += fmt::format("{}{}", i == 0 ? "" : ", ", ValueRef(node.inputs[i]));
    }
    out_ += ")";
    if (!node.attrs.values().empty()) {
      out_ += " {";
      bool first = true;
      for (const auto& [name, value] : node.attrs.values()) {
        out_ +=
            fmt::format("{}{}={}", first ? "" : ", ", NameToString(name), AttrValueToString(value));
        first = false;
      }
      out_ += "}";
    }
    if (node.phase != Phase::kForward) out_ += fmt::format(" @{}", PhaseName(node.phase));
    if (!node.control_inputs.empty()) {
      out_ += " after(";
      for (size_t i = 0; i < node.control_inputs.size(); ++i) {
        out_ += fmt::format("{}{}", i == 0 ? "" : ", ", NodeRef(node.control_inputs[i]));
      }
      out_ += ")";
    }
    out_ += "\n";
  }

  const Graph& graph_;
  std::string out_;
};

// ---------------------------------------------------------------------------
// Parser

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<Graph> Parse() {
    SkipSpace();
    if (!ConsumeKeyword("graph")) return Error(pos_, "expected 'graph' at the start of the text");
    SkipSpace();
    ASSIGN_OR_RETURN(std::string name, ParseName("a graph name after 'graph'"));
    Graph graph(std::move(name));
    graph_ = &graph;
    RETURN_IF_ERROR(Expect('{', "after the graph name"));
    while (true) {
      SkipSpace();
      if (AtEnd()) return Error(pos_, "expected '}' at the end of the graph");
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      RETURN_IF_ERROR(ParseStatement());
    }
    SkipSpace();
    if (!AtEnd()) return Error(pos_, "expected end of text after the graph's closing '}'");
    RETURN_IF_ERROR(ResolveReferences());
    graph_ = nullptr;
    return graph;
  }

 private:
  // A use of a value or node by name, resolved once the whole text is read,
  // because a use may come before its definition.
  struct Reference {
    enum class Kind { kDataInput, kControlInput, kGraphOutput };
    Kind kind;
    std::string name;
    size_t pos;
    NodeId node = kNoNode;  // the user, for data and control inputs
  };

  // --- Lexical helpers -----------------------------------------------------

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  char PeekAt(size_t offset) const {
    return pos_ + offset < text_.size() ? text_[pos_ + offset] : '\0';
  }

  // Whitespace, and comments from '#' to the end of the line.
  void SkipSpace() {
    while (!AtEnd()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view PeekWord() const {
    size_t end = pos_;
    while (end < text_.size() && IsBareNameChar(text_[end])) ++end;
    return text_.substr(pos_, end - pos_);
  }

  // Consumes `word` if it is the whole next word (so "nodes" is not "node").
  bool ConsumeKeyword(std::string_view word) {
    if (PeekWord() != word) return false;
    pos_ += word.size();
    return true;
  }

  std::string Location(size_t pos) const {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return fmt::format("{}:{}", line, pos - line_start + 1);
  }

  absl::Status Error(size_t pos, std::string_view message) const {
    return absl::InvalidArgumentError(fmt::format("{}: {}", Location(pos), message));
  }

  // Skips space and consumes `c`, or fails with "expected 'c' <context>".
  absl::Status Expect(char c, std::string_view context) {
    SkipSpace();
    if (Peek() != c) return Error(pos_, fmt::format("expected '{}' {}", c, context));
    ++pos_;
    return absl::OkStatus();
  }

  bool TryConsume(char c) {
    SkipSpace();
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  // --- Tokens --------------------------------------------------------------

  absl::StatusOr<std::string> ParseQuoted() {
    size_t start = pos_;
    ++pos_;  // the opening quote
    std::string result;
    while (true) {
      if (AtEnd()) return Error(start, "unterminated string");
      char c = text_[pos_++];
      if (c == '"') return result;
      if (c != '\\') {
        result += c;
        continue;
      }
      if (AtEnd()) return Error(start, "unterminated string");
      char escaped = text_[pos_++];
      switch (escaped) {
        case '"':
        case '\\':
          result += escaped;
          break;
        case 'n':
          result += '\n';
          break;
        case 't':
          result += '\t';
          break;
        case 'r':
          result += '\r';
          break;
        default:
          return Error(pos_ - 2, fmt::format("unknown escape '\\{}' in string", escaped));
      }
    }
  }

  // A bare or quoted name; `what` completes "expected ...".
  absl::StatusOr<std::string> ParseName(std::string_view what) {
    SkipSpace();
    size_t start = pos_;
    std::string name;
    if (Peek() == '"') {
      ASSIGN_OR_RETURN(name, ParseQuoted());
    } else {
      name = std::string(PeekWord());
      pos_ += name.size();
      if (name.empty()) return Error(start, fmt::format("expected {}", what));
    }
    if (name.empty()) return Error(start, "names cannot be empty");
    return name;
  }

  // '%' name.
  absl::StatusOr<std::string> ParseValueName(std::string_view context) {
    SkipSpace();
    if (Peek() != '%') return Error(pos_, fmt::format("expected a value name (%name) {}", context));
    ++pos_;
    if (Peek() != '"' && !IsBareNameChar(Peek())) {
      return Error(pos_, "expected a name after '%'");
    }
    return ParseName("a name after '%'");
  }

  absl::StatusOr<int64_t> ParseInteger(std::string_view what) {
    SkipSpace();
    size_t start = pos_;
    if (Peek() == '-' || Peek() == '+') ++pos_;
    while (Peek() >= '0' && Peek() <= '9') ++pos_;
    std::string_view digits = text_.substr(start, pos_ - start);
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    int64_t value = 0;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error == std::errc::result_out_of_range) {
      return Error(start, fmt::format("integer {} does not fit in 64 bits", digits));
    }
    if (error != std::errc() || end != digits.data() + digits.size() || IsBareNameChar(Peek())) {
      return Error(start, fmt::format("expected {}", what));
    }
    return value;
  }

  // An integer or a float: "3", "-2", "0.5", "1e-05", "inf", "-inf", "nan".
  // Floats are told apart by a '.', an exponent or being inf/nan, which is how
  // AttrValueToString writes them.
  absl::StatusOr<std::variant<int64_t, double>> ParseNumber() {
    SkipSpace();
    size_t start = pos_;
    bool negative = false;
    if (Peek() == '-' || Peek() == '+') {
      negative = Peek() == '-';
      ++pos_;
    }
    std::string_view word = PeekWord();
    if (word == "inf" || word == "nan") {
      pos_ += word.size();
      double value = word == "inf" ? std::numeric_limits<double>::infinity()
                                   : std::numeric_limits<double>::quiet_NaN();
      return negative ? -value : value;
    }
    size_t digits_start = pos_;
    bool is_float = false;
    while (!AtEnd()) {
      char c = Peek();
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.') {
        is_float = true;
        ++pos_;
      } else if ((c == 'e' || c == 'E') && pos_ > digits_start) {
        is_float = true;
        ++pos_;
        if (Peek() == '+' || Peek() == '-') ++pos_;
      } else {
        break;
      }
    }
    std::string_view digits = text_.substr(digits_start, pos_ - digits_start);
    if (digits.empty() || IsBareNameChar(Peek())) {
      // Take the rest of the word so the message shows what was written.
      while (IsBareNameChar(Peek())) ++pos_;
      return Error(start, fmt::format("expected a number, got '{}'",
                                      text_.substr(start, std::max(pos_ - start, size_t{1}))));
    }
    std::string_view number =
        text_.substr(negative ? start : digits_start, pos_ - (negative ? start : digits_start));
    if (is_float) {
      double value = 0;
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
      if (error == std::errc::result_out_of_range) {
        return Error(start, fmt::format("float {} is out of range", number));
      }
      if (error != std::errc() || end != number.data() + number.size()) {
        return Error(start, fmt::format("malformed float '{}'", number));
      }
      return value;
    }
    int64_t value = 0;
    auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (error == std::errc::result_out_of_range) {
      return Error(start, fmt::format("integer {} does not fit in 64 bits", number));
    }
    if (error != std::errc() || end != number.data() + number.size()) {
      return Error(start, fmt::format("malformed integer '{}'", number));
    }
    return value;
  }

  // '[' number (',' number)* ']'. A list is of floats if it is written "f[...]"
  // or holds any float; "[]" is an empty int list.
  absl::StatusOr<AttrValue> ParseList(bool float_list) {
    ++pos_;  // '['
    std::vector<std::variant<int64_t, double>> items;
    if (!TryConsume(']')) {
      while (true) {
        ASSIGN_OR_RETURN(auto item, ParseNumber());
        if (std::holds_alternative<double>(item)) float_list = true;
        items.push_back(item);
        if (TryConsume(']')) break;
        RETURN_IF_ERROR(Expect(',', "or ']' in a list"));
      }
    }
    if (float_list) {
      FloatList values;
      for (const auto& item : items) {
        values.push_back(std::holds_alternative<double>(item)
                             ? std::get<double>(item)
                             : static_cast<double>(std::get<int64_t>(item)));
      }
      return AttrValue(std::move(values));
    }
    IntList values;
    for (const auto& item : items) values.push_back(std::get<int64_t>(item));
    return AttrValue(std::move(values));
  }

  absl::StatusOr<AttrValue> ParseAttrValue(std::string_view attr_name) {
    SkipSpace();
    char c = Peek();
    if (c == '"') {
      ASSIGN_OR_RETURN(std::string text, ParseQuoted());
      return AttrValue(std::move(text));
    }
    if (c == '[') return ParseList(/*float_list=*/false);
    if (c == 'f' && PeekAt(1) == '[') {
      ++pos_;
      return ParseList(/*float_list=*/true);
    }
    if (ConsumeKeyword("true")) return AttrValue(true);
    if (ConsumeKeyword("false")) return AttrValue(false);
    if (c == '-' || c == '+' || (c >= '0' && c <= '9') || PeekWord() == "inf" ||
        PeekWord() == "nan") {
      ASSIGN_OR_RETURN(auto number, ParseNumber());
      if (std::holds_alternative<double>(number)) return AttrValue(std::get<double>(number));
      return AttrValue(std::get<int64_t>(number));
    }
    return Error(pos_,
                 fmt::format("expected a value for attribute '{}' (a bool, number, string or list)",
                             attr_name));
  }

  // dtype '[' dims ']' [layout]: "f32[1,8,8,16] nhwc", "i64[]".
  absl::StatusOr<TensorType> ParseType(std::string_view context) {
    SkipSpace();
    size_t start = pos_;
    std::string_view word = PeekWord();
    std::optional<DType> dtype = ParseDType(word);
    if (!dtype) {
      return Error(start, fmt::format("expected a type such as f32[1,8] {}", context));
    }
    pos_ += word.size();
    TensorType type;
    type.dtype = *dtype;
    if (Peek() != '[') {
      return Error(pos_, fmt::format("expected '[' after element type {}", word));
    }
    ++pos_;
    if (!TryConsume(']')) {
      while (true) {
        SkipSpace();
        size_t dim_start = pos_;
        ASSIGN_OR_RETURN(int64_t dim, ParseInteger("a dimension"));
        if (dim < 0) return Error(dim_start, fmt::format("dimension {} is negative", dim));
        type.shape.push_back(dim);
        if (TryConsume(']')) break;
        RETURN_IF_ERROR(Expect(',', "or ']' in a shape"));
      }
    }
    // A layout name may follow; anything else is the next token.
    size_t after_shape = pos_;
    SkipSpace();
    std::string_view layout_word = PeekWord();
    if (std::optional<Layout> layout = ParseLayout(layout_word)) {
      type.layout = *layout;
      pos_ += layout_word.size();
    } else {
      pos_ = after_shape;
    }
    return type;
  }

  // --- Statements ----------------------------------------------------------

  absl::Status ParseStatement() {
    size_t start = pos_;
    if (Peek() == '%') return ParseNode(start, std::nullopt);
    std::string_view word = PeekWord();
    if (word == "output") {
      pos_ += word.size();
      return ParseOutputs();
    }
    if (word == "node") {
      pos_ += word.size();
      ASSIGN_OR_RETURN(std::string name, ParseName("a node name after 'node'"));
      RETURN_IF_ERROR(Expect(':', fmt::format("after node name {}", NameToString(name))));
      return ParseNode(start, std::move(name));
    }
    std::optional<ValueKind> kind = ParseValueKind(word);
    if (kind && *kind != ValueKind::kIntermediate) {
      pos_ += word.size();
      return ParseInput(*kind);
    }
    return Error(start,
                 "expected a statement (input, param, buffer, state, node, output or %value) "
                 "or '}'");
  }

  absl::Status DefineValue(const std::string& name, size_t pos) {
    auto [it, inserted] = value_definitions_.emplace(name, pos);
    if (!inserted) {
      return Error(pos, fmt::format("value %{} is already defined at {}", NameToString(name),
                                    Location(it->second)));
    }
    return absl::OkStatus();
  }

  absl::Status ParseInput(ValueKind kind) {
    SkipSpace();
    size_t name_pos = pos_;
    ASSIGN_OR_RETURN(std::string name,
                     ParseValueName(fmt::format("after '{}'", ValueKindName(kind))));
    RETURN_IF_ERROR(Expect(':', fmt::format("after value name %{}", NameToString(name))));
    ASSIGN_OR_RETURN(TensorType type, ParseType(fmt::format("for value %{}", NameToString(name))));
    RETURN_IF_ERROR(DefineValue(name, name_pos));
    graph_->AddInput(std::move(name), std::move(type), kind);
    return absl::OkStatus();
  }

  absl::Status ParseOutputs() {
    while (true) {
      SkipSpace();
      size_t ref_pos = pos_;
      ASSIGN_OR_RETURN(std::string name, ParseValueName("after 'output'"));
      references_.push_back({Reference::Kind::kGraphOutput, std::move(name), ref_pos});
      if (!TryConsume(',')) return absl::OkStatus();
    }
  }

  // [results '='] op '(' operands ')' [attrs] [@phase] [after(...)]; `node_name`
  // is set when the statement began with "node NAME:".
  absl::Status ParseNode(size_t start, std::optional<std::string> node_name) {
    std::vector<std::pair<std::string, TensorType>> results;
    SkipSpace();
    if (Peek() == '%') {
      while (true) {
        SkipSpace();
        size_t name_pos = pos_;
        ASSIGN_OR_RETURN(std::string name, ParseValueName("in the results of a node"));
        RETURN_IF_ERROR(Expect(':', fmt::format("after value name %{}", NameToString(name))));
        ASSIGN_OR_RETURN(TensorType type,
                         ParseType(fmt::format("for value %{}", NameToString(name))));
        RETURN_IF_ERROR(DefineValue(name, name_pos));
        results.emplace_back(std::move(name), std::move(type));
        if (!TryConsume(',')) break;
      }
      RETURN_IF_ERROR(Expect('=', "after the results of a node"));
    } else if (!node_name) {
      return Error(pos_, "expected a value name (%name)");
    }
    if (!node_name) node_name = results.front().first;

    SkipSpace();
    size_t op_pos = pos_;
    std::string_view op_word = PeekWord();
    if (op_word.empty()) return Error(op_pos, "expected an op name");
    std::optional<OpKind> op = ParseOpKind(op_word);
    if (!op) return Error(op_pos, fmt::format("unknown op '{}'", op_word));
    pos_ += op_word.size();

    auto [definition, inserted] = node_definitions_.emplace(*node_name, start);
    if (!inserted) {
      return Error(start, fmt::format("node {} is already defined at {}", NameToString(*node_name),
                                      Location(definition->second)));
    }

    std::vector<Reference> operands;
    RETURN_IF_ERROR(Expect('(', fmt::format("after op name {}", op_word)));
    if (!TryConsume(')')) {
      while (true) {
        SkipSpace();
        size_t ref_pos = pos_;
        ASSIGN_OR_RETURN(std::string name,
                         ParseValueName(fmt::format("in the inputs of {}", op_word)));
        operands.push_back({Reference::Kind::kDataInput, std::move(name), ref_pos});
        if (TryConsume(')')) break;
        RETURN_IF_ERROR(Expect(',', fmt::format("or ')' in the inputs of {}", op_word)));
      }
    }

    AttrMap attrs;
    if (TryConsume('{')) {
      if (!TryConsume('}')) {
        while (true) {
          SkipSpace();
          size_t key_pos = pos_;
          ASSIGN_OR_RETURN(std::string key, ParseName("an attribute name"));
          if (attrs.Has(key)) {
            return Error(key_pos, fmt::format("attribute '{}' is given twice", key));
          }
          RETURN_IF_ERROR(Expect('=', fmt::format("after attribute name {}", key)));
          ASSIGN_OR_RETURN(AttrValue value, ParseAttrValue(key));
          attrs.Set(std::move(key), std::move(value));
          if (TryConsume('}')) break;
          RETURN_IF_ERROR(Expect(',', "or '}' between attributes"));
        }
      }
    }

    Phase phase = Phase::kForward;
    if (TryConsume('@')) {
      size_t phase_pos = pos_;
      std::optional<Phase> parsed = ParsePhase(PeekWord());
      if (!parsed) return Error(phase_pos, "expected forward, backward or update after '@'");
      pos_ += PeekWord().size();
      phase = *parsed;
    }

    std::vector<Reference> controls;
    size_t before_after = pos_;
    SkipSpace();
    if (ConsumeKeyword("after")) {
      RETURN_IF_ERROR(Expect('(', "after 'after'"));
      while (true) {
        SkipSpace();
        size_t ref_pos = pos_;
        ASSIGN_OR_RETURN(std::string name, ParseName("a node name in after(...)"));
        controls.push_back({Reference::Kind::kControlInput, std::move(name), ref_pos});
        if (TryConsume(')')) break;
        RETURN_IF_ERROR(Expect(',', "or ')' in after(...)"));
      }
    } else {
      pos_ = before_after;
    }

    NodeId id = graph_->AddNodeWithOutputs(*op, {}, std::move(attrs), *node_name, phase,
                                           std::move(results));
    for (Reference& reference : operands) {
      reference.node = id;
      references_.push_back(std::move(reference));
    }
    for (Reference& reference : controls) {
      reference.node = id;
      references_.push_back(std::move(reference));
    }
    return absl::OkStatus();
  }

  absl::Status ResolveReferences() {
    for (const Reference& reference : references_) {
      if (reference.kind == Reference::Kind::kControlInput) {
        std::optional<NodeId> predecessor = graph_->FindNode(reference.name);
        if (!predecessor) {
          return Error(reference.pos, fmt::format("undefined node {} in after(...)",
                                                  NameToString(reference.name)));
        }
        graph_->mutable_node(reference.node).control_inputs.push_back(*predecessor);
        continue;
      }
      std::optional<ValueId> value = graph_->FindValue(reference.name);
      if (!value) {
        return Error(reference.pos,
                     fmt::format("undefined value %{}", NameToString(reference.name)));
      }
      if (reference.kind == Reference::Kind::kDataInput) {
        graph_->mutable_node(reference.node).inputs.push_back(*value);
      } else {
        graph_->AddOutput(*value);
      }
    }
    return absl::OkStatus();
  }

  std::string_view text_;
  size_t pos_ = 0;
  Graph* graph_ = nullptr;
  std::map<std::string, size_t> value_definitions_;
  std::map<std::string, size_t> node_definitions_;
  std::vector<Reference> references_;
};

}  // namespace

std::string PrintGraph(const Graph& graph) { return Printer(graph).Print(); }

absl::StatusOr<Graph> ParseGraph(std::string_view text) { return Parser(text).Parse(); }

absl::StatusOr<Graph> ParseAndVerifyGraph(std::string_view text) {
  ASSIGN_OR_RETURN(Graph graph, ParseGraph(text));
  RETURN_IF_ERROR(VerifyGraph(graph));
  return graph;
}

}  // namespace spillway::ir
