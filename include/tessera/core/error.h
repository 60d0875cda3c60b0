// tessera::Error: every failure Tessera reports. A code says what kind of failure; the
// message names the argument (or peer), its value and what was expected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tessera {

enum class ErrorCode {
  kInvalidArgument,  // a caller passed something outside the documented contract
  kUnsupported,      // valid, but not implemented for this backend / dtype / shape
  kTimeout,          // a bounded wait on another rank expired
  kPeerFailure,      // another rank reported an error or went away
  kCuda,             // a CUDA runtime/driver call failed
  kNccl,             // an NCCL call failed
  kNvshmem,          // an NVSHMEM call failed
  kSystem,           // an OS call (socket, fork, file) failed
  kInternal,         // a Tessera invariant broke: a bug
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// str(a, b, c...) concatenates anything with an operator<<; used to build messages.
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

}  // namespace tessera

// TESSERA_CHECK(cond, code, message parts...): throws tessera::Error(code, message) if !cond.
#define TESSERA_CHECK(cond, code, ...)                          \
  do {                                                          \
    if (!(cond)) ::tessera::throw_error(code, ::tessera::str(__VA_ARGS__)); \
  } while (0)

// TESSERA_CHECK_ARG(cond, message parts...): argument validation at public entries.
#define TESSERA_CHECK_ARG(cond, ...) \
  TESSERA_CHECK(cond, ::tessera::ErrorCode::kInvalidArgument, __VA_ARGS__)
