// Backend-independent parts of the SymmetricHeap: comparison names and the argument checks
// every backend runs before a one-sided transfer or a signal.
#include "tessera/comm/symmetric_heap.h"

#include <algorithm>

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

void SymmetricHeap::check_put_2d_args(const SymmetricBuffer& buf, size_t offset, size_t pitch,
                                      const char* pitch_name, const void* local, size_t local_pitch,
                                      const char* local_name, size_t row_bytes, size_t rows,
                                      int peer, const char* op) const {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size(), op, ": peer = ", peer, ": expected 0..",
                    size() - 1);
  if (rows == 0 || row_bytes == 0) return;  // nothing moves; as put/get of 0 bytes
  if (rows > 1) {
    TESSERA_CHECK_ARG(pitch >= row_bytes, op, " to/from peer ", peer, ": ", pitch_name, " = ",
                      pitch, " is less than row_bytes = ", row_bytes,
                      ": expected rows that do not overlap (pitch >= row_bytes)");
    TESSERA_CHECK_ARG(local_pitch >= row_bytes, op, " to/from peer ", peer, ": ", local_name,
                      "_pitch = ", local_pitch, " is less than row_bytes = ", row_bytes,
                      ": expected rows that do not overlap (pitch >= row_bytes)");
  }
  TESSERA_CHECK_ARG(local != nullptr, op, " of ", rows, " rows of ", row_bytes,
                    " bytes: ", local_name, " is null");
  // span = (rows - 1) * pitch + row_bytes, checked for overflow before it is formed.
  const size_t max = ~size_t(0);
  TESSERA_CHECK_ARG(rows - 1 <= (max - row_bytes) / std::max<size_t>(pitch, 1), op,
                    " to/from peer ", peer, ": ", rows, " rows at ", pitch_name, " = ", pitch,
                    " overflow the address space");
  const size_t span = (rows - 1) * pitch + row_bytes;
  TESSERA_CHECK_ARG(offset <= buf.bytes && span <= buf.bytes - offset, op, " to/from peer ", peer,
                    ": offset ", offset, " + span ", span, " (= (rows ", rows, " - 1) * ",
                    pitch_name, " ", pitch, " + row_bytes ", row_bytes,
                    ") exceeds the symmetric buffer of ", buf.bytes, " bytes (heap offset ",
                    buf.offset, ")");
  check_put_args(buf, offset, span, peer, op);
}

void SymmetricHeap::check_signal_slot(int slot, const char* op) const {
  TESSERA_CHECK_ARG(slot >= 0 && slot < num_signal_slots_, op, ": signal_slot = ", slot,
                    ": expected 0..", num_signal_slots_ - 1);
}

}  // namespace tessera
