# libtessera from an existing build folder (TESSERA_LIBRARY_FROM) instead of compiling src/ a
# second time: ./run test builds build-cpu first, then the Python package links its library.
# The folder must be a build of the same backends (checked from its CMakeCache.txt).
set(prebuilt_lib "${TESSERA_LIBRARY_FROM}/src/libtessera.so")
if(NOT EXISTS "${prebuilt_lib}")
  message(FATAL_ERROR "TESSERA_LIBRARY_FROM=${TESSERA_LIBRARY_FROM}: no src/libtessera.so there "
                      "(expected a built Tessera build folder)")
endif()
load_cache("${TESSERA_LIBRARY_FROM}" READ_WITH_PREFIX prebuilt_ TESSERA_CUDA)
if(NOT prebuilt_TESSERA_CUDA STREQUAL TESSERA_CUDA)
  message(FATAL_ERROR "TESSERA_LIBRARY_FROM=${TESSERA_LIBRARY_FROM} was built with "
                      "TESSERA_CUDA=${prebuilt_TESSERA_CUDA}: expected TESSERA_CUDA=${TESSERA_CUDA}")
endif()
add_library(tessera SHARED IMPORTED GLOBAL)
set_target_properties(tessera PROPERTIES
  IMPORTED_LOCATION "${prebuilt_lib}"
  INTERFACE_INCLUDE_DIRECTORIES "${PROJECT_SOURCE_DIR}/include"
  INTERFACE_LINK_LIBRARIES Threads::Threads)
message(STATUS "Tessera: the Python module links ${prebuilt_lib}")
