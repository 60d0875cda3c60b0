# tessera_keep_static_runtime_private(target): hides, in a shared object, every symbol it takes
# from a static archive. Toolchains that link libstdc++ statically (the GPU image's /opt/gcc
# does) would otherwise export its symbols, some STB_GNU_UNIQUE (the locale facets' ids): in a
# Python process that loaded the system's libstdc++ first (numpy, torch), the dynamic linker
# unifies those with the system's copy while the static copy keeps its own locale tables, and
# the first std::ostringstream << int crashed in codecvt. Hidden, the copy stays private and
# self-consistent. No effect where libstdc++ is linked as a shared library (no archive).
function(tessera_keep_static_runtime_private target)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${target} PRIVATE "LINKER:--exclude-libs,ALL")
  endif()
endfunction()
