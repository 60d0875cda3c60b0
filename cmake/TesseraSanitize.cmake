# TESSERA_SANITIZE=<list>: every host translation unit and link gets -fsanitize=<list>, with
# frame pointers kept for readable stacks. Undefined behaviour is not recoverable, so UBSan
# aborts the process (and fails the test) on its first finding instead of printing and going
# on. Device code is not instrumented (compute-sanitizer covers it on the GPU machine).
if(NOT TESSERA_SANITIZE)
  return()
endif()
if(NOT TESSERA_SANITIZE MATCHES "^[a-z,]+$")
  message(FATAL_ERROR "TESSERA_SANITIZE = '${TESSERA_SANITIZE}': expected a comma list of "
                      "sanitizer names, e.g. address,undefined")
endif()
set(sanitize_flags -fsanitize=${TESSERA_SANITIZE} -fno-omit-frame-pointer)
if(TESSERA_SANITIZE MATCHES "undefined")
  list(APPEND sanitize_flags -fno-sanitize-recover=undefined)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${sanitize_flags}>")
add_link_options(${sanitize_flags})
message(STATUS "Sanitizers: ${TESSERA_SANITIZE}")
