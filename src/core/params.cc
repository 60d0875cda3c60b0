#include "tessera/core/params.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tessera/core/error.h"

namespace tessera {

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<detail::ParamBase*>& registry() {
  static std::vector<detail::ParamBase*> r;
  return r;
}

template <typename T>
T parse_value(const std::string& text, const char* name);

template <>
bool parse_value<bool>(const std::string& t, const char* name) {
  if (t == "1" || t == "true" || t == "on" || t == "yes") return true;
  if (t == "0" || t == "false" || t == "off" || t == "no") return false;
  throw_error(ErrorCode::kInvalidArgument,
              str(name, " = '", t, "': expected 1/0, true/false, on/off or yes/no"));
}
template <>
int64_t parse_value<int64_t>(const std::string& t, const char* name) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(t.c_str(), &end, 10);
  // strtoll skips leading blanks and saturates on overflow: both refused.
  TESSERA_CHECK_ARG(!t.empty() && !std::isspace(static_cast<unsigned char>(t[0])) && end &&
                        *end == '\0' && errno != ERANGE,
                    name, " = '", t, "': expected an integer");
  return v;
}
template <>
double parse_value<double>(const std::string& t, const char* name) {
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  TESSERA_CHECK_ARG(!t.empty() && !std::isspace(static_cast<unsigned char>(t[0])) && end &&
                        *end == '\0' && std::isfinite(v),
                    name, " = '", t, "': expected a finite number");
  return v;
}
template <>
std::string parse_value<std::string>(const std::string& t, const char*) {
  return t;
}

template <typename T>
std::string to_text(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "1" : "0";
  } else if constexpr (std::is_floating_point_v<T>) {
    // The shortest text that reads back as the same value: a stream's six digits do not.
    char buf[32];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return ec == std::errc() ? std::string(buf, end) : str(v);
  } else {
    return str(v);
  }
}
}  // namespace

namespace detail {
ParamBase::ParamBase(const char* name, const char* help) : name_(name), help_(help) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(this);
}

std::optional<std::string> ParamBase::env_text() const {
  const char* v = std::getenv(name_);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}
}  // namespace detail

template <typename T>
void Param<T>::check_range(const T& value, const std::string& text) const {
  if constexpr (std::is_floating_point_v<T>) {
    // As from the environment: NaN would pass any range test below, infinity is no setting.
    TESSERA_CHECK_ARG(std::isfinite(value), name(), " = '", text, "': expected a finite number (",
                      help(), ")");
  }
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if ((min_ && value < *min_) || (max_ && value > *max_)) {
      throw_error(ErrorCode::kInvalidArgument,
                  str(name(), " = '", text, "': expected ",
                      std::is_integral_v<T> ? "an integer" : "a number", " from ", *min_, " to ",
                      *max_, " (", help(), ")"));
    }
  }
  if (!choices_.empty() && std::find(choices_.begin(), choices_.end(), value) == choices_.end()) {
    std::string expected;
    for (size_t i = 0; i < choices_.size(); ++i) {
      expected += str(i == 0 ? "" : i + 1 == choices_.size() ? " or " : ", ", to_text(choices_[i]));
    }
    throw_error(ErrorCode::kInvalidArgument,
                str(name(), " = '", text, "': expected ", expected, " (", help(), ")"));
  }
}

template <typename T>
T Param<T>::get() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (override_) return *override_;
  }
  if (auto text = env_text()) {
    T value = parse_value<T>(*text, name());
    check_range(value, *text);
    return value;
  }
  return default_;
}

template <typename T>
void Param<T>::override(T value) const {
  check_range(value, to_text(value));
  std::lock_guard<std::mutex> lock(mutex_);
  override_ = std::move(value);
}

template <typename T>
void Param<T>::clear_override() const {
  std::lock_guard<std::mutex> lock(mutex_);
  override_.reset();
}

template <typename T>
std::string Param<T>::default_string() const {
  return to_text(default_);
}

template <typename T>
std::string Param<T>::current_string() const {
  return to_text(get());
}

template class Param<bool>;
template class Param<int64_t>;
template class Param<double>;
template class Param<std::string>;

std::vector<ParamInfo> all_params() {
  std::vector<ParamInfo> out;
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (auto* p : registry()) {
    ParamInfo info;
    info.name = p->name();
    info.help = p->help();
    info.default_value = p->default_string();
    info.from_environment = p->env_text().has_value();
    try {
      info.current_value = p->current_string();
    } catch (const Error& e) {
      info.current_value = str("<invalid: ", e.what(), ">");
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const ParamInfo& a, const ParamInfo& b) { return a.name < b.name; });
  return out;
}

void check_params() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<detail::ParamBase*> params = registry();
  std::sort(params.begin(), params.end(), [](const detail::ParamBase* a, const detail::ParamBase* b) {
    return std::string(a->name()) < b->name();
  });
  for (const detail::ParamBase* p : params) (void)p->current_string();
}

// A day at most: a longer bound is no bound, and ms counts beyond it overflow clock arithmetic.
const Param<int64_t> kWaitTimeoutMs(
    "TESSERA_TIMEOUT_MS", 60000,
    "bound on every wait for another rank (bootstrap, collectives, signals, barriers), in ms", 1,
    86400000);

int64_t wait_timeout_ms() { return kWaitTimeoutMs.get(); }

std::string user_cache_file(const Param<std::string>& override, const std::string& file_name) {
  if (std::string p = override.get(); !p.empty()) return p;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/tessera/" + file_name;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/tessera/" + file_name;
}

}  // namespace tessera
