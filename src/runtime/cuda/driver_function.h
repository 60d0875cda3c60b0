// CUDA driver functions found at run time: the library links the CUDA runtime, not libcuda, so
// a driver call (stream memory operations, tensor-map encoding) goes through the driver's entry
// point. Callers look a function up once and keep it.
#pragma once

namespace tessera {

// The driver function `name` at the CUDA 12.0 ABI; a driver without it is an error that names it.
void* driver_entry_point(const char* name);

// driver_entry_point as the function's pointer type F.
template <typename F>
F driver_function(const char* name) {
  return reinterpret_cast<F>(driver_entry_point(name));
}

}  // namespace tessera
