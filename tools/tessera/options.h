// Command-line options of one subcommand: `--name value` or `--name=value`, flags without a
// value. Unknown options, missing values and malformed numbers throw tessera::Error naming
// the option and what was expected.
#pragma once

#include <cstdint>
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
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  // "64M", "1G", "4096", "512K": powers of two (K = 1024).
  size_t bytes(const std::string& name) const;
  // A comma list of text values.
  std::vector<std::string> list(const std::string& name) const;

 private:
  const OptionSpec& spec(const std::string& name) const;
  std::string command_;
  std::vector<OptionSpec> specs_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> given_;
  bool help_requested_ = false;
};

// Parses "64M" / "1G" / "4096" / "512K" (powers of two); `what` names the source in errors.
size_t parse_bytes(const std::string& text, const std::string& what);
// "1M".."256M" -> every power of two from lo to hi inclusive.
std::vector<size_t> power_of_two_range(size_t lo, size_t hi);
std::string format_bytes(size_t bytes);  // "64M", "1G", "512K", "100B"

}  // namespace tessera::cli
