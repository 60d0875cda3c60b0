// Internal: strict, typed reads of a JSON object's fields for the model runtime's file readers
// (config.json, model.safetensors.index.json). Every failure throws kInvalidArgument naming the
// source, the field's path ("rope_scaling.factor"), the value as written and what was
// expected, so a user can find the line to fix.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::model::detail {

using Json = nlohmann::json;

// Parses `text` as one JSON value. Refuses nesting deeper than `max_depth` (the readers' files
// are shallow; a deep one is hostile) and, in every object, a key given twice (JSON leaves it
// undefined which one counts). Errors name `source`.
Json parse_json(std::string_view text, std::string_view source, int max_depth = 32);

// A short rendering of a value for messages: at most ~60 characters, with its JSON type.
std::string describe(const Json& value);

class JsonFields {
 public:
  // `object` must outlive this; `prefix` is prepended to field names ("rope_scaling.").
  JsonFields(const Json& object, std::string source, std::string prefix = "");

  bool has(std::string_view name) const;          // present and not null
  const Json* find(std::string_view name) const;  // nullptr when absent (null is returned)

  // An integer in [lo, hi]; absent or null: `fallback`, or an error when there is none.
  int64_t integer(std::string_view name, int64_t lo, int64_t hi,
                  std::optional<int64_t> fallback = std::nullopt) const;
  // A finite number (integer or not) in [lo, hi]; `lo_open` excludes lo itself.
  double number(std::string_view name, double lo, double hi, std::optional<double> fallback,
                bool lo_open = false) const;
  bool boolean(std::string_view name, std::optional<bool> fallback = std::nullopt) const;
  std::string text(std::string_view name, std::optional<std::string> fallback = std::nullopt) const;
  // A list of integers, each in [lo, hi], with from min_count to max_count entries.
  std::vector<int64_t> integers(std::string_view name, int64_t lo, int64_t hi, size_t min_count,
                                size_t max_count,
                                std::optional<std::vector<int64_t>> fallback = std::nullopt) const;

  // Throws kInvalidArgument: "<source>: <prefix><name> = <value>: expected <expected>".
  [[noreturn]] void fail(std::string_view name, const Json* value, std::string_view expected) const;
  const std::string& source() const { return source_; }
  std::string path(std::string_view name) const { return prefix_ + std::string(name); }

 private:
  const Json& object_;
  std::string source_;
  std::string prefix_;
};

}  // namespace tessera::model::detail
