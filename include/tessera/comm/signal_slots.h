// SignalSlots: a range of a SymmetricHeap's signal slots that one user (a sequence-parallel
// executor, a tensor-parallel operation) holds for its life, so users sharing a heap never
// raise each other's signals. Every rank creates its users in the same order, so first fit
// hands every rank the same range (users check that with agreement.h).
#pragma once

#include "tessera/comm/symmetric_heap.h"

namespace tessera {

class SignalSlots {
 public:
  SignalSlots() = default;
  // Takes the first `count` free consecutive slots of `heap`; throws kUnsupported naming
  // `user` when no such range is left.
  SignalSlots(const SymmetricHeap& heap, int count, const char* user);
  ~SignalSlots();
  SignalSlots(SignalSlots&& other) noexcept;
  SignalSlots& operator=(SignalSlots&& other) noexcept;
  SignalSlots(const SignalSlots&) = delete;
  SignalSlots& operator=(const SignalSlots&) = delete;

  int base() const { return base_; }
  int count() const { return count_; }

 private:
  void release();
  const SymmetricHeap* heap_ = nullptr;
  int base_ = -1;
  int count_ = 0;
};

}  // namespace tessera
