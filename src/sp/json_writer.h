// A minimal streaming JSON writer for plans, simulation results and auto reports: objects,
// arrays, strings (escaped), integers, doubles and booleans, with commas placed for the
// caller. Output is deterministic and compact (one line).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::sp::detail {

class JsonWriter {
 public:
  JsonWriter& begin_object() {
    value_prefix();
    out_ += '{';
    first_.push_back(true);
    return *this;
  }
  JsonWriter& end_object() {
    out_ += '}';
    first_.pop_back();
    return *this;
  }
  JsonWriter& begin_array() {
    value_prefix();
    out_ += '[';
    first_.push_back(true);
    return *this;
  }
  JsonWriter& end_array() {
    out_ += ']';
    first_.pop_back();
    return *this;
  }
  // Starts a member of the current object; the next value call writes its value.
  JsonWriter& key(std::string_view name) {
    comma();
    write_string(name);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(std::string_view text) {
    value_prefix();
    write_string(text);
    return *this;
  }
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(bool b) {
    value_prefix();
    out_ += b ? "true" : "false";
    return *this;
  }
  JsonWriter& value(int v) { return value(int64_t(v)); }
  JsonWriter& value(int64_t v) {
    value_prefix();
    out_ += std::to_string(v);
    return *this;
  }
  JsonWriter& value(double v) {
    value_prefix();
    if (!std::isfinite(v)) {
      out_ += "null";
    } else {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.6g", v);
      out_ += buf;
    }
    return *this;
  }
  template <typename T>
  JsonWriter& member(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }
  JsonWriter& int_array(const std::vector<int>& values) {
    begin_array();
    for (int v : values) value(v);
    return end_array();
  }
  const std::string& str() const { return out_; }

 private:
  void comma() {
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
  void value_prefix() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    comma();
  }
  void write_string(std::string_view s) {
    out_ += '"';
    for (char c : s) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '\r':
          out_ += "\\r";
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace tessera::sp::detail
