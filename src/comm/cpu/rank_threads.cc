#include "comm/cpu/rank_threads.h"

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"

namespace tessera::cpu {

namespace {

struct RankOutcome {
  bool failed = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // without the "tessera rank N: <code>: " prefix
};

// Error::what() starts with "tessera rank N: <code name>: " (or "tessera: <code name>: ").
std::string without_prefix(const Error& e) {
  const std::string s = e.what();
  const std::string code_part = str(error_code_name(e.code()), ": ");
  const size_t pos = s.find(code_part);
  if (s.rfind("tessera", 0) == 0 && pos != std::string::npos) {
    return s.substr(pos + code_part.size());
  }
  return s;
}

}  // namespace

void run_rank_threads(int world_size, const std::shared_ptr<FailureState>& failure,
                      const std::function<void(int rank)>& body) {
  std::vector<RankOutcome> outcomes(world_size);
  auto run_rank = [&](int r) {
    set_thread_rank(r);
    try {
      body(r);
    } catch (const Error& e) {
      outcomes[r] = {true, e.code(), without_prefix(e)};
      failure->mark_failed(r, e.what());
    } catch (const std::exception& e) {
      outcomes[r] = {true, ErrorCode::kInternal, str("non-tessera exception: ", e.what())};
      failure->mark_failed(r, e.what());
    } catch (...) {
      outcomes[r] = {true, ErrorCode::kInternal, "unknown exception"};
      failure->mark_failed(r, "unknown exception");
    }
    set_thread_rank(-1);
  };

  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int r = 0; r < world_size; ++r) {
    try {
      threads.emplace_back(run_rank, r);
    } catch (const std::exception& e) {
      // The ranks already started will wait for this one; mark it failed so they stop.
      outcomes[r] = {true, ErrorCode::kSystem, str("could not start its thread: ", e.what())};
      failure->mark_failed(r, outcomes[r].message);
    }
  }
  for (auto& t : threads) t.join();

  int chosen = -1;
  for (int r = 0; r < world_size && chosen < 0; ++r) {
    if (outcomes[r].failed && outcomes[r].code != ErrorCode::kPeerFailure) chosen = r;
  }
  for (int r = 0; r < world_size && chosen < 0; ++r) {
    if (outcomes[r].failed) chosen = r;
  }
  if (chosen < 0) return;

  std::string message = str("rank ", chosen, ": ", outcomes[chosen].message);
  for (int r = 0; r < world_size; ++r) {
    if (r == chosen || !outcomes[r].failed) continue;
    message +=
        str("\n  rank ", r, ": ", error_code_name(outcomes[r].code), ": ", outcomes[r].message);
  }
  throw_error(outcomes[chosen].code, message);
}

}  // namespace tessera::cpu
