// Jinja2's filters and tests for chat templates, each written after jinja2/filters.py and jinja2/tests.py
// (3.1), except tojson, which is HF's own (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
// Test: tests/unit/frontends/text/chat_template_test.cpp (ChatTemplateGolden.*).
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frontends/text/chat_template/builtins.h"
#include "frontends/text/chat_template/case_mapping.h"
#include "frontends/text/chat_template/interpreter.h"

namespace mmserve::chat_template {
namespace {

constexpr const char* kFilters[] = {
    "abs",   "attr",   "capitalize", "count",      "d",       "default", "dictsort", "e",     "escape",   "first",
    "float", "indent", "int",        "items",      "join",    "last",    "length",   "list",  "lower",    "map",
    "max",   "min",    "reject",     "rejectattr", "replace", "reverse", "round",    "safe",  "select",   "selectattr",
    "sort",  "string", "sum",        "title",      "tojson",  "trim",    "unique",   "upper", "wordcount"};

constexpr const char* kTests[] = {
    "boolean", "callable",    "defined", "divisibleby", "eq",      "equalto",  "even",   "false",    "float",
    "ge",      "greaterthan", "gt",      "in",          "integer", "iterable", "le",     "lessthan", "lower",
    "lt",      "mapping",     "ne",      "none",        "number",  "odd",      "sameas", "sequence", "string",
    "true",    "undefined",   "upper",   "==",          "!=",      "<",        "<=",     ">",        ">="};

// Calls a str method on str(v), as the filters that wrap one do (soft_str, then the method).
StatusOr<Value> str_method(const Value& v, const char* name, CallArgs args, Interpreter& in) {
  const Value s = Value::string(to_str(v));
  return in.call(get_attribute(s, name), args);
}

CallArgs positional(std::vector<Value> values) {
  CallArgs a;
  a.positional = std::move(values);
  return a;
}

// The `attribute` argument of map/selectattr/sort/...: dotted names, integer parts index lists.
Value attribute_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    v = numeric ? get_item(v, Value::integer(std::stoll(part.substr(0, 18)))) : get_item(v, Value::string(part));
    if (dot == std::string::npos || v.is_undefined()) return v;
    start = dot + 1;
  }
}

// For sort/unique/dictsort/min/max: strings compare lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value::string(u32_to_utf8(py_lower(utf8_to_u32(v.as_string()))));
}

StatusOr<std::vector<Value>> sorted(std::vector<Value> items, bool reverse, bool case_sensitive,
                                    const Value& attribute) {
  Status error;
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) {
    Value key = attribute.is_undefined() || attribute.is_none() ? item : attribute_path(item, attribute);
    keyed.emplace_back(sort_key(key, case_sensitive), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (!error.ok()) return false;
    StatusOr<int> c = compare(reverse ? b.first : a.first, reverse ? a.first : b.first, "<");
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return *c < 0;
  });
  RETURN_IF_ERROR(error);
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

// Python's float() on a string: optional whitespace, sign, digits with '_', inf/nan.
std::optional<double> parse_float(std::string s) {
  const std::u32string u = utf8_to_u32(s);
  size_t lo = 0, hi = u.size();
  while (lo < hi && is_py_space(u[lo])) ++lo;
  while (hi > lo && is_py_space(u[hi - 1])) --hi;
  s = u32_to_utf8(u.substr(lo, hi - lo));
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean += s[i];
  }
  if (clean.empty() || clean.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

StatusOr<Value> f_int(const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "int", {"default", "base"}, a));
  const Value def = a[0].is_undefined() ? Value::integer(0) : a[0];
  const int base = a[1].is_undefined() ? 10 : static_cast<int>(a[1].as_int());
  if (v.is_undefined()) return undefined_error(v);  // int(Undefined) raises
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return Value::integer(v.as_int());
  if (v.kind() == Kind::kFloat) {
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) > 9.2e18) return def;
    return Value::integer(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    // Python's int(s, base): surrounding whitespace, a sign, '_' between digits; nothing else.
    const std::u32string u = utf8_to_u32(v.as_string());
    size_t lo = 0, hi = u.size();
    while (lo < hi && is_py_space(u[lo])) ++lo;
    while (hi > lo && is_py_space(u[hi - 1])) --hi;
    const std::string s = u32_to_utf8(u.substr(lo, hi - lo));
    std::string trimmed;
    for (size_t i = 0; i < s.size(); ++i) {
      const bool separator = s[i] == '_' && i > 0 && i + 1 < s.size() &&
                             std::isalnum(static_cast<unsigned char>(s[i - 1])) &&
                             std::isalnum(static_cast<unsigned char>(s[i + 1]));
      if (!separator) trimmed += s[i];
    }
    if (trimmed.find_first_of(" \t\n\r\f\v") != std::string::npos) trimmed.clear();
    if (!trimmed.empty() && base >= 2 && base <= 36) {
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(trimmed.c_str(), &end, base);
      if (errno == 0 && end == trimmed.c_str() + trimmed.size()) return Value::integer(n);
    }
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
      return Value::integer(static_cast<int64_t>(*d));  // jinja2 falls back to int(float(value))
    }
  }
  return def;
}

StatusOr<Value> f_float(const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "float", {"default"}, a));
  const Value def = a[0].is_undefined() ? Value::floating(0.0) : a[0];
  if (v.is_undefined()) return undefined_error(v);  // float(Undefined) raises
  if (v.is_number()) return Value::floating(v.as_float());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::floating(*d);
  }
  return def;
}

StatusOr<Value> f_round(const Value& v, CallArgs& args, Interpreter& in) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "round", {"precision", "method"}, a));
  const int64_t precision = a[0].is_undefined() ? 0 : a[0].as_int();
  const std::string method = a[1].is_undefined() ? "common" : to_str(a[1]);
  if (method != "common" && method != "ceil" && method != "floor") {
    return type_error("method must be 'common', 'ceil' or 'floor'");
  }
  if (method != "common") {  // math.floor/ceil(value * 10 ** precision) / 10 ** precision
    ASSIGN_OR_RETURN(
        Value scaled,
        binary_op("*", v,
                  precision >= 0 && precision < 19
                      ? Value::integer(static_cast<int64_t>(std::pow(10.0, static_cast<double>(precision))))
                      : Value::floating(std::pow(10.0, static_cast<double>(precision))),
                  in));
    if (!scaled.is_number()) return type_error("must be real number, not " + scaled.type_name());
  }
  if (!v.is_number()) {
    return type_error(method == "common" ? "type " + v.type_name() + " doesn't define __round__ method"
                                         : "must be real number, not " + v.type_name());
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "common") {
    if (v.kind() != Kind::kFloat && precision >= 0) return Value::integer(v.as_int());  // round(int, n) is the int
    return Value::floating(std::nearbyint(v.as_float() * scale) / scale);  // half to even, as Python's round
  }
  const double x = v.as_float() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

// HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
StatusOr<Value> f_tojson(const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, a));
  JsonOptions o;
  o.ensure_ascii = a[0].truthy();
  if (a[1].is_string()) {
    o.indent = a[1].as_string();
  } else if (a[1].kind() == Kind::kInt || a[1].kind() == Kind::kBool) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(a[1].as_int(), 1024))), ' ');
  } else if (!a[1].is_undefined() && !a[1].is_none()) {
    return type_error("can't multiply sequence by non-int of type '" + a[1].type_name() + "'");
  }
  if (a[2].is_list() && a[2].as_list().size() == 2 && a[2].as_list()[0].is_string() && a[2].as_list()[1].is_string()) {
    o.separators = std::make_pair(a[2].as_list()[0].as_string(), a[2].as_list()[1].as_string());
  } else if (!a[2].is_undefined() && !a[2].is_none()) {
    return invalid_argument("ValueError: separators must be a pair of strings");
  }
  o.sort_keys = a[3].truthy();
  ASSIGN_OR_RETURN(std::string json, to_json(v, o));
  return Value::string(std::move(json));
}

// jinja2's do_indent.
StatusOr<Value> f_indent(const Value& v, CallArgs& args) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "indent", {"width", "first", "blank"}, a));
  const std::string indention =
      a[0].is_string()
          ? a[0].as_string()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(a[0].is_undefined() ? 4 : a[0].as_int(), 0, 1024)),
                        ' ');
  // jinja2 appends "\n" to the value itself: only a string survives that.
  if (v.is_undefined()) return undefined_error(v);
  if (v.is_list() && !v.is_tuple()) {
    return invalid_argument("AttributeError: 'list' object has no attribute 'splitlines'");
  }
  if (v.is_tuple()) return type_error("can only concatenate tuple (not \"str\") to tuple");
  if (!v.is_string()) return type_error("unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  std::string s = v.as_string() + "\n";
  std::vector<std::string> lines;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find('\n', i);
    lines.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  std::string rv;
  if (a[2].truthy()) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + indention : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : indention + lines[k]);
  }
  if (a[1].truthy()) rv = indention + rv;
  return Value::string(std::move(rv));
}

// select/reject (test by name, or truthiness) and selectattr/rejectattr (the same on an attribute).
StatusOr<Value> select_impl(const Value& v, CallArgs& args, bool by_attribute, bool keep_if, Interpreter& in) {
  ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) return type_error("selectattr/rejectattr need an attribute name");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) test = to_str(args.positional[next++]);
  if (!test.empty() && !is_known_test(test))
    return invalid_argument("TemplateRuntimeError: No test named '" + test + "'.");
  std::vector<Value> out;
  for (const auto& item : items) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    bool passed = subject.truthy();
    if (!test.empty()) {
      CallArgs test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
      test_args.keyword = args.keyword;
      ASSIGN_OR_RETURN(passed, apply_test(test, subject, test_args, in));
    }
    if (passed == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}

StatusOr<Value> f_map(const Value& v, CallArgs& args, Interpreter& in) {
  ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  std::vector<Value> out;
  Value attribute, def;
  for (auto& [k, kv] : args.keyword) {
    if (k == "attribute")
      attribute = kv;
    else if (k == "default")
      def = kv;
    else if (args.positional.empty())
      return type_error("map() got an unexpected keyword argument '" + k + "'");
  }
  if (!attribute.is_undefined()) {
    for (const auto& item : items) {
      Value x = attribute_path(item, attribute);
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) return type_error("map() needs a filter name or attribute=");
  const std::string filter = to_str(args.positional[0]);
  if (!is_known_filter(filter)) return invalid_argument("TemplateRuntimeError: No filter named '" + filter + "'.");
  for (const auto& item : items) {
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    ASSIGN_OR_RETURN(Value x, apply_filter(filter, item, rest, in));
    out.push_back(std::move(x));
  }
  return Value::list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const char* f) { return name == f; });
}

bool is_known_test(std::string_view name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; });
}

StatusOr<Value> apply_filter(const std::string& name, const Value& v, CallArgs& args, Interpreter& in) {
  std::vector<Value> a;
  if (name == "default" || name == "d") {
    RETURN_IF_ERROR(bind_args(args, name, {"default_value", "boolean"}, a));
    const bool use_default = v.is_undefined() || (a[1].truthy() && !v.truthy());
    if (!use_default) return v;
    return a[0].is_undefined() ? Value::string("") : a[0];
  }
  if (name == "safe" || name == "string") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    return name == "safe" ? v : Value::string(to_str(v));
  }
  if (name == "length" || name == "count") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    switch (v.kind()) {
      case Kind::kUndefined: return Value::integer(0);
      case Kind::kString: return Value::integer(static_cast<int64_t>(utf8_length(v.as_string())));
      case Kind::kList: return Value::integer(static_cast<int64_t>(v.as_list().size()));
      case Kind::kDict: return Value::integer(static_cast<int64_t>(v.as_dict().items.size()));
      default: return type_error("object of type '" + v.type_name() + "' has no len()");
    }
  }
  if (name == "tojson") return f_tojson(v, args);
  if (name == "trim") {
    RETURN_IF_ERROR(bind_args(args, name, {"chars"}, a));
    return str_method(v, "strip", positional({a[0].is_undefined() ? Value::none() : a[0]}), in);
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    return str_method(v, name.c_str(), {}, in);
  }
  if (name == "title") {  // jinja2's do_title: capitalize each word split at spaces and -({[<
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    // "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s({\[<]+)", s) if w)
    const std::u32string u = utf8_to_u32(to_str(v));
    auto separator = [](char32_t c) {
      return is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    };
    std::u32string out;
    for (size_t i = 0; i < u.size();) {
      size_t j = i;
      const bool sep = separator(u[i]);
      while (j < u.size() && separator(u[j]) == sep) ++j;
      if (sep) {
        out.append(u, i, j - i);
      } else {
        out += py_upper(std::u32string_view(u).substr(i, 1));
        out += py_lower(std::u32string_view(u).substr(i + 1, j - i - 1));
      }
      i = j;
    }
    return Value::string(u32_to_utf8(out));
  }
  if (name == "replace") {
    RETURN_IF_ERROR(bind_args(args, name, {"old", "new", "count"}, a));
    CallArgs r = positional({Value::string(to_str(a[0])), Value::string(to_str(a[1]))});
    if (!a[2].is_undefined() && !a[2].is_none()) r.positional.push_back(a[2]);
    return str_method(v, "replace", r, in);
  }
  if (name == "join") {
    RETURN_IF_ERROR(bind_args(args, name, {"d", "attribute"}, a));
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    const std::string sep = a[0].is_undefined() ? "" : to_str(a[0]);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      out += to_str(a[1].is_undefined() ? items[i] : attribute_path(items[i], a[1]));
      RETURN_IF_ERROR(in.check_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (name == "list") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    return Value::list(std::move(items));
  }
  if (name == "first" || name == "last") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    if (name == "last" && !v.is_undefined() && !v.is_string() && !v.is_list() && !v.is_dict()) {
      return type_error("'" + v.type_name() + "' object is not reversible");  // jinja2 takes reversed(value)
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    if (v.is_string()) {
      std::u32string u = utf8_to_u32(v.as_string());
      std::reverse(u.begin(), u.end());
      return Value::string(u32_to_utf8(u));
    }
    if (!v.is_list() && !v.is_dict() && !v.is_undefined()) {
      return invalid_argument("FilterArgumentError: argument must be iterable");
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "items") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) return type_error("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::list({Value::string(k), x}, true));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    RETURN_IF_ERROR(bind_args(args, name, {"case_sensitive", "by", "reverse"}, a));
    if (v.is_undefined()) return undefined_error(v);
    if (!v.is_dict())
      return invalid_argument("AttributeError: '" + v.type_name() + "' object has no attribute 'items'");
    const bool by_value = a[1].is_string() && a[1].as_string() == "value";
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.as_dict().items) pairs.push_back(Value::list({Value::string(k), x}, true));
    ASSIGN_OR_RETURN(std::vector<Value> out,
                     sorted(std::move(pairs), a[2].truthy(), a[0].truthy(), Value::integer(by_value ? 1 : 0)));
    return Value::list(std::move(out));
  }
  if (name == "sort") {
    RETURN_IF_ERROR(bind_args(args, name, {"reverse", "case_sensitive", "attribute"}, a));
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    ASSIGN_OR_RETURN(std::vector<Value> out, sorted(std::move(items), a[0].truthy(), a[1].truthy(), a[2]));
    return Value::list(std::move(out));
  }
  if (name == "unique") {
    RETURN_IF_ERROR(bind_args(args, name, {"case_sensitive", "attribute"}, a));
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    std::vector<Value> out, seen;
    for (auto& item : items) {
      Value key = sort_key(a[1].is_undefined() ? item : attribute_path(item, a[1]), a[0].truthy());
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
        seen.push_back(std::move(key));
        out.push_back(std::move(item));
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "min" || name == "max") {
    RETURN_IF_ERROR(bind_args(args, name, {"case_sensitive", "attribute"}, a));
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    // As Python's max()/min(): the first best item, comparing each with `item > best` (or <).
    const char* op = name == "max" ? ">" : "<";
    auto key = [&](const Value& x) {
      return sort_key(a[1].is_undefined() ? x : attribute_path(x, a[1]), a[0].truthy());
    };
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(int c, compare(key(items[i]), key(items[best]), op));
      if (name == "max" ? c > 0 : c < 0) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    RETURN_IF_ERROR(bind_args(args, name, {"attribute", "start"}, a));
    ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    Value total = a[1].is_undefined() ? Value::integer(0) : a[1];
    for (const auto& item : items) {
      ASSIGN_OR_RETURN(total, binary_op("+", total, a[0].is_undefined() ? item : attribute_path(item, a[0]), in));
    }
    return total;
  }
  if (name == "select" || name == "reject") return select_impl(v, args, false, name == "select", in);
  if (name == "selectattr" || name == "rejectattr") return select_impl(v, args, true, name == "selectattr", in);
  if (name == "map") return f_map(v, args, in);
  if (name == "attr") {
    RETURN_IF_ERROR(bind_args(args, name, {"name"}, a));
    return get_attribute(v, to_str(a[0]));
  }
  if (name == "int") return f_int(v, args);
  if (name == "float") return f_float(v, args);
  if (name == "round") return f_round(v, args, in);
  if (name == "abs") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    if (v.kind() == Kind::kFloat) return Value::floating(std::fabs(v.as_float()));
    if (v.is_number()) return negate(v, v.as_int() < 0);
    return type_error("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "indent") return f_indent(v, args);
  if (name == "wordcount") {  // len(re.findall(r"\w+", s))
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    int64_t words = 0;
    bool in_word = false;
    for (const char32_t c : utf8_to_u32(to_str(v))) {
      const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      const bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                     (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) || cat == UTF8PROC_CATEGORY_MN ||
                     cat == UTF8PROC_CATEGORY_MC;
      words += w && !in_word;
      in_word = w;
    }
    return Value::integer(words);
  }
  if (name == "escape" || name == "e") {
    RETURN_IF_ERROR(bind_args(args, name, {}, a));
    return Value::string(html_escape(to_str(v)));
  }
  return invalid_argument("TemplateRuntimeError: No filter named '" + name + "'.");
}

StatusOr<bool> apply_test(const std::string& name, const Value& v, CallArgs& args, Interpreter& in) {
  std::vector<Value> a;
  const bool one_arg = name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=" ||
                       name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" ||
                       name == "gt" || name == "greaterthan" || name == ">" || name == "ge" || name == ">=" ||
                       name == "in" || name == "sameas" || name == "divisibleby";
  RETURN_IF_ERROR(bind_args(args, name, one_arg ? std::vector<std::string>{"other"} : std::vector<std::string>{}, a));
  const Value other = a.empty() ? Value() : a[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == Kind::kBool;
  if (name == "true") return v.kind() == Kind::kBool && v.as_bool();
  if (name == "false") return v.kind() == Kind::kBool && !v.as_bool();
  if (name == "integer") return v.kind() == Kind::kInt;
  if (name == "float") return v.kind() == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_view()) || v.is_dict();
  if (name == "callable") return v.kind() == Kind::kCallable || v.is_undefined();  // jinja2's Undefined has __call__
  if (name == "lower" || name == "upper") {                                        // str(value).islower() / .isupper()
    CallArgs none;
    ASSIGN_OR_RETURN(Value r, str_method(v, name == "lower" ? "islower" : "isupper", none, in));
    return r.truthy();
  }
  if (name == "odd" || name == "even") {  // value % 2 == 1 (or 0), with Python's % and its errors
    ASSIGN_OR_RETURN(Value r, binary_op("%", v, Value::integer(2), in));
    return equals(r, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") {
    ASSIGN_OR_RETURN(Value r, binary_op("%", v, other, in));
    return r.is_number() && r.as_float() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
  if (name == "ne" || name == "!=") return !equals(v, other);
  if (name == "in") return contains(other, v);
  if (name == "sameas") {
    if (v.kind() != other.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.kind() == Kind::kBool || v.kind() == Kind::kInt) return v.as_int() == other.as_int();
    if (v.is_string() || v.kind() == Kind::kFloat) return equals(v, other);
    return v.identity() == other.identity() && v.identity() != nullptr;
  }
  // lt/le/gt/ge and their aliases
  if (v.is_undefined()) return undefined_error(v);
  if (other.is_undefined()) return undefined_error(other);
  const char* op = (name == "lt" || name == "lessthan" || name == "<")      ? "<"
                   : (name == "le" || name == "<=")                         ? "<="
                   : (name == "gt" || name == "greaterthan" || name == ">") ? ">"
                                                                            : ">=";
  ASSIGN_OR_RETURN(int c, compare(v, other, op));
  return std::strcmp(op, "<") == 0    ? c < 0
         : std::strcmp(op, "<=") == 0 ? c <= 0
         : std::strcmp(op, ">") == 0  ? c > 0
                                      : c >= 0;
}

}  // namespace mmserve::chat_template
