// The values a chat template computes with: a small model of the Python objects Jinja2 sees when HF transformers
// renders a template (None, bool, int, float, str, list, tuple, dict, jinja2's Undefined, namespace(), functions).
//
// Lists and dicts are immutable and shared (copying a Value is cheap); a namespace is the one mutable object
// (`{% set ns.x = ... %}` writes through every copy), as in Jinja2's ImmutableSandboxedEnvironment. Strings are
// UTF-8; Python's code-point semantics (len, indexing, slicing) are provided by the helpers at the bottom.
// to_str/to_repr print as Python's str()/repr() do (1.0 -> "1.0", True -> "True", ['a'] -> "['a']"), and
// to_json is HF's tojson filter (json.dumps with ensure_ascii=False by default).
// Tests: tests/unit/frontends/text/chat_template_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mmserve::chat_template {

class Value;
class Interpreter;

// An insertion-ordered str -> Value map (Python dicts keep insertion order; templates print tool schemas in it).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key in place, else appends.
  void set(std::string key, Value value);
};

// Positional and keyword arguments of a call, filter or test.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A function the template can call: a global (range, namespace, raise_exception...), a bound method
// ('abc'.upper) or a macro.
struct Callable {
  std::string name;
  std::function<StatusOr<Value>(CallArgs&, Interpreter&)> call;
};

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

class Value {
 public:
  // Undefined, remembering the message an error about it would carry ("'x' is undefined").
  Value() = default;
  static Value undefined(std::string message);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  // dict.keys() / .values() / .items(): iterable like a list, but printed, named and refused (indexing,
  // slicing, +, tojson) as Python's dict views are.
  enum class View : uint8_t { kNone, kKeys, kValues, kItems };
  static Value dict_view(std::vector<Value> items, View view);
  static Value dict(Dict d);
  static Value make_namespace(Dict d);
  static Value function(std::string name, std::function<StatusOr<Value>(CallArgs&, Interpreter&)> call);
  // From JSON (objects keep their key order; integers beyond int64 become floats).
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  // A list that is a dict view (see dict_view); not a list as far as Python's list operations go.
  bool is_view() const { return kind_ == Kind::kList && view_ != View::kNone; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // also a bool's 0/1
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return text_; }  // also an undefined's message
  const std::vector<Value>& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }      // a dict's or a namespace's entries
  Dict& namespace_entries() const { return *dict_; }  // only for a namespace: shared, mutable
  const Callable& as_callable() const { return *callable_; }
  const void* identity() const { return dict_ ? static_cast<const void*>(dict_.get()) : callable_.get(); }

  // Python truthiness (an Undefined is false).
  bool truthy() const;
  // Nesting depth of lists/dicts/namespaces (a scalar is 0), as computed when the container was made.
  uint32_t depth() const { return depth_; }
  // Python's type name as used in its error messages: 'str', 'int', 'list', 'dict', 'NoneType', ...
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  View view_ = View::kNone;
  uint32_t depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::string text_;
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> callable_;
};

// Python's ==  (1 == 1.0 == True; a list never equals a tuple; two Undefineds are equal, as in Jinja2).
bool equals(const Value& a, const Value& b);
// Python's < ordering: -1, 0 or 1; TypeError text for types Python does not order.
StatusOr<int> compare(const Value& a, const Value& b, const char* op);

// Python's str() and repr(). An Undefined prints as "".
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
// Python's repr(float): the shortest round-tripping digits ("1.0", "0.1", "1e+16", "inf", "nan").
std::string format_float(double f);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // json.dumps(indent=...): int n is n spaces; absent is one line
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
// json.dumps(v, ...) as HF's tojson filter calls it; a TypeError text for an Undefined, namespace or function.
StatusOr<std::string> to_json(const Value& v, const JsonOptions& options);

// --- UTF-8 with Python's code-point semantics -------------------------------------------------------------
std::u32string utf8_to_u32(std::string_view s);
std::string u32_to_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
// len(s) in code points.
size_t utf8_length(std::string_view s);
// Python's str.isspace() for one code point.
bool is_py_space(char32_t cp);

}  // namespace mmserve::chat_template
