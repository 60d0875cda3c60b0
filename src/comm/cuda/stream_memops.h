// Stream memory operations (cuStreamWriteValue64, cuStreamWaitValue64): the copy engines' way
// to raise and await signals around their copies with no multiprocessor involved, so a signal
// never waits for a kernel slot on a GPU whose multiprocessors a persistent kernel holds (the
// fused tensor-parallel GEMMs spin on such signals). A write carries a memory barrier: copies
// enqueued before it on the stream are visible to whoever sees the new value. `address` may be
// local or a peer mapping (IPC, NVSHMEM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda_comm {

// Throws kCuda naming `what` when the driver refuses.
void stream_write_value64(cudaStream_t stream, uint64_t* address, uint64_t value, const char* what);

// Work enqueued after it on `stream` starts once *address >= value. The driver gives such a wait
// no timeout: a caller documents what bounds it (e.g. a kernel of the same call that waits,
// bounded, for the same peer). Throws kCuda naming `what` when the driver refuses.
void stream_wait_value64_geq(cudaStream_t stream, const uint64_t* address, uint64_t value,
                             const char* what);

}  // namespace tessera::cuda_comm
