// Leveled logging to stderr, prefixed with the rank when one is set for the calling thread.
// The level comes from the TESSERA_LOG_LEVEL parameter (error|warn|info|debug|trace).
#pragma once

#include <string>

#include "tessera/core/error.h"

namespace tessera {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

LogLevel log_level();
bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);
// The rank shown in log prefixes and timeout messages for the calling thread (-1: none).
void set_thread_rank(int rank);
int thread_rank();

}  // namespace tessera

#define TESSERA_LOG(level, ...)                                                    \
  do {                                                                             \
    if (::tessera::log_enabled(::tessera::LogLevel::level))                        \
      ::tessera::log_message(::tessera::LogLevel::level, ::tessera::str(__VA_ARGS__)); \
  } while (0)
