// What a chat template can call and compute, beyond its own syntax: Jinja2's filters and tests (filters.cpp),
// attribute and item access with Python's str/dict/list methods and the globals HF defines (methods.cpp), and
// Python's operators on our values (operators.cpp). Each behaves as Jinja2 3.1 / Python 3 does for the values
// templates meet; errors are Status values whose message starts with the Python exception's name
// ("TypeError: ...", "UndefinedError: ...", "SecurityError: ..."), as the reference would raise.
// Tests: tests/unit/frontends/text/chat_template_test.cpp (ChatTemplateGolden.*).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "frontends/text/chat_template/value.h"

namespace mmserve::chat_template {

// Filter and test names the parser accepts (anything else is an error at compile time, as in Jinja2).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// `input | name(args)` and `input is name(args)`.
StatusOr<Value> apply_filter(const std::string& name, const Value& input, CallArgs& args, Interpreter& in);
StatusOr<bool> apply_test(const std::string& name, const Value& input, CallArgs& args, Interpreter& in);

// obj.name: a dict's method (items, keys, values, get) or its item, a string's or list's method, a namespace's
// attribute. Missing: an Undefined carrying Jinja2's message ("'dict object' has no attribute 'x'").
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: a dict's item, a list's/string's element (negative indices count from the end), else an attribute.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a list, tuple or string (absent bounds are Undefined or None).
StatusOr<Value> slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The globals HF's environment defines: range, namespace, dict, raise_exception, strftime_now.
Dict make_globals();

// Python operators. `op` is one of + - * / // % ** ~.
StatusOr<Value> binary_op(const std::string& op, const Value& a, const Value& b, Interpreter& in);
StatusOr<Value> negate(const Value& v, bool minus);
// `item in container`.
StatusOr<bool> contains(const Value& container, const Value& item);
// The items a for loop or a filter iterates: a list's items, a dict's keys, a string's characters, nothing
// for an Undefined; a TypeError for anything else.
StatusOr<std::vector<Value>> iterate(const Value& v);

// Error helpers: "UndefinedError: <the undefined's message>" and "TypeError: <message>".
Status undefined_error(const Value& v);
Status type_error(const std::string& message);

// Binds call arguments to parameter names (Python's rules: positional first, then keywords). Unset parameters
// stay Undefined. Too many positional arguments or an unknown keyword is a TypeError naming `function`.
Status bind_args(CallArgs& args, const std::string& function, const std::vector<std::string>& names,
                 std::vector<Value>& out);

}  // namespace mmserve::chat_template
