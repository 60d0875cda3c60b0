# Compile flags for a TESSERA_FUZZ build, applied to everything configured after this file
# (the library and the fuzz targets): libFuzzer's coverage hooks, AddressSanitizer, and
# UndefinedBehaviorSanitizer made fatal, so any UB aborts the run as a finding.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++ (got ${CMAKE_CXX_COMPILER_ID})")
endif()
if(TESSERA_CUDA)
  message(FATAL_ERROR "TESSERA_FUZZ builds the cpu library only: configure with -DTESSERA_CUDA=OFF")
endif()
set(TESSERA_SANITIZERS address,undefined)
add_compile_options(-fsanitize=fuzzer-no-link,${TESSERA_SANITIZERS} -fno-sanitize-recover=all
                    -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=${TESSERA_SANITIZERS})
