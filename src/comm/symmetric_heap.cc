// Backend-independent parts of the SymmetricHeap: comparison names and the argument checks
// every backend runs before a one-sided transfer or a signal.
#include "tessera/comm/symmetric_heap.h"

#include "tessera/core/error.h"

namespace tessera {

const char* wait_cmp_name(WaitCmp cmp) {
  switch (cmp) {
    case WaitCmp::kEq:
      return "==";
    case WaitCmp::kNe:
      return "!=";
    case WaitCmp::kGe:
      return ">=";
    case WaitCmp::kGt:
      return ">";
  }
  return "?";
}

void SymmetricHeap::check_put_args(const SymmetricBuffer& buf, size_t offset, size_t bytes,
                                   int peer, const char* op) const {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size(), op, ": peer = ", peer, ": expected 0..",
                    size() - 1);
  // offset + bytes may overflow; compare without adding.
  TESSERA_CHECK_ARG(offset <= buf.bytes && bytes <= buf.bytes - offset, op, " to/from peer ", peer,
                    ": offset ", offset, " + bytes ", bytes, " exceeds the symmetric buffer of ",
                    buf.bytes, " bytes (heap offset ", buf.offset, ")");
  TESSERA_CHECK_ARG(bytes == 0 || buf.local != nullptr, op, " to/from peer ", peer,
                    ": the symmetric buffer is empty (not allocated from this heap)");
}

void SymmetricHeap::check_signal_slot(int slot, const char* op) const {
  TESSERA_CHECK_ARG(slot >= 0 && slot < num_signal_slots_, op, ": signal_slot = ", slot,
                    ": expected 0..", num_signal_slots_ - 1);
}

}  // namespace tessera
