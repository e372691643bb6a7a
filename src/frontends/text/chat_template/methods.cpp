// Attribute and item access as jinja2's sandboxed getattr/getitem do it, the Python methods of str, dict and
// list that templates call, and HF's globals. Mutating methods (list.append, dict.update, ...) are refused as
// ImmutableSandboxedEnvironment refuses them: reading one gives an Undefined, calling it a SecurityError.
// Test: tests/unit/frontends/text/chat_template_test.cpp (ChatTemplateGolden.*).
#include <utf8proc.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "frontends/text/chat_template/builtins.h"
#include "frontends/text/chat_template/case_mapping.h"
#include "frontends/text/chat_template/interpreter.h"

namespace mmserve::chat_template {
namespace {

using Method = StatusOr<Value> (*)(const Value& self, CallArgs& args, Interpreter& in);

// jinja2.utils.object_type_repr, as its Undefined messages print it.
std::string object_type(const Value& v) {
  return v.is_none() ? "None" : v.type_name() + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + object_type(obj) + "' has no attribute '" + name + "'");
}

StatusOr<std::u32string> string_arg(const Value& v, const char* what) {
  if (!v.is_string()) return type_error(std::string(what) + " must be str, not " + v.type_name());
  return utf8_to_u32(v.as_string());
}

// --- str methods ---

// strip/lstrip/rstrip(chars=None): `which` 1 = left, 2 = right, 3 = both.
StatusOr<Value> strip_impl(const Value& self, CallArgs& args, int which, const char* name) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, name, {"chars"}, a));
  const std::u32string s = utf8_to_u32(self.as_string());
  std::u32string chars;
  const bool whitespace = a[0].is_undefined() || a[0].is_none();
  if (!whitespace) {
    ASSIGN_OR_RETURN(chars, string_arg(a[0], "strip arg"));
  }
  auto strip_it = [&](char32_t c) { return whitespace ? is_py_space(c) : chars.find(c) != std::u32string::npos; };
  size_t lo = 0, hi = s.size();
  if (which & 1) {
    while (lo < hi && strip_it(s[lo])) ++lo;
  }
  if (which & 2) {
    while (hi > lo && strip_it(s[hi - 1])) --hi;
  }
  return Value::string(u32_to_utf8(s.substr(lo, hi - lo)));
}

StatusOr<Value> m_strip(const Value& s, CallArgs& a, Interpreter&) {
  return strip_impl(s, a, 3, "strip");
}
StatusOr<Value> m_lstrip(const Value& s, CallArgs& a, Interpreter&) {
  return strip_impl(s, a, 1, "lstrip");
}
StatusOr<Value> m_rstrip(const Value& s, CallArgs& a, Interpreter&) {
  return strip_impl(s, a, 2, "rstrip");
}

StatusOr<Value> m_upper(const Value& s, CallArgs&, Interpreter&) {
  return Value::string(u32_to_utf8(py_upper(utf8_to_u32(s.as_string()))));
}
StatusOr<Value> m_lower(const Value& s, CallArgs&, Interpreter&) {
  return Value::string(u32_to_utf8(py_lower(utf8_to_u32(s.as_string()))));
}
StatusOr<Value> m_title(const Value& s, CallArgs&, Interpreter&) {
  return Value::string(u32_to_utf8(py_title(utf8_to_u32(s.as_string()))));
}
StatusOr<Value> m_capitalize(const Value& s, CallArgs&, Interpreter&) {
  return Value::string(u32_to_utf8(py_capitalize(utf8_to_u32(s.as_string()))));
}

// startswith/endswith(prefix or tuple of prefixes, start=None, end=None).
StatusOr<Value> affix_impl(const Value& self, CallArgs& args, bool start_side, const char* name) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, name, {"prefix", "start", "end"}, a));
  ASSIGN_OR_RETURN(Value region, slice(self, a[1], a[2], Value()));
  const std::string& s = region.as_string();
  std::vector<Value> options = a[0].is_tuple() ? a[0].as_list() : std::vector<Value>{a[0]};
  for (const auto& o : options) {
    if (!o.is_string()) {
      return type_error(std::string(name) + " first arg must be str or a tuple of str, not " + o.type_name());
    }
    const std::string& p = o.as_string();
    if (p.size() <= s.size() &&
        (start_side ? s.compare(0, p.size(), p) : s.compare(s.size() - p.size(), p.size(), p)) == 0) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}
StatusOr<Value> m_startswith(const Value& s, CallArgs& a, Interpreter&) {
  return affix_impl(s, a, true, "startswith");
}
StatusOr<Value> m_endswith(const Value& s, CallArgs& a, Interpreter&) {
  return affix_impl(s, a, false, "endswith");
}

// split/rsplit(sep=None, maxsplit=-1) with Python's two modes: runs of whitespace, or an exact separator.
StatusOr<Value> split_impl(const Value& self, CallArgs& args, bool from_right, const char* name) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, name, {"sep", "maxsplit"}, a));
  int64_t maxsplit = a[1].is_undefined() ? -1 : a[1].as_int();
  if (!a[1].is_undefined() && a[1].kind() != Kind::kInt) return type_error("maxsplit must be an integer");
  std::u32string s = utf8_to_u32(self.as_string());
  std::vector<std::u32string> parts;
  if (a[0].is_undefined() || a[0].is_none()) {
    if (from_right) std::reverse(s.begin(), s.end());
    size_t i = 0;
    while (true) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(s.substr(i));  // the rest, trailing whitespace kept, as CPython does
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_py_space(s[j])) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    if (from_right) {
      for (auto& p : parts) std::reverse(p.begin(), p.end());
      std::reverse(parts.begin(), parts.end());
    }
  } else {
    ASSIGN_OR_RETURN(std::u32string sep, string_arg(a[0], "sep"));
    if (sep.empty()) return invalid_argument("ValueError: empty separator");
    if (!from_right) {
      size_t i = 0;
      while (true) {
        const size_t j =
            maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit ? std::u32string::npos : s.find(sep, i);
        if (j == std::u32string::npos) {
          parts.push_back(s.substr(i));
          break;
        }
        parts.push_back(s.substr(i, j - i));
        i = j + sep.size();
      }
    } else {
      size_t end = s.size();
      while (true) {
        const size_t j = maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit ? std::u32string::npos
                         : end < sep.size()                                              ? std::u32string::npos
                                            : s.rfind(sep, end - sep.size());
        if (j == std::u32string::npos) {
          parts.push_back(s.substr(0, end));
          break;
        }
        parts.push_back(s.substr(j + sep.size(), end - j - sep.size()));
        end = j;
      }
      std::reverse(parts.begin(), parts.end());
    }
  }
  std::vector<Value> out;
  for (const auto& p : parts) out.push_back(Value::string(u32_to_utf8(p)));
  return Value::list(std::move(out));
}
StatusOr<Value> m_split(const Value& s, CallArgs& a, Interpreter&) {
  return split_impl(s, a, false, "split");
}
StatusOr<Value> m_rsplit(const Value& s, CallArgs& a, Interpreter&) {
  return split_impl(s, a, true, "rsplit");
}

StatusOr<Value> m_splitlines(const Value& self, CallArgs& args, Interpreter&) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "splitlines", {"keepends"}, a));
  const bool keep = a[0].truthy();
  const std::string& s = self.as_string();
  std::vector<Value> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && s[j] != '\n' && s[j] != '\r') ++j;
    size_t next = j;
    if (j < s.size()) next += (s[j] == '\r' && j + 1 < s.size() && s[j + 1] == '\n') ? 2 : 1;
    out.push_back(Value::string(s.substr(i, (keep ? next : j) - i)));
    i = next;
  }
  return Value::list(std::move(out));
}

StatusOr<Value> m_replace(const Value& self, CallArgs& args, Interpreter& in) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "replace", {"old", "new", "count"}, a));
  if (!a[0].is_string() || !a[1].is_string()) return type_error("replace() arguments must be str");
  int64_t count = a[2].is_undefined() ? -1 : a[2].as_int();
  const std::string& s = self.as_string();
  const std::string& old = a[0].as_string();
  const std::string& rep = a[1].as_string();
  std::string out;
  if (old.empty()) {  // Python inserts `new` around every character
    const std::u32string u = utf8_to_u32(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += rep;
      if (i < u.size()) append_utf8(out, u[i]);
      RETURN_IF_ERROR(in.check_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  size_t i = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t j = s.find(old, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out += rep;
    i = j + old.size();
    RETURN_IF_ERROR(in.check_size(out.size()));
  }
  out.append(s, i, std::string::npos);
  return Value::string(std::move(out));
}

// find/rfind/index/count(sub, start=None, end=None), in code points.
StatusOr<Value> search_impl(const Value& self, CallArgs& args, const char* name) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, name, {"sub", "start", "end"}, a));
  ASSIGN_OR_RETURN(std::u32string sub, string_arg(a[0], "substring"));
  const std::u32string s = utf8_to_u32(self.as_string());
  const auto len = static_cast<int64_t>(s.size());
  auto clamp = [len](const Value& v, int64_t def) {
    if (v.is_undefined() || v.is_none()) return def;
    int64_t x = v.as_int();
    if (x < 0) x = std::max<int64_t>(0, x + len);
    return std::min(x, len);
  };
  const int64_t lo = clamp(a[1], 0), hi = clamp(a[2], len);
  if (std::strcmp(name, "count") == 0) {
    if (lo > hi) return Value::integer(0);
    if (sub.empty()) return Value::integer(hi - lo + 1);
    int64_t n = 0;
    for (size_t i = static_cast<size_t>(lo); i + sub.size() <= static_cast<size_t>(hi);) {
      if (s.compare(i, sub.size(), sub) == 0) {
        ++n;
        i += sub.size();
      } else {
        ++i;
      }
    }
    return Value::integer(n);
  }
  const bool reverse = name[0] == 'r';
  int64_t found = -1;
  if (hi - lo >= static_cast<int64_t>(sub.size())) {
    const std::u32string region = s.substr(static_cast<size_t>(lo), static_cast<size_t>(hi - lo));
    const size_t at = reverse ? region.rfind(sub) : region.find(sub);
    if (at != std::u32string::npos) found = lo + static_cast<int64_t>(at);
  }
  if (found < 0 && std::strcmp(name, "index") == 0) return invalid_argument("ValueError: substring not found");
  return Value::integer(found);
}
StatusOr<Value> m_find(const Value& s, CallArgs& a, Interpreter&) {
  return search_impl(s, a, "find");
}
StatusOr<Value> m_rfind(const Value& s, CallArgs& a, Interpreter&) {
  return search_impl(s, a, "rfind");
}
StatusOr<Value> m_index_str(const Value& s, CallArgs& a, Interpreter&) {
  return search_impl(s, a, "index");
}
StatusOr<Value> m_count_str(const Value& s, CallArgs& a, Interpreter&) {
  return search_impl(s, a, "count");
}

StatusOr<Value> m_join(const Value& self, CallArgs& args, Interpreter& in) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "join", {"iterable"}, a));
  ASSIGN_OR_RETURN(std::vector<Value> items, iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return type_error("sequence item " + std::to_string(i) + ": expected str instance, " + items[i].type_name() +
                        " found");
    }
    if (i) out += self.as_string();
    out += items[i].as_string();
    RETURN_IF_ERROR(in.check_size(out.size()));
  }
  return Value::string(std::move(out));
}

// str.format with {}, {0} and {name} fields (no format specs or conversions).
StatusOr<Value> m_format(const Value& self, CallArgs& args, Interpreter& in) {
  const std::string& s = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{', ++i;
    } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}', ++i;
    } else if (s[i] == '{') {
      const size_t close = s.find('}', i);
      if (close == std::string::npos) return invalid_argument("ValueError: Single '{' encountered in format string");
      const std::string field = s.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return unimplemented("ValueError: str.format specs and conversions are not supported: {" + field + "}");
      }
      const Value* v = nullptr;
      size_t index = auto_index;
      if (field.empty()) {
        ++auto_index;
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        index = std::stoul(field);
      } else {
        for (const auto& [k, kv] : args.keyword) {
          if (k == field) v = &kv;
        }
        if (!v) return invalid_argument("KeyError: '" + field + "'");
      }
      if (!v) {
        if (index >= args.positional.size()) {
          return invalid_argument("IndexError: Replacement index " + std::to_string(index) +
                                  " out of range for positional args tuple");
        }
        v = &args.positional[index];
      }
      out += to_str(*v);
      i = close;
    } else if (s[i] == '}') {
      return invalid_argument("ValueError: Single '}' encountered in format string");
    } else {
      out += s[i];
    }
    RETURN_IF_ERROR(in.check_size(out.size()));
  }
  return Value::string(std::move(out));
}

// is*() predicates: every code point passes and there is at least one (isupper/islower: over cased ones).
template <int kWhich>
StatusOr<Value> m_is(const Value& self, CallArgs&, Interpreter&) {
  const std::u32string u = utf8_to_u32(self.as_string());
  if (u.empty()) return Value::boolean(false);
  bool any_cased = false;
  for (const char32_t c : u) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
    const bool digit = cat == UTF8PROC_CATEGORY_ND;
    const bool numeric = digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
    bool ok = true;
    switch (kWhich) {
      case 0: ok = digit; break;
      case 1: ok = alpha; break;
      case 2: ok = alpha || numeric; break;
      case 3: ok = is_py_space(c); break;
      case 4:  // CPython's isupper: no lowercase or titlecase letter, at least one uppercase
        if (py_is_lower(c) || py_is_title(c)) ok = false;
        any_cased = any_cased || py_is_upper(c);
        break;
      case 5:  // islower: no uppercase or titlecase letter, at least one lowercase
        if (py_is_upper(c) || py_is_title(c)) ok = false;
        any_cased = any_cased || py_is_lower(c);
        break;
      default: ok = numeric; break;
    }
    if (!ok) return Value::boolean(false);
  }
  return Value::boolean(kWhich < 4 || kWhich > 5 || any_cased);
}

// --- dict and list methods ---

StatusOr<Value> m_items(const Value& self, CallArgs& args, Interpreter&) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "items", {}, a));
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items) out.push_back(Value::list({Value::string(k), v}, true));
  return Value::dict_view(std::move(out), Value::View::kItems);
}
StatusOr<Value> m_keys(const Value& self, CallArgs& args, Interpreter&) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "keys", {}, a));
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items) out.push_back(Value::string(k));
  return Value::dict_view(std::move(out), Value::View::kKeys);
}
StatusOr<Value> m_values(const Value& self, CallArgs& args, Interpreter&) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "values", {}, a));
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items) out.push_back(v);
  return Value::dict_view(std::move(out), Value::View::kValues);
}
StatusOr<Value> m_get(const Value& self, CallArgs& args, Interpreter&) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "get", {"key", "default"}, a));
  const Value* v = a[0].is_string() ? self.as_dict().find(a[0].as_string()) : nullptr;
  if (v) return *v;
  return a[1].is_undefined() ? Value::none() : a[1];
}
StatusOr<Value> m_list_index(const Value& self, CallArgs& args, Interpreter&) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "index", {"value"}, a));
  for (size_t i = 0; i < self.as_list().size(); ++i) {
    if (equals(self.as_list()[i], a[0])) return Value::integer(static_cast<int64_t>(i));
  }
  return invalid_argument("ValueError: " + to_repr(a[0]) + " is not in list");
}
StatusOr<Value> m_list_count(const Value& self, CallArgs& args, Interpreter&) {
  std::vector<Value> a;
  RETURN_IF_ERROR(bind_args(args, "count", {"value"}, a));
  int64_t n = 0;
  for (const auto& v : self.as_list()) n += equals(v, a[0]);
  return Value::integer(n);
}

struct MethodEntry {
  const char* name;
  Method fn;
};

constexpr MethodEntry kStringMethods[] = {
    {"strip", m_strip},       {"lstrip", m_lstrip},   {"rstrip", m_rstrip},         {"upper", m_upper},
    {"lower", m_lower},       {"title", m_title},     {"capitalize", m_capitalize}, {"startswith", m_startswith},
    {"endswith", m_endswith}, {"split", m_split},     {"rsplit", m_rsplit},         {"splitlines", m_splitlines},
    {"replace", m_replace},   {"find", m_find},       {"rfind", m_rfind},           {"index", m_index_str},
    {"count", m_count_str},   {"join", m_join},       {"format", m_format},         {"isdigit", m_is<0>},
    {"isalpha", m_is<1>},     {"isalnum", m_is<2>},   {"isspace", m_is<3>},         {"isupper", m_is<4>},
    {"islower", m_is<5>},     {"isnumeric", m_is<6>},
};
constexpr MethodEntry kDictMethods[] = {{"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get}};
constexpr MethodEntry kListMethods[] = {{"index", m_list_index}, {"count", m_list_count}};
constexpr const char* kUnsafeList[] = {"append", "reverse", "insert", "sort", "extend", "remove", "pop", "clear"};
constexpr const char* kUnsafeDict[] = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
const MethodEntry* find_method(const MethodEntry (&table)[N], const std::string& name) {
  for (const auto& e : table) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

Value bind(const Value& self, const MethodEntry& m) {
  return Value::function(m.name, [self, fn = m.fn](CallArgs& args, Interpreter& in) { return fn(self, args, in); });
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("SecurityError: access to attribute '" + name + "' of '" + obj.type_name() +
                          "' object is unsafe.");
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kString:
      if (const MethodEntry* m = find_method(kStringMethods, name)) return bind(obj, *m);
      return missing_attribute(obj, name);
    case Kind::kDict:
      if (const MethodEntry* m = find_method(kDictMethods, name)) return bind(obj, *m);
      for (const char* u : kUnsafeDict) {
        if (name == u) return unsafe(obj, name);
      }
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attribute(obj, name);
    case Kind::kList:
      if (obj.is_view()) return missing_attribute(obj, name);
      if (const MethodEntry* m = find_method(kListMethods, name)) return bind(obj, *m);
      for (const char* u : kUnsafeList) {
        if (name == u) return unsafe(obj, name);
      }
      return missing_attribute(obj, name);
    case Kind::kNamespace:
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return Value::undefined("'jinja2.utils.Namespace object' has no attribute '" + name + "'");
    default: return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  const bool int_key = key.kind() == Kind::kInt || key.kind() == Kind::kBool;
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
  } else if (((obj.is_list() && !obj.is_view()) || obj.is_string()) && int_key) {
    const auto len = static_cast<int64_t>(obj.is_list() ? obj.as_list().size() : utf8_length(obj.as_string()));
    int64_t i = key.as_int();
    if (i < 0) i += len;
    if (i >= 0 && i < len) {
      if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
      std::string ch;
      append_utf8(ch, utf8_to_u32(obj.as_string())[static_cast<size_t>(i)]);
      return Value::string(std::move(ch));
    }
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());  // jinja2 falls back to getattr
  return Value::undefined(object_type(obj) + " has no element " + to_repr(key));
}

// --- globals ---

Dict make_globals() {
  Dict g;
  g.set("raise_exception", Value::function("raise_exception", [](CallArgs& args, Interpreter&) -> StatusOr<Value> {
          std::vector<Value> a;
          RETURN_IF_ERROR(bind_args(args, "raise_exception", {"message"}, a));
          return invalid_argument("TemplateError: " + to_str(a[0]));
        }));
  g.set("strftime_now", Value::function("strftime_now", [](CallArgs& args, Interpreter& in) -> StatusOr<Value> {
          std::vector<Value> a;
          RETURN_IF_ERROR(bind_args(args, "strftime_now", {"format"}, a));
          if (!a[0].is_string()) return type_error("strftime() argument 1 must be str, not " + a[0].type_name());
          const std::time_t now = in.now();
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[512];
          const size_t n =
              a[0].as_string().empty() ? 0 : std::strftime(buf, sizeof(buf), a[0].as_string().c_str(), &tm);
          if (n == 0 && !a[0].as_string().empty())
            return invalid_argument("ValueError: strftime format too long or empty result");
          return Value::string(std::string(buf, n));
        }));
  g.set("range", Value::function("range", [](CallArgs& args, Interpreter&) -> StatusOr<Value> {
          if (!args.keyword.empty()) return type_error("range() takes no keyword arguments");
          const auto& p = args.positional;
          if (p.empty() || p.size() > 3)
            return type_error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
          for (const auto& v : p) {
            if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
              return type_error("'" + v.type_name() + "' object cannot be interpreted as an integer");
            }
          }
          const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
          const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
          const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
          if (step == 0) return invalid_argument("ValueError: range() arg 3 must not be zero");
          const long double count = step > 0 ? (static_cast<long double>(stop) - start) / step
                                             : (static_cast<long double>(start) - stop) / -step;
          if (count > 100000) {  // jinja2.sandbox.MAX_RANGE
            return invalid_argument(
                "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
          }
          std::vector<Value> out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
          return Value::list(std::move(out));
        }));
  auto dict_of = [](CallArgs& args, bool is_namespace) -> StatusOr<Value> {
    Dict d;
    if (args.positional.size() > 1) return type_error("expected at most 1 positional argument");
    if (!args.positional.empty()) {
      if (!args.positional[0].is_dict())
        return type_error("'" + args.positional[0].type_name() + "' object is not a mapping");
      d = args.positional[0].as_dict();
    }
    for (auto& [k, v] : args.keyword) d.set(k, v);
    return is_namespace ? Value::make_namespace(std::move(d)) : Value::dict(std::move(d));
  };
  g.set("namespace", Value::function("namespace", [dict_of](CallArgs& a, Interpreter&) { return dict_of(a, true); }));
  g.set("dict", Value::function("dict", [dict_of](CallArgs& a, Interpreter&) { return dict_of(a, false); }));
  return g;
}

}  // namespace mmserve::chat_template
