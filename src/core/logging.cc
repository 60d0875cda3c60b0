#include "tessera/core/logging.h"

#include <cstdio>
#include <mutex>

#include "tessera/core/params.h"

namespace tessera {

namespace {
const Param<std::string> kLogLevel("TESSERA_LOG_LEVEL", "warn",
                                   "log verbosity: error, warn, info, debug, trace",
                                   {"error", "warn", "info", "debug", "trace"});
thread_local int tls_rank = -1;

LogLevel parse_level(const std::string& s) {
  if (s == "error") return LogLevel::kError;
  if (s == "warn") return LogLevel::kWarn;
  if (s == "info") return LogLevel::kInfo;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "trace") return LogLevel::kTrace;
  throw_error(ErrorCode::kInvalidArgument,
              str("TESSERA_LOG_LEVEL = '", s, "': expected error, warn, info, debug or trace"));
}
const char* level_name(LogLevel l) {
  static const char* names[] = {"error", "warn", "info", "debug", "trace"};
  return names[int(l)];
}
}  // namespace

LogLevel log_level() { return parse_level(kLogLevel.get()); }
bool log_enabled(LogLevel level) { return int(level) <= int(log_level()); }

void log_message(LogLevel level, const std::string& message) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (tls_rank >= 0) {
    std::fprintf(stderr, "[tessera %s rank %d] %s\n", level_name(level), tls_rank,
                 message.c_str());
  } else {
    std::fprintf(stderr, "[tessera %s] %s\n", level_name(level), message.c_str());
  }
}

void set_thread_rank(int rank) { tls_rank = rank; }
int thread_rank() { return tls_rank; }

}  // namespace tessera
