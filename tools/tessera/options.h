// Command-line options of one subcommand: `--name value` or `--name=value`, flags without a
// value. Unknown options, missing values and malformed numbers throw tessera::Error naming
// the option and what was expected.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace tessera::cli {

struct OptionSpec {
  std::string name;           // without the leading "--"
  std::string default_value;  // "" for none
  std::string help;
  bool is_flag = false;       // takes no value
};

class Options {
 public:
  Options(std::string command, std::vector<OptionSpec> specs);
  // Throws kInvalidArgument for anything not in the specs. "--help" sets help_requested().
  void parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  std::string usage() const;
  bool flag(const std::string& name) const;
  bool given(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  // The value as an integer in [min, max]; throws naming the option and the range otherwise
  // (also when the text overflows int64).
  int64_t integer(const std::string& name, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  // A finite number in [min, max].
  double number(const std::string& name, double min = std::numeric_limits<double>::lowest(),
                double max = std::numeric_limits<double>::max()) const;
  // A comma list of integers, each in [min, max]; at least one.
  std::vector<int64_t> integers(const std::string& name, int64_t min, int64_t max) const;
  // "64M", "1G", "4096", "512K": powers of two (K = 1024).
  size_t bytes(const std::string& name) const;
  // A comma list of text values (empty items left out).
  std::vector<std::string> list(const std::string& name) const;
  static std::vector<std::string> split(const std::string& comma_list);

 private:
  const OptionSpec& spec(const std::string& name) const;
  std::string command_;
  std::vector<OptionSpec> specs_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> given_;
  bool help_requested_ = false;
};

// Parses "64M" / "1G" / "4096" / "512K" (powers of two); `what` names the source in errors.
// At most 2^62 bytes (larger counts are surely a mistake and would overflow arithmetic).
size_t parse_bytes(const std::string& text, const std::string& what);
// Decimal integer in [min, max]; `what` ("--seq") names the source in errors.
int64_t parse_integer(const std::string& text, const std::string& what, int64_t min, int64_t max);
// "1M".."256M" -> every power of two from lo to hi inclusive (hi at most 2^62).
std::vector<size_t> power_of_two_range(size_t lo, size_t hi);
std::string format_bytes(size_t bytes);  // "64M", "1G", "512K", "100B"

}  // namespace tessera::cli
