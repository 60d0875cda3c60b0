#include "tessera/core/error.h"

#include "tessera/core/logging.h"

namespace tessera {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerFailure: return "peer failure";
    case ErrorCode::kCuda: return "CUDA error";
    case ErrorCode::kNccl: return "NCCL error";
    case ErrorCode::kNvshmem: return "NVSHMEM error";
    case ErrorCode::kSystem: return "system error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "error";
}

static std::string with_prefix(ErrorCode code, const std::string& message) {
  int rank = thread_rank();
  std::string where = rank >= 0 ? str("tessera rank ", rank, ": ") : std::string("tessera: ");
  return where + error_code_name(code) + ": " + message;
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(with_prefix(code, message)), code_(code) {}

void throw_error(ErrorCode code, const std::string& message) { throw Error(code, message); }

}  // namespace tessera
