#include "model/json_fields.h"

#include <cmath>
#include <limits>
#include <set>

#include "tessera/core/error.h"

namespace tessera::model::detail {

namespace {

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "a list";
    case Json::value_t::object:
      return "an object";
    default:
      return "a binary value";
  }
}

}  // namespace

Json parse_json(std::string_view text, std::string_view source, int max_depth) {
  // One set of keys per object being parsed, innermost last.
  std::vector<std::set<std::string>> open_objects;
  auto guard = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > max_depth)
      throw_error(ErrorCode::kInvalidArgument, str(source, ": JSON nested deeper than ", max_depth,
                                                   " levels: expected a ", "shallow file"));
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second)
          throw_error(ErrorCode::kInvalidArgument,
                      str(source, ": key \"", parsed.get<std::string>().substr(0, 80),
                          "\" appears twice in one object: expected each key once"));
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), guard);
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kInvalidArgument, str(source, ": not valid JSON: ", e.what()));
  }
}

std::string describe(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return str(text, " (", type_name(value), ")");
}

JsonFields::JsonFields(const Json& object, std::string source, std::string prefix)
    : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!object_.is_object())
    throw_error(
        ErrorCode::kInvalidArgument,
        str(source_, ": ", prefix_.empty() ? "the file" : prefix_.substr(0, prefix_.size() - 1),
            " = ", describe(object_), ": expected a JSON object"));
}

const Json* JsonFields::find(std::string_view name) const {
  auto it = object_.find(name);
  return it == object_.end() ? nullptr : &*it;
}

bool JsonFields::has(std::string_view name) const {
  const Json* v = find(name);
  return v != nullptr && !v->is_null();
}

void JsonFields::fail(std::string_view name, const Json* value, std::string_view expected) const {
  if (value == nullptr)
    throw_error(ErrorCode::kInvalidArgument,
                str(source_, ": ", path(name), " is missing: expected ", expected));
  throw_error(ErrorCode::kInvalidArgument,
              str(source_, ": ", path(name), " = ", describe(*value), ": expected ", expected));
}

int64_t JsonFields::integer(std::string_view name, int64_t lo, int64_t hi,
                            std::optional<int64_t> fallback) const {
  const Json* v = find(name);
  const std::string expected = str("an integer from ", lo, " to ", hi);
  if (v == nullptr || v->is_null()) {
    if (fallback) return *fallback;
    fail(name, v, expected);
  }
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()) || int64_t(u) < lo || int64_t(u) > hi)
      fail(name, v, expected);
    return int64_t(u);
  }
  if (!v->is_number_integer()) fail(name, v, expected);
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) fail(name, v, expected);
  return i;
}

double JsonFields::number(std::string_view name, double lo, double hi,
                          std::optional<double> fallback, bool lo_open) const {
  const Json* v = find(name);
  const std::string expected = str("a finite number ", lo_open ? "> " : ">= ", lo, " and <= ", hi);
  if (v == nullptr || v->is_null()) {
    if (fallback) return *fallback;
    fail(name, v, expected);
  }
  if (!v->is_number()) fail(name, v, expected);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || (lo_open && d == lo) || d > hi) fail(name, v, expected);
  return d;
}

bool JsonFields::boolean(std::string_view name, std::optional<bool> fallback) const {
  const Json* v = find(name);
  if (v == nullptr || v->is_null()) {
    if (fallback) return *fallback;
    fail(name, v, "true or false");
  }
  if (!v->is_boolean()) fail(name, v, "true or false");
  return v->get<bool>();
}

std::string JsonFields::text(std::string_view name, std::optional<std::string> fallback) const {
  const Json* v = find(name);
  if (v == nullptr || v->is_null()) {
    if (fallback) return *fallback;
    fail(name, v, "a string");
  }
  if (!v->is_string()) fail(name, v, "a string");
  return v->get<std::string>();
}

std::vector<int64_t> JsonFields::integers(std::string_view name, int64_t lo, int64_t hi,
                                          size_t min_count, size_t max_count,
                                          std::optional<std::vector<int64_t>> fallback) const {
  const Json* v = find(name);
  const std::string expected =
      str("a list of ", min_count, " to ", max_count, " integers from ", lo, " to ", hi);
  if (v == nullptr || v->is_null()) {
    if (fallback) return *fallback;
    fail(name, v, expected);
  }
  if (!v->is_array() || v->size() < min_count || v->size() > max_count) fail(name, v, expected);
  std::vector<int64_t> out;
  for (const Json& e : *v) {
    const bool in_range = (e.is_number_unsigned() &&
                           e.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()) &&
                           int64_t(e.get<uint64_t>()) >= lo && int64_t(e.get<uint64_t>()) <= hi) ||
                          (e.is_number_integer() && !e.is_number_unsigned() &&
                           e.get<int64_t>() >= lo && e.get<int64_t>() <= hi);
    if (!in_range) fail(name, v, expected);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

}  // namespace tessera::model::detail
