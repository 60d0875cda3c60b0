// Registered environment parameters: the one mechanism for every Tessera knob. Each
// parameter is declared once (name, default, help) next to the code that reads it; its value
// comes from the environment variable of the same name, or from override() (the CLI's
// flags). `tessera info` prints them all via all_params().
//
//   const Param<int64_t> kTimeoutMs("TESSERA_TIMEOUT_MS", 60000, "bound on every wait");
//   auto ms = kTimeoutMs.get();
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

struct ParamInfo {
  std::string name;
  std::string default_value;
  std::string current_value;
  std::string help;
  bool from_environment = false;
};

std::vector<ParamInfo> all_params();

// Reads every registered parameter once; throws the first one's error (kInvalidArgument
// naming the variable, its text and what was expected) when the environment holds a value
// that does not parse or lies outside its range. Entry points call it before starting work
// (the CLI before any command but `info`), so a bad value fails at once, not in every rank.
void check_params();

namespace detail {
class ParamBase {
 public:
  ParamBase(const char* name, const char* help);
  virtual ~ParamBase() = default;
  const char* name() const { return name_; }
  const char* help() const { return help_; }
  virtual std::string default_string() const = 0;
  virtual std::string current_string() const = 0;
  // The environment's text for this parameter, if set.
  std::optional<std::string> env_text() const;

 private:
  const char* name_;
  const char* help_;
};
}  // namespace detail

// T is bool, int64_t, double or std::string. Parse errors throw kInvalidArgument naming the
// variable and the expected form. Numeric parameters may declare the range they accept
// [min, max], text parameters the values they accept: a value outside them (from the
// environment or override()) is rejected, never clamped, so a typo cannot silently become a
// zero timeout.
template <typename T>
class Param : public detail::ParamBase {
 public:
  Param(const char* name, T default_value, const char* help)
      : ParamBase(name, help), default_(std::move(default_value)) {}
  Param(const char* name, T default_value, const char* help, T min, T max)
      : ParamBase(name, help), default_(std::move(default_value)), min_(min), max_(max) {}
  Param(const char* name, T default_value, const char* help, std::vector<T> choices)
      : ParamBase(name, help), default_(std::move(default_value)), choices_(std::move(choices)) {}

  T get() const;
  // Sets the value for this process (wins over the environment).
  void override(T value) const;
  void clear_override() const;
  std::string default_string() const override;
  std::string current_string() const override;

 private:
  void check_range(const T& value, const std::string& text) const;

  T default_;
  std::optional<T> min_, max_;
  std::vector<T> choices_;  // empty: any value
  mutable std::mutex mutex_;
  mutable std::optional<T> override_;
};

extern template class Param<bool>;
extern template class Param<int64_t>;
extern template class Param<double>;
extern template class Param<std::string>;

// The bound on every wait for another rank, in milliseconds (TESSERA_TIMEOUT_MS).
int64_t wait_timeout_ms();

// Where a file Tessera keeps between runs (the tuners' tables) lives: `override`'s value when
// it is set (its TESSERA_* variable), else $XDG_CACHE_HOME/tessera/<file_name>, else
// ~/.cache/tessera/<file_name>.
std::string user_cache_file(const Param<std::string>& override, const std::string& file_name);
extern const Param<int64_t> kWaitTimeoutMs;

}  // namespace tessera
