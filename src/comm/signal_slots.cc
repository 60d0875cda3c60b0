#include "tessera/comm/signal_slots.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "tessera/core/error.h"

namespace tessera {

namespace {

// Live ranges [begin, end) per heap.
std::mutex g_mutex;
std::map<const SymmetricHeap*, std::map<int, int>> g_ranges;

}  // namespace

SignalSlots::SignalSlots(const SymmetricHeap& heap, int count, const char* user) {
  if (count <= 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::map<int, int>& ranges = g_ranges[&heap];
  int begin = 0;
  for (const auto& [b, e] : ranges) {
    if (b - begin >= count) break;
    begin = std::max(begin, e);
  }
  TESSERA_CHECK(begin + count <= heap.num_signal_slots(), ErrorCode::kUnsupported, user,
                " needs ", count, " signal slots of the symmetric heap, but only ",
                heap.num_signal_slots() - begin, " of ", heap.num_signal_slots(),
                " are free: destroy unused operations sharing the heap");
  ranges[begin] = begin + count;
  heap_ = &heap;
  base_ = begin;
  count_ = count;
}

void SignalSlots::release() {
  if (heap_ == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_ranges.find(heap_);
  if (it != g_ranges.end()) {
    it->second.erase(base_);
    if (it->second.empty()) g_ranges.erase(it);
  }
  heap_ = nullptr;
}

SignalSlots::~SignalSlots() { release(); }

SignalSlots::SignalSlots(SignalSlots&& other) noexcept
    : heap_(std::exchange(other.heap_, nullptr)), base_(other.base_), count_(other.count_) {}

SignalSlots& SignalSlots::operator=(SignalSlots&& other) noexcept {
  if (this != &other) {
    release();
    heap_ = std::exchange(other.heap_, nullptr);
    base_ = other.base_;
    count_ = other.count_;
  }
  return *this;
}

}  // namespace tessera
