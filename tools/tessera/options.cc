#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tessera/core/error.h"

namespace tessera::cli {

Options::Options(std::string command, std::vector<OptionSpec> specs)
    : command_(std::move(command)), specs_(std::move(specs)) {
  for (const auto& s : specs_) values_[s.name] = s.is_flag ? "0" : s.default_value;
}

const OptionSpec& Options::spec(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return s;
  throw_error(ErrorCode::kInternal, str("option --", name, " is not declared by '", command_, "'"));
}

std::string Options::usage() const {
  std::string u = str("usage: tessera ", command_, " [options]\n");
  for (const auto& s : specs_) {
    std::string left = "--" + s.name + (s.is_flag ? "" : " VALUE");
    u += str("  ", left, std::string(left.size() < 26 ? 26 - left.size() : 1, ' '), s.help);
    if (!s.is_flag && !s.default_value.empty()) u += str(" (default ", s.default_value, ")");
    u += "\n";
  }
  return u;
}

void Options::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_requested_ = true;
      continue;
    }
    TESSERA_CHECK_ARG(a.rfind("--", 0) == 0, "tessera ", command_, ": unexpected argument '", a,
                      "': expected options of the form --name [value]");
    std::string name = a.substr(2);
    std::string value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const OptionSpec* found = nullptr;
    for (const auto& s : specs_)
      if (s.name == name) found = &s;
    if (found == nullptr) {
      std::string known;
      for (const auto& s : specs_) known += " --" + s.name;
      throw_error(ErrorCode::kInvalidArgument,
                  str("tessera ", command_, ": unknown option '--", name, "'; known:", known));
    }
    if (found->is_flag) {
      TESSERA_CHECK_ARG(!inline_value, "tessera ", command_, ": --", name, " takes no value");
      value = "1";
    } else if (!inline_value) {
      TESSERA_CHECK_ARG(i + 1 < args.size(), "tessera ", command_, ": --", name,
                        " needs a value (", found->help, ")");
      value = args[++i];
    }
    values_[name] = value;
    given_[name] = true;
  }
}

bool Options::flag(const std::string& name) const { return spec(name).is_flag && values_.at(name) == "1"; }
bool Options::given(const std::string& name) const {
  spec(name);
  return given_.count(name) > 0;
}
const std::string& Options::text(const std::string& name) const {
  spec(name);
  return values_.at(name);
}

int64_t Options::integer(const std::string& name, int64_t min, int64_t max) const {
  return parse_integer(text(name), "--" + name, min, max);
}

double Options::number(const std::string& name, double min, double max) const {
  const std::string& t = text(name);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  const bool bounded =
      min > std::numeric_limits<double>::lowest() || max < std::numeric_limits<double>::max();
  TESSERA_CHECK_ARG(!t.empty() && *end == '\0' && std::isfinite(v) && v >= min && v <= max, "--",
                    name, " = '", t, "': expected a finite number",
                    bounded ? str(" from ", min, " to ", max) : std::string());
  return v;
}

std::vector<int64_t> Options::integers(const std::string& name, int64_t min, int64_t max) const {
  std::vector<int64_t> out;
  for (const std::string& item : list(name))
    out.push_back(parse_integer(item, "--" + name, min, max));
  TESSERA_CHECK_ARG(!out.empty(), "--", name, " = '", text(name),
                    "': expected a comma list of integers from ", min, " to ", max);
  return out;
}

int64_t parse_integer(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  const bool whole = !text.empty() && *end == '\0' && errno != ERANGE;
  const std::string range = max == std::numeric_limits<int64_t>::max()
                                ? str(">= ", min)
                                : str("from ", min, " to ", max);
  TESSERA_CHECK_ARG(whole && v >= min && v <= max, what, " = '", text, "': expected an integer ",
                    range);
  return v;
}

size_t Options::bytes(const std::string& name) const { return parse_bytes(text(name), "--" + name); }

std::vector<std::string> Options::list(const std::string& name) const {
  return split(text(name));
}

std::vector<std::string> Options::split(const std::string& t) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= t.size()) {
    size_t comma = t.find(',', start);
    std::string item = t.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

size_t parse_bytes(const std::string& text, const std::string& what) {
  constexpr double kMaxBytes = double(int64_t(1) << 62);
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string suffix(end ? end : "");
  double scale = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B") v = -1;
  // !(x <= max) also rejects NaN.
  TESSERA_CHECK_ARG(!text.empty() && end != text.c_str() && v >= 0 && v * scale <= kMaxBytes, what,
                    " = '", text,
                    "': expected a byte count such as 4096, 512K, 64M or 1G (at most 2^62)");
  return size_t(v * scale);
}

std::vector<size_t> power_of_two_range(size_t lo, size_t hi) {
  TESSERA_CHECK_ARG(lo > 0 && lo <= hi && hi <= (size_t(1) << 62), "size range ", lo, "..", hi,
                    ": expected 0 < min <= max <= 2^62");
  std::vector<size_t> out;
  for (size_t s = lo; s <= hi; s *= 2) out.push_back(s);
  return out;
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "K", "M", "G"};
  int u = 0;
  size_t v = bytes;
  while (u < 3 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return str(v, units[u]);
}

}  // namespace tessera::cli
