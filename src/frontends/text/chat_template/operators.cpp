// Python's operators on template values: arithmetic with Python's int/float rules (true division, floor
// division and modulo rounding toward negative infinity, overflow reported instead of big integers),
// concatenation and repetition of strings and lists, membership, iteration and slicing. Also the argument
// binder the filters and methods share. Test: tests/unit/frontends/text/chat_template_test.cpp (ChatTemplateGolden.*).
#include <cmath>
#include <limits>

#include "frontends/text/chat_template/builtins.h"
#include "frontends/text/chat_template/interpreter.h"

namespace mmserve::chat_template {

Status undefined_error(const Value& v) {
  const std::string& m = v.as_string();
  if (m.rfind("SecurityError: ", 0) == 0) return invalid_argument(m);
  return invalid_argument("UndefinedError: " + m);
}

Status type_error(const std::string& message) {
  return invalid_argument("TypeError: " + message);
}

Status bind_args(CallArgs& args, const std::string& function, const std::vector<std::string>& names,
                 std::vector<Value>& out) {
  out.assign(names.size(), Value());
  if (args.positional.size() > names.size()) {
    return type_error(function + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
                      std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < names.size() && names[i] != key) ++i;
    if (i == names.size()) return type_error(function + "() got an unexpected keyword argument '" + key + "'");
    if (i < args.positional.size()) return type_error(function + "() got multiple values for argument '" + key + "'");
    out[i] = value;
  }
  return ok_status();
}

namespace {

bool is_intlike(const Value& v) {
  return v.kind() == Kind::kInt || v.kind() == Kind::kBool;
}

Status unsupported(const std::string& op, const Value& a, const Value& b) {
  return type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Status overflow() {
  return invalid_argument("OverflowError: integer result beyond 64 bits (Python would use a big integer)");
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

StatusOr<Value> repeat(const Value& seq, int64_t n, Interpreter& in) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.is_tuple());
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size() * 16;
  if (unit > 0) {
    const uint64_t total = unit * static_cast<uint64_t>(std::min<int64_t>(n, int64_t{1} << 40));
    RETURN_IF_ERROR(in.check_size(total));
    RETURN_IF_ERROR(in.charge(static_cast<int64_t>(total / 32)));
  }
  if (seq.is_string()) {
    std::string out;
    out.reserve(seq.as_string().size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n && !seq.as_list().empty(); ++i) {
    out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  }
  return Value::list(std::move(out), seq.is_tuple());
}

}  // namespace

StatusOr<Value> binary_op(const std::string& op, const Value& a, const Value& b, Interpreter& in) {
  if (op == "~") {  // Jinja's string concatenation: str() of both, an Undefined is ""
    std::string s = to_str(a) + to_str(b);
    RETURN_IF_ERROR(in.check_size(s.size()));
    RETURN_IF_ERROR(in.charge(static_cast<int64_t>(s.size() / 32)));
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = is_intlike(a) && is_intlike(b);
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value::integer(r);
    }
    if (numbers) return Value::floating(a.as_float() + b.as_float());
    if (a.is_string()) {
      if (!b.is_string()) return type_error("can only concatenate str (not \"" + b.type_name() + "\") to str");
      RETURN_IF_ERROR(in.check_size(a.as_string().size() + b.as_string().size()));
      RETURN_IF_ERROR(in.charge(static_cast<int64_t>((a.as_string().size() + b.as_string().size()) / 32)));
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && !a.is_view()) {
      if (!b.is_list() || b.is_view() || a.is_tuple() != b.is_tuple()) {
        return type_error("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " +
                          a.type_name());
      }
      RETURN_IF_ERROR(in.charge(static_cast<int64_t>(a.as_list().size() + b.as_list().size())));
      std::vector<Value> items = a.as_list();
      items.insert(items.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(items), a.is_tuple());
    }
    return unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value::integer(r);
    }
    if (numbers) return Value::floating(a.as_float() - b.as_float());
    return unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value::integer(r);
    }
    if (numbers) return Value::floating(a.as_float() * b.as_float());
    if ((a.is_string() || (a.is_list() && !a.is_view())) && is_intlike(b)) return repeat(a, b.as_int(), in);
    if ((b.is_string() || (b.is_list() && !b.is_view())) && is_intlike(a)) return repeat(b, a.as_int(), in);
    const bool a_seq = a.is_string() || (a.is_list() && !a.is_view()),
               b_seq = b.is_string() || (b.is_list() && !b.is_view());
    if (a_seq || b_seq) {  // Python names the operand that is not an int (the right one if both are sequences)
      return type_error("can't multiply sequence by non-int of type '" +
                        (b_seq && a_seq ? b
                         : a_seq        ? b
                                        : a)
                            .type_name() +
                        "'");
    }
    return unsupported("*", a, b);
  }
  if (op == "/") {
    if (!numbers) return unsupported("/", a, b);
    if (b.as_float() == 0) {
      return invalid_argument(ints ? "ZeroDivisionError: division by zero"
                                   : "ZeroDivisionError: float division by zero");
    }
    return Value::floating(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (!numbers) {
      if (op == "%" && a.is_string()) {
        if (a.as_string().find('%') == std::string::npos) {
          // No conversion specifiers: Python returns the string for a mapping-like argument (a dict or list)
          // or an empty tuple, and refuses anything else.
          if (b.is_dict() || (b.is_list() && (!b.is_tuple() || b.as_list().empty()))) return a;
          return type_error("not all arguments converted during string formatting");
        }
        return unimplemented("TypeError: printf-style 'str % args' is not supported");
      }
      return unsupported(op, a, b);
    }
    if (ints) {
      if (b.as_int() == 0)
        return invalid_argument(op == "//" ? "ZeroDivisionError: integer division or modulo by zero"
                                           : "ZeroDivisionError: integer modulo by zero");
      if (a.as_int() == std::numeric_limits<int64_t>::min() && b.as_int() == -1) return overflow();
      return Value::integer(op == "//" ? floor_div(a.as_int(), b.as_int()) : floor_mod(a.as_int(), b.as_int()));
    }
    const double x = a.as_float(), y = b.as_float();
    if (y == 0) {
      return invalid_argument(op == "//" ? "ZeroDivisionError: float floor division by zero"
                                         : "ZeroDivisionError: float modulo");
    }
    // CPython's _float_div_mod: the quotient from (x - fmod(x, y)) / y, so 2 // 0.1 is 19.0, not floor(20.0).
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return Value::floating(mod);
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::floating(floordiv);
  }
  if (op == "**") {
    if (!numbers) return unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int(), e = b.as_int();
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(result, base, &result)) return overflow();
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
      }
      return Value::integer(result);
    }
    if (a.as_float() == 0 && b.as_float() < 0) {
      return invalid_argument("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    }
    return Value::floating(std::pow(a.as_float(), b.as_float()));
  }
  return internal_error("unknown operator " + op);
}

StatusOr<Value> negate(const Value& v, bool minus) {
  if (v.is_undefined()) return undefined_error(v);
  if (is_intlike(v)) {
    if (!minus) return Value::integer(v.as_int());
    if (v.as_int() == std::numeric_limits<int64_t>::min()) return overflow();
    return Value::integer(-v.as_int());
  }
  if (v.kind() == Kind::kFloat) return Value::floating(minus ? -v.as_float() : v.as_float());
  return type_error(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" + v.type_name() + "'");
}

StatusOr<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;  // jinja2's Undefined iterates as empty
    case Kind::kString:
      if (!item.is_string()) {
        return type_error("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
      for (const auto& v : container.as_list()) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      if (item.is_list() && !item.is_tuple()) return type_error("unhashable type: 'list'");
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default: return type_error("argument of type '" + container.type_name() + "' is not iterable");
  }
}

StatusOr<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return std::vector<Value>{};
    case Kind::kList: return v.as_list();
    case Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, _] : v.as_dict().items) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (const char32_t cp : utf8_to_u32(v.as_string())) {
        std::string s;
        append_utf8(s, cp);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default: return type_error("'" + v.type_name() + "' object is not iterable");
  }
}

StatusOr<Value> slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  // Slices compile to Python subscripts in jinja2 (not through its getitem), so Python's TypeErrors show.
  auto bound = [](const Value& v, std::optional<int64_t>& out) -> Status {
    if (v.is_undefined() || v.is_none()) return ok_status();
    if (!is_intlike(v)) return type_error("slice indices must be integers or None or have an __index__ method");
    out = v.as_int();
    return ok_status();
  };
  if (obj.is_dict()) return type_error("unhashable type: 'slice'");
  if (obj.is_view()) return type_error("'" + obj.type_name() + "' object is not subscriptable");
  if (!obj.is_string() && !obj.is_list()) return type_error("'" + obj.type_name() + "' object is not subscriptable");
  std::optional<int64_t> start, stop, step;
  RETURN_IF_ERROR(bound(start_v, start));
  RETURN_IF_ERROR(bound(stop_v, stop));
  RETURN_IF_ERROR(bound(step_v, step));
  const int64_t s = step.value_or(1);
  if (s == 0) return invalid_argument("ValueError: slice step cannot be zero");
  std::u32string chars;
  int64_t len = 0;
  if (obj.is_string()) {
    chars = utf8_to_u32(obj.as_string());
    len = static_cast<int64_t>(chars.size());
  } else {
    len = static_cast<int64_t>(obj.as_list().size());
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = s < 0 ? -1 : 0;
    } else if (x >= len) {
      x = s < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t lo = adjust(start, s < 0 ? len - 1 : 0);
  const int64_t hi = adjust(stop, s < 0 ? -1 : len);
  std::vector<int64_t> picks;
  for (int64_t i = lo; s > 0 ? i < hi : i > hi; i += s) picks.push_back(i);
  if (obj.is_string()) {
    std::u32string out;
    for (const int64_t i : picks) out += chars[static_cast<size_t>(i)];
    return Value::string(u32_to_utf8(out));
  }
  std::vector<Value> out;
  for (const int64_t i : picks) out.push_back(obj.as_list()[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.is_tuple());
}

}  // namespace mmserve::chat_template
