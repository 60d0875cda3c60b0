// The tcp bootstrap: a star of `size` ranks around one hub.
//
// Wire format: length-prefixed frames, a 16-byte header (magic "TSBT", type, payload length;
// little-endian) then the payload.
//   hello  client -> hub   once after connecting: rank, world size, pid, host name
//   data   client -> hub   this rank's blob for the next allgather round
//          hub -> client   the round's result: every rank's blob, in rank order
//   bye    client -> hub   the client is closing on purpose (not a crash)
//   error  hub -> client   error code + message; the hub stops after sending it
//
// The hub (TcpHubServer::serve) is one thread polling the listening socket and every
// connection. It accepts `size` hellos (duplicate rank, wrong world size or a rank out of
// range is a protocol error), then serves rounds: it waits for every rank's blob (all the
// same length), replies to each with the concatenation, and starts the next round. Deadlines,
// all wait_timeout_ms() long: ranks must connect within it from the start of serve(), and a
// round must complete within it from its first blob. When one expires, or a rank disconnects
// while others wait for it, or the protocol breaks, the hub sends every client an error frame
// naming the ranks involved, drains and closes, and throws the same error.
//
// A client sends its blob and waits for the reply with its own deadline, a little longer than
// the hub's so that the hub's message (which names the missing ranks) normally arrives
// first. After any error the client refuses further calls (the hub has stopped). A client is
// used by one thread at a time (its rank's). Sends use MSG_NOSIGNAL: a closed peer gives
// EPIPE, never SIGPIPE.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/bootstrap_internal.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"

namespace tessera {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kFrameMagic = 0x54425354;  // "TSBT" read as little-endian bytes
constexpr size_t kHeaderBytes = 16;
// Bootstrap blobs are ids and host names; anything near this is a corrupt header.
constexpr uint64_t kMaxPayloadBytes = uint64_t(1) << 32;

enum class FrameType : uint32_t { kHello = 1, kData = 2, kBye = 3, kError = 4 };

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

std::vector<uint8_t> make_frame(FrameType type, const void* payload, size_t bytes) {
  std::vector<uint8_t> frame(kHeaderBytes + bytes);
  put_u32(frame.data(), kFrameMagic);
  put_u32(frame.data() + 4, uint32_t(type));
  put_u64(frame.data() + 8, bytes);
  if (bytes > 0) std::memcpy(frame.data() + kHeaderBytes, payload, bytes);
  return frame;
}

std::vector<uint8_t> make_error_frame(ErrorCode code, const std::string& message) {
  std::vector<uint8_t> payload(4 + message.size());
  put_u32(payload.data(), uint32_t(code));
  std::memcpy(payload.data() + 4, message.data(), message.size());
  return make_frame(FrameType::kError, payload.data(), payload.size());
}

std::string errno_text(int err) {
  return std::strerror(err);
}

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  // Round up so a wait of 0.4 ms is not a busy spin.
  return int(std::clamp<int64_t>(left.count() + 1, 0, 1 << 30));
}

Clock::time_point deadline_after_ms(int64_t ms) {
  return Clock::now() + std::chrono::milliseconds(std::max<int64_t>(ms, 0));
}

// Sends all `bytes` (non-blocking socket) before `deadline`. Returns "" or what went wrong.
std::string send_all(int fd, const uint8_t* data, size_t bytes, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < bytes) {
    ssize_t n = ::send(fd, data + sent, bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno_text(errno);
    pollfd p{fd, POLLOUT, 0};
    int wait_ms = remaining_ms(deadline);
    if (Clock::now() >= deadline) return "timed out (the peer stopped reading)";
    int rc = ::poll(&p, 1, wait_ms);
    if (rc < 0 && errno != EINTR) return str("poll: ", errno_text(errno));
  }
  return "";
}

enum class ReadStatus { kOk, kEof, kTimeout, kError };

// Reads exactly `bytes` before `deadline` (non-blocking socket).
ReadStatus read_exact(int fd, uint8_t* out, size_t bytes, Clock::time_point deadline,
                      std::string* error) {
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::recv(fd, out + got, bytes - got, MSG_DONTWAIT);
    if (n > 0) {
      got += size_t(n);
      continue;
    }
    if (n == 0) return ReadStatus::kEof;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return ReadStatus::kEof;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *error = errno_text(errno);
      return ReadStatus::kError;
    }
    if (Clock::now() >= deadline) return ReadStatus::kTimeout;
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) {
      *error = str("poll: ", errno_text(errno));
      return ReadStatus::kError;
    }
  }
  return ReadStatus::kOk;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string sockaddr_text(const sockaddr* addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return str(host, ":", port);
  }
  if (addr->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return str("[", host, "]:", port);
  }
  return "?";
}

// "rank 3", "ranks 0-2, 5".
std::string format_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += j == i ? str(ranks[i]) : str(ranks[i], "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// The client's deadline for a reply: the hub's bound plus time for its message to arrive.
int64_t client_wait_ms() {
  int64_t hub_ms = wait_timeout_ms();
  return hub_ms + std::max<int64_t>(hub_ms / 10, 200);
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Hub

struct TcpHubServer::State {
  int size = 0;
  std::string bind_text;  // for messages: "127.0.0.1:PORT"
  int port = 0;
  Fd listen_fd;
  Fd stop_fd;  // eventfd; readable once request_stop() was called
  std::atomic<bool> served{false};
};

TcpHubServer::TcpHubServer(int size, const std::string& bind_host, int port)
    : state_(std::make_unique<State>()) {
  TESSERA_CHECK_ARG(size >= 1, "TcpHubServer: size = ", size, ": expected >= 1 rank");
  TESSERA_CHECK_ARG(port >= 0 && port <= 65535, "TcpHubServer: port = ", port,
                    ": expected 0 (any free port) or a port in [1, 65535]");
  state_->size = size;
  const std::string host = bind_host.empty() ? "0.0.0.0" : bind_host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  TESSERA_CHECK_ARG(gai == 0 && found != nullptr, "TcpHubServer: bind_host = '", host,
                    "': expected a numeric IPv4 or IPv6 address (", ::gai_strerror(gai), ")");
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);

  Fd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  TESSERA_CHECK(fd.valid(), ErrorCode::kSystem, "bootstrap hub: socket(): ", errno_text(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (found->ai_family == AF_INET6) {
    int zero = 0;  // "::" also accepts IPv4 clients
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0) {
    int err = errno;
    throw_error(ErrorCode::kSystem,
                str("bootstrap hub: cannot listen on ", host, ":", port, ": ", errno_text(err),
                    err == EADDRINUSE ? " (another process holds the port; under torchrun the "
                                        "agent holds MASTER_PORT: set TESSERA_HUB_PORT_OFFSET=1)"
                                      : ""));
  }
  TESSERA_CHECK(::listen(fd.get(), std::max(size + 16, 128)) == 0, ErrorCode::kSystem,
                "bootstrap hub: listen(): ", errno_text(errno));
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  TESSERA_CHECK(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0,
                ErrorCode::kSystem, "bootstrap hub: getsockname(): ", errno_text(errno));
  state_->port = bound.ss_family == AF_INET6
                     ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  state_->bind_text = host.find(':') != std::string::npos ? str("[", host, "]:", state_->port)
                                                          : str(host, ":", state_->port);
  state_->listen_fd = std::move(fd);
  state_->stop_fd = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  TESSERA_CHECK(state_->stop_fd.valid(), ErrorCode::kSystem,
                "bootstrap hub: eventfd(): ", errno_text(errno));
}

TcpHubServer::~TcpHubServer() = default;

int TcpHubServer::port() const {
  return state_->port;
}

void TcpHubServer::request_stop() {
  uint64_t one = 1;
  ssize_t ignored = ::write(state_->stop_fd.get(), &one, sizeof(one));
  (void)ignored;
}

namespace {

enum class Departure { kPresent, kBye, kLost };

struct HubConnection {
  Fd fd;
  std::string peer;            // remote address, for messages
  std::vector<uint8_t> inbox;  // received bytes not yet parsed into frames
  int rank = -1;               // -1 until a valid hello
  bool open = true;
  std::string who;  // "rank 2 (pid 123 on host)"
};

// One serve() call: the hub's whole state machine.
class HubSession {
 public:
  HubSession(int size, const std::string& bind_text, int listen_fd, int stop_fd)
      : size_(size),
        bind_text_(bind_text),
        listen_fd_(listen_fd),
        stop_fd_(stop_fd),
        by_rank_(size, nullptr),
        departure_(size, Departure::kPresent),
        rounds_at_departure_(size),
        blobs_(size) {}

  void run() {
    timeout_ms_ = wait_timeout_ms();
    start_ = Clock::now();
    for (;;) {
      if (num_joined_ == size_ && num_departed_ == size_) return;  // everyone came and left
      std::optional<Clock::time_point> deadline;
      if (num_joined_ < size_) deadline = start_ + std::chrono::milliseconds(timeout_ms_);
      if (num_blobs_ > 0) {
        auto round_deadline = round_start_ + std::chrono::milliseconds(timeout_ms_);
        deadline = deadline ? std::min(*deadline, round_deadline) : round_deadline;
      }
      if (deadline && Clock::now() >= *deadline) fail_timeout();

      std::vector<pollfd> fds;
      fds.push_back({listen_fd_, POLLIN, 0});
      fds.push_back({stop_fd_, POLLIN, 0});
      std::vector<HubConnection*> polled;
      for (auto& c : connections_) {
        if (!c->open) continue;
        fds.push_back({c->fd.get(), POLLIN, 0});
        polled.push_back(c.get());
      }
      // Idle (between rounds) there is nothing to bound; wake up each second anyway.
      int wait_ms = deadline ? std::min(remaining_ms(*deadline), 1000) : 1000;
      int rc = ::poll(fds.data(), fds.size(), wait_ms);
      if (rc < 0) {
        if (errno == EINTR) continue;
        fail(ErrorCode::kSystem,
             str("the bootstrap hub at ", bind_text_, ": poll(): ", errno_text(errno)));
      }
      if (fds[1].revents != 0) return;  // request_stop()
      if (fds[0].revents & POLLIN) accept_pending();
      for (size_t i = 0; i < polled.size(); ++i) {
        if (fds[i + 2].revents != 0) receive(*polled[i]);
      }
      check_departures();
      if (num_joined_ == size_ && num_blobs_ == size_) complete_round();
    }
  }

 private:
  void accept_pending() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN: no more pending; other errors: retried on the next poll
      }
      set_nodelay(fd);
      auto c = std::make_unique<HubConnection>();
      c->fd = Fd(fd);
      c->peer = sockaddr_text(reinterpret_cast<sockaddr*>(&addr));
      c->who = str("the connection from ", c->peer);
      connections_.push_back(std::move(c));
    }
  }

  void receive(HubConnection& c) {
    uint8_t chunk[64 * 1024];
    bool eof = false;
    for (;;) {
      ssize_t n = ::recv(c.fd.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
      if (n > 0) {
        c.inbox.insert(c.inbox.end(), chunk, chunk + n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      eof = true;  // 0 (orderly close) or ECONNRESET and friends
      break;
    }
    parse_frames(c);
    if (eof && c.open) depart(c, Departure::kLost);
  }

  void parse_frames(HubConnection& c) {
    size_t offset = 0;
    while (c.open && c.inbox.size() - offset >= kHeaderBytes) {
      const uint8_t* header = c.inbox.data() + offset;
      uint32_t magic = get_u32(header);
      uint32_t type = get_u32(header + 4);
      uint64_t length = get_u64(header + 8);
      if (magic != kFrameMagic || length > kMaxPayloadBytes) {
        if (c.rank < 0) {  // not a Tessera client (a port scan, a stray process): ignore it
          TESSERA_LOG(kWarn, "bootstrap hub at ", bind_text_, ": closing ", c.who,
                      ": not a tessera bootstrap client");
          close_connection(c);
          return;
        }
        fail(ErrorCode::kInternal, str("the bootstrap hub got a corrupt frame header from ", c.who,
                                       " (magic ", magic, ", length ", length, ")"));
      }
      if (c.inbox.size() - offset - kHeaderBytes < length) break;
      const uint8_t* payload = header + kHeaderBytes;
      handle_frame(c, FrameType(type), payload, size_t(length));
      offset += kHeaderBytes + length;
    }
    if (offset > 0) c.inbox.erase(c.inbox.begin(), c.inbox.begin() + offset);
  }

  void handle_frame(HubConnection& c, FrameType type, const uint8_t* payload, size_t length) {
    if (c.rank < 0) {
      if (type != FrameType::kHello || length < 12) {
        TESSERA_LOG(kWarn, "bootstrap hub at ", bind_text_, ": closing ", c.who,
                    ": its first frame is not a hello");
        close_connection(c);
        return;
      }
      handle_hello(c, payload, length);
      return;
    }
    switch (type) {
      case FrameType::kData:
        handle_blob(c, payload, length);
        return;
      case FrameType::kBye:
        depart(c, Departure::kBye);
        return;
      default:
        fail(ErrorCode::kInternal, str("the bootstrap hub got an unexpected frame (type ",
                                       uint32_t(type), ") from ", c.who));
    }
  }

  void handle_hello(HubConnection& c, const uint8_t* payload, size_t length) {
    int rank = int(get_u32(payload));
    int size = int(get_u32(payload + 4));
    uint32_t pid = get_u32(payload + 8);
    std::string host(reinterpret_cast<const char*>(payload + 12), length - 12);
    std::string who = str("rank ", rank, " (pid ", pid, " on ", host, ")");
    if (size != size_) {
      fail(ErrorCode::kInvalidArgument,
           str(who, " connected to the bootstrap hub at ", bind_text_, " with world size ", size,
               " but the hub serves ", size_,
               " ranks: every rank must be launched with the "
               "same world size"));
    }
    if (rank < 0 || rank >= size_) {
      fail(ErrorCode::kInvalidArgument, str(who, " connected to the bootstrap hub at ", bind_text_,
                                            ": expected a rank in [0, ", size_, ")"));
    }
    if (by_rank_[rank] != nullptr) {
      fail(ErrorCode::kInvalidArgument,
           str("rank ", rank, " connected to the bootstrap hub at ", bind_text_, " twice: first ",
               by_rank_[rank]->who, ", then ", who, ": every process needs its own rank"));
    }
    c.rank = rank;
    c.who = who;
    by_rank_[rank] = &c;
    ++num_joined_;
    TESSERA_LOG(kDebug, "bootstrap hub at ", bind_text_, ": ", who, " joined (", num_joined_,
                " of ", size_, ")");
  }

  void handle_blob(HubConnection& c, const uint8_t* payload, size_t length) {
    const int rank = c.rank;
    if (blobs_[rank]) {
      fail(ErrorCode::kInternal, str(c.who, " sent a second blob in allgather round ", round_ + 1,
                                     " before the round completed"));
    }
    if (num_blobs_ > 0 && length != round_bytes_) {
      fail(ErrorCode::kInvalidArgument,
           str("allgather round ", round_ + 1, ": rank ", rank, " sent ", length,
               " bytes but rank ", round_first_rank_, " sent ", round_bytes_,
               ": every rank must pass the same `bytes`"));
    }
    if (num_blobs_ == 0) {
      round_start_ = Clock::now();
      round_bytes_ = length;
      round_first_rank_ = rank;
    }
    blobs_[rank].emplace(payload, payload + length);
    ++num_blobs_;
  }

  void depart(HubConnection& c, Departure how) {
    if (c.rank >= 0 && departure_[c.rank] == Departure::kPresent) {
      departure_[c.rank] = how;
      rounds_at_departure_[c.rank] = round_;
      ++num_departed_;
      if (how == Departure::kLost) {
        TESSERA_LOG(kInfo, "bootstrap hub at ", bind_text_, ": ", c.who,
                    " lost its connection without closing its bootstrap");
      }
    }
    close_connection(c);
  }

  void close_connection(HubConnection& c) {
    c.open = false;
    c.fd.reset();
  }

  // A rank that left without its blob in the current round can never complete it.
  void check_departures() {
    if (num_blobs_ == 0) return;
    for (int r = 0; r < size_; ++r) {
      if (departure_[r] == Departure::kPresent || blobs_[r]) continue;
      fail(ErrorCode::kPeerFailure,
           str(by_rank_[r]->who,
               departure_[r] == Departure::kBye
                   ? " closed its bootstrap"
                   : " lost its connection to the bootstrap hub (its process exited or crashed)",
               " after ", rounds_at_departure_[r], " allgather round(s); ",
               format_ranks(ranks_with_blob(true)),
               ranks_with_blob(true).size() == 1 ? " waits" : " wait",
               " for it in allgather round ", round_ + 1));
    }
  }

  std::vector<int> ranks_with_blob(bool with) const {
    std::vector<int> out;
    for (int r = 0; r < size_; ++r) {
      if (bool(blobs_[r]) == with) out.push_back(r);
    }
    return out;
  }

  void complete_round() {
    std::vector<uint8_t> reply(kHeaderBytes + round_bytes_ * size_t(size_));
    put_u32(reply.data(), kFrameMagic);
    put_u32(reply.data() + 4, uint32_t(FrameType::kData));
    put_u64(reply.data() + 8, round_bytes_ * size_t(size_));
    for (int r = 0; r < size_; ++r) {
      if (round_bytes_ > 0) {
        std::memcpy(reply.data() + kHeaderBytes + size_t(r) * round_bytes_, blobs_[r]->data(),
                    round_bytes_);
      }
      blobs_[r].reset();
    }
    num_blobs_ = 0;
    ++round_;
    auto deadline = deadline_after_ms(timeout_ms_);
    for (int r = 0; r < size_; ++r) {
      HubConnection* c = by_rank_[r];
      if (departure_[r] != Departure::kPresent || !c->open) continue;
      std::string error = send_all(c->fd.get(), reply.data(), reply.size(), deadline);
      if (error.empty()) continue;
      if (Clock::now() >= deadline) {
        fail(ErrorCode::kTimeout,
             str("the bootstrap hub at ", bind_text_, " could not deliver allgather round ", round_,
                 "'s result to ", c->who, " within ", timeout_ms_, " ms: it stopped reading"));
      }
      depart(*c, Departure::kLost);  // noticed by the next round, if there is one
    }
  }

  [[noreturn]] void fail_timeout() {
    if (num_joined_ < size_) {
      std::vector<int> joined, missing;
      for (int r = 0; r < size_; ++r) (by_rank_[r] ? joined : missing).push_back(r);
      fail(ErrorCode::kTimeout,
           str("the bootstrap hub at ", bind_text_, " waited ", timeout_ms_, " ms for ", size_,
               " ranks to connect; ", format_ranks(missing), " never connected (connected: ",
               joined.empty() ? std::string("none") : format_ranks(joined), ")"));
    }
    fail(ErrorCode::kTimeout,
         str("the bootstrap hub at ", bind_text_, " waited ", timeout_ms_,
             " ms for allgather round ", round_ + 1, " after ", format_ranks({round_first_rank_}),
             " arrived; ", format_ranks(ranks_with_blob(false)),
             " never arrived (arrived: ", format_ranks(ranks_with_blob(true)), ")"));
  }

  // Tells every connected client, drains their sockets so the error is not lost to a reset,
  // and throws. Connections not yet identified are told too (accepting any still queued):
  // they are most likely ranks whose hello is in flight, and a stranger ignores the frame.
  [[noreturn]] void fail(ErrorCode code, const std::string& message) {
    accept_pending();
    std::vector<uint8_t> frame = make_error_frame(code, message);
    auto send_deadline = deadline_after_ms(std::min<int64_t>(timeout_ms_, 1000));
    std::vector<HubConnection*> told;
    for (auto& c : connections_) {
      if (!c->open) continue;
      send_all(c->fd.get(), frame.data(), frame.size(), send_deadline);
      ::shutdown(c->fd.get(), SHUT_WR);
      told.push_back(c.get());
    }
    // Wait (briefly) for the clients to read the error and close.
    auto drain_deadline = deadline_after_ms(std::min<int64_t>(timeout_ms_, 1000));
    while (!told.empty() && Clock::now() < drain_deadline) {
      std::vector<pollfd> fds;
      for (auto* c : told) fds.push_back({c->fd.get(), POLLIN, 0});
      if (::poll(fds.data(), fds.size(), remaining_ms(drain_deadline)) <= 0) continue;
      std::vector<HubConnection*> still_open;
      for (size_t i = 0; i < told.size(); ++i) {
        bool closed = false;
        if (fds[i].revents != 0) {
          uint8_t sink[4096];
          ssize_t n = ::recv(told[i]->fd.get(), sink, sizeof(sink), MSG_DONTWAIT);
          closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
        }
        if (closed) {
          close_connection(*told[i]);
        } else {
          still_open.push_back(told[i]);
        }
      }
      told.swap(still_open);
    }
    for (auto& c : connections_) close_connection(*c);
    throw Error(code, message);
  }

  const int size_;
  const std::string bind_text_;
  const int listen_fd_;
  const int stop_fd_;
  int64_t timeout_ms_ = 0;
  Clock::time_point start_;
  std::vector<std::unique_ptr<HubConnection>> connections_;
  std::vector<HubConnection*> by_rank_;
  std::vector<Departure> departure_;
  std::vector<int64_t> rounds_at_departure_;
  int num_joined_ = 0;
  int num_departed_ = 0;
  // The round in progress.
  int64_t round_ = 0;  // rounds completed
  std::vector<std::optional<std::vector<uint8_t>>> blobs_;
  int num_blobs_ = 0;
  size_t round_bytes_ = 0;
  int round_first_rank_ = -1;
  Clock::time_point round_start_;
};

}  // namespace

void TcpHubServer::serve() {
  TESSERA_CHECK(!state_->served.exchange(true), ErrorCode::kInvalidArgument,
                "TcpHubServer::serve: called twice: expected one serve() per hub");
  HubSession session(state_->size, state_->bind_text, state_->listen_fd.get(),
                     state_->stop_fd.get());
  try {
    session.run();
  } catch (...) {
    state_->listen_fd.reset();  // late clients get "connection refused", not silence
    throw;
  }
  state_->listen_fd.reset();
}

// ------------------------------------------------------------------------------------------
// Client

namespace {

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(const LaunchInfo& info, bool host_hub)
      : info_(info), hub_(parse_host_port(info.hub_address, "hub_address")) {
    if (host_hub) start_hub();
    try {
      connect_to_hub();
    } catch (...) {
      stop_hub(/*wait_for_ranks=*/false);
      throw;
    }
  }

  ~TcpBootstrap() override {
    if (fd_.valid()) {
      if (!failed_) {
        auto bye = make_frame(FrameType::kBye, nullptr, 0);
        send_all(fd_.get(), bye.data(), bye.size(), deadline_after_ms(100));
      }
      ::shutdown(fd_.get(), SHUT_WR);
      uint8_t sink[4096];
      while (::recv(fd_.get(), sink, sizeof(sink), MSG_DONTWAIT) > 0) {
      }
      fd_.reset();
    }
    stop_hub(/*wait_for_ranks=*/true);
  }

  int rank() const override { return info_.rank; }
  int size() const override { return info_.size; }
  int local_rank() const override { return info_.local_rank; }
  int local_size() const override { return info_.local_size; }
  const char* kind() const override { return "tcp"; }

  void allgather(const void* send, void* recv, size_t bytes) override {
    TESSERA_CHECK_ARG((send != nullptr && recv != nullptr) || bytes == 0,
                      "Bootstrap::allgather: send = ", send, ", recv = ", recv,
                      " with bytes = ", bytes, ": expected buffers of `bytes` bytes");
    TESSERA_CHECK(!failed_, ErrorCode::kPeerFailure, "rank ", info_.rank,
                  ": the tcp bootstrap is unusable after an earlier error: ", *failed_);
    const int64_t round = ++round_;
    const int64_t wait_ms = client_wait_ms();
    const auto deadline = deadline_after_ms(wait_ms);
    auto frame = make_frame(FrameType::kData, send, bytes);
    std::string send_error = send_all(fd_.get(), frame.data(), frame.size(), deadline);
    if (!send_error.empty()) {
      // The hub may have closed after telling us why: prefer its message.
      receive_reply(round, nullptr, 0, deadline_after_ms(std::min<int64_t>(wait_ms, 200)),
                    /*expect_data=*/false);
      fail(ErrorCode::kPeerFailure, str("rank ", info_.rank, ": allgather round ", round,
                                        ": lost the connection to the "
                                        "bootstrap hub at ",
                                        info_.hub_address, " while sending (", send_error, ")"));
    }
    receive_reply(round, static_cast<uint8_t*>(recv), bytes * size_t(info_.size), deadline,
                  /*expect_data=*/true);
  }

 private:
  // Reads the hub's next frame: the round's data into `out`, or an error which is thrown.
  // With expect_data false, only an error frame is of interest and anything else returns.
  void receive_reply(int64_t round, uint8_t* out, size_t expected_bytes, Clock::time_point deadline,
                     bool expect_data) {
    uint8_t header[kHeaderBytes];
    std::string error;
    ReadStatus status = read_exact(fd_.get(), header, kHeaderBytes, deadline, &error);
    if (status != ReadStatus::kOk) {
      if (!expect_data) return;
      report_read_failure(round, status, error);
    }
    uint32_t magic = get_u32(header);
    auto type = FrameType(get_u32(header + 4));
    uint64_t length = get_u64(header + 8);
    if (magic != kFrameMagic || length > kMaxPayloadBytes) {
      if (!expect_data) return;
      fail(ErrorCode::kInternal,
           str("rank ", info_.rank, ": allgather round ", round,
               ": corrupt frame header from the bootstrap hub at ", info_.hub_address));
    }
    if (type == FrameType::kError) {
      std::vector<uint8_t> payload(length);
      status = read_exact(fd_.get(), payload.data(), length, deadline, &error);
      if (status != ReadStatus::kOk || length < 4) {
        report_read_failure(round, status == ReadStatus::kOk ? ReadStatus::kEof : status, error);
      }
      auto code = ErrorCode(get_u32(payload.data()));
      std::string message(reinterpret_cast<const char*>(payload.data()) + 4, length - 4);
      fail(code, str("rank ", info_.rank, ": ", message));  // the hub names the round
    }
    if (!expect_data) return;
    if (type != FrameType::kData || length != expected_bytes) {
      fail(ErrorCode::kInternal, str("rank ", info_.rank, ": allgather round ", round,
                                     ": the bootstrap hub sent a "
                                     "frame of type ",
                                     uint32_t(type), " and ", length, " bytes; expected data of ",
                                     expected_bytes, " bytes"));
    }
    status = read_exact(fd_.get(), out, length, deadline, &error);
    if (status != ReadStatus::kOk) report_read_failure(round, status, error);
  }

  [[noreturn]] void report_read_failure(int64_t round, ReadStatus status,
                                        const std::string& error) {
    if (status == ReadStatus::kTimeout) {
      fail(ErrorCode::kTimeout,
           str("rank ", info_.rank, ": allgather round ", round,
               ": no reply from the bootstrap "
               "hub at ",
               info_.hub_address, " within ", client_wait_ms(),
               " ms (the hub did not say which ranks it waits for; it may be stuck)"));
    }
    if (status == ReadStatus::kEof) {
      fail(ErrorCode::kPeerFailure,
           str("rank ", info_.rank, ": allgather round ", round, ": the bootstrap hub at ",
               info_.hub_address,
               " closed the connection (the process hosting it exited: the "
               "launcher, or rank 0 under torchrun/mpi)"));
    }
    fail(ErrorCode::kSystem,
         str("rank ", info_.rank, ": allgather round ", round,
             ": reading from the bootstrap hub at ", info_.hub_address, ": ", error));
  }

  [[noreturn]] void fail(ErrorCode code, const std::string& message) {
    failed_ = message;
    throw Error(code, message);
  }

  void connect_to_hub() {
    const int64_t timeout_ms = wait_timeout_ms();
    const auto deadline = deadline_after_ms(timeout_ms);
    std::string last_error = "no attempt";
    auto backoff = std::chrono::milliseconds(5);
    for (;;) {
      if (try_connect(deadline, &last_error)) break;
      if (Clock::now() + backoff >= deadline) {
        throw_error(ErrorCode::kTimeout,
                    str("rank ", info_.rank, " could not connect to the bootstrap hub at ",
                        info_.hub_address, " within ", timeout_ms, " ms (last error: ", last_error,
                        "): is the launcher (or rank 0, which hosts the hub under "
                        "torchrun/mpi) running?"));
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
    set_nodelay(fd_.get());
    std::string host = host_name();
    std::vector<uint8_t> hello(12 + host.size());
    put_u32(hello.data(), uint32_t(info_.rank));
    put_u32(hello.data() + 4, uint32_t(info_.size));
    put_u32(hello.data() + 8, uint32_t(::getpid()));
    std::memcpy(hello.data() + 12, host.data(), host.size());
    auto frame = make_frame(FrameType::kHello, hello.data(), hello.size());
    std::string error = send_all(fd_.get(), frame.data(), frame.size(), deadline);
    TESSERA_CHECK(error.empty(), ErrorCode::kPeerFailure, "rank ", info_.rank,
                  ": sending hello to the bootstrap hub at ", info_.hub_address, ": ", error);
  }

  bool try_connect(Clock::time_point deadline, std::string* last_error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    int gai = ::getaddrinfo(hub_.host.c_str(), std::to_string(hub_.port).c_str(), &hints, &found);
    if (gai != 0) {
      *last_error = str("resolving '", hub_.host, "': ", ::gai_strerror(gai));
      return false;
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd.valid()) {
        *last_error = str("socket(): ", errno_text(errno));
        continue;
      }
      int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        rc = ::poll(&p, 1, remaining_ms(deadline));
        if (rc <= 0) {
          *last_error = rc == 0 ? std::string("connect timed out") : errno_text(errno);
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc != 0) {
        *last_error = errno_text(errno);
        continue;
      }
      fd_ = std::move(fd);
      return true;
    }
    return false;
  }

  // Rank 0 under torchrun (or mpi without MPI): the hub runs in a thread of this process.
  void start_hub() {
    // Wildcard of the hub address's family: MASTER_ADDR names this host as others see it,
    // which need not be an address of a local interface (NAT, /etc/hosts aliases).
    std::string bind_host = "0.0.0.0";
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(hub_.host.c_str(), nullptr, &hints, &found) == 0 && found != nullptr) {
      bool any_v4 = false;
      for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next)
        any_v4 |= ai->ai_family == AF_INET;
      if (!any_v4) bind_host = "::";
      ::freeaddrinfo(found);
    }
    hub_server_ = std::make_unique<TcpHubServer>(info_.size, bind_host, hub_.port);
    hub_thread_ = std::thread([this] {
      try {
        hub_server_->serve();
      } catch (const std::exception& e) {
        // Every client got the same message; this copy is for the log.
        TESSERA_LOG(kDebug, "bootstrap hub hosted by rank 0 stopped: ", e.what());
      }
      std::lock_guard<std::mutex> lock(hub_mutex_);
      hub_done_ = true;
      hub_cv_.notify_all();
    });
  }

  // The hub ends by itself once every rank left; give the others that long, then stop it.
  void stop_hub(bool wait_for_ranks) {
    if (!hub_thread_.joinable()) return;
    if (wait_for_ranks) {
      std::unique_lock<std::mutex> lock(hub_mutex_);
      hub_cv_.wait_for(lock, std::chrono::milliseconds(wait_timeout_ms()),
                       [this] { return hub_done_; });
    }
    hub_server_->request_stop();
    hub_thread_.join();
  }

  LaunchInfo info_;
  HostPort hub_;
  Fd fd_;
  int64_t round_ = 0;
  std::optional<std::string> failed_;
  std::unique_ptr<TcpHubServer> hub_server_;
  std::thread hub_thread_;
  std::mutex hub_mutex_;
  std::condition_variable hub_cv_;
  bool hub_done_ = false;
};

}  // namespace

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const LaunchInfo& info, bool host_hub) {
  return std::make_unique<TcpBootstrap>(info, host_hub);
}

}  // namespace detail

// ------------------------------------------------------------------------------------------
// Public hub

struct TcpBootstrapHub::Impl {
  explicit Impl(int size) : server(size, "127.0.0.1", 0) {}
  detail::TcpHubServer server;
};

TcpBootstrapHub::TcpBootstrapHub(int size) {
  TESSERA_CHECK_ARG(size >= 1, "TcpBootstrapHub: size = ", size, ": expected >= 1 rank");
  impl_ = std::make_unique<Impl>(size);
}

TcpBootstrapHub::~TcpBootstrapHub() = default;

std::string TcpBootstrapHub::address() const {
  return str("127.0.0.1:", impl_->server.port());
}

void TcpBootstrapHub::serve() {
  impl_->server.serve();
}

}  // namespace tessera
