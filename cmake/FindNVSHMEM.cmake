# Finds NVSHMEM (pinned: 3.4.5) from NVSHMEM_HOME or the nvidia.nvshmem Python package
# (PyPI nvidia-nvshmem-cu13: ./run installs it into .deps/py here; the PyTorch virtualenv
# has it on the GPU machine). Defines NVSHMEM::host (the host library; Tessera uses the
# host-side on-stream API and its own kernels, so no relocatable device link is needed)
# and NVSHMEM_LIB_DIR (where the bootstrap plugins live).
include(TesseraPythonPackage)
tessera_python_package_dir(_nvshmem_py nvidia.nvshmem)
find_path(NVSHMEM_INCLUDE_DIR nvshmem.h HINTS ${NVSHMEM_HOME} $ENV{NVSHMEM_HOME} ${_nvshmem_py}
  PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(NVSHMEM_HOST_LIBRARY NAMES nvshmem_host libnvshmem_host.so.3
  HINTS ${NVSHMEM_HOME} $ENV{NVSHMEM_HOME} ${_nvshmem_py} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
if(NVSHMEM_INCLUDE_DIR)
  file(STRINGS "${NVSHMEM_INCLUDE_DIR}/non_abi/nvshmem_version.h" _v
       REGEX "^#define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION ")
  string(REGEX REPLACE ".*MAJOR_VERSION ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*MINOR_VERSION ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*PATCH_VERSION ([0-9]+).*" "\\1" _pat "${_v}")
  set(NVSHMEM_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NVSHMEM REQUIRED_VARS NVSHMEM_INCLUDE_DIR NVSHMEM_HOST_LIBRARY
  VERSION_VAR NVSHMEM_VERSION)
if(NVSHMEM_FOUND AND NOT TARGET NVSHMEM::host)
  get_filename_component(NVSHMEM_LIB_DIR "${NVSHMEM_HOST_LIBRARY}" DIRECTORY)
  add_library(NVSHMEM::host SHARED IMPORTED)
  set_target_properties(NVSHMEM::host PROPERTIES IMPORTED_LOCATION "${NVSHMEM_HOST_LIBRARY}"
    IMPORTED_NO_SONAME OFF INTERFACE_INCLUDE_DIRECTORIES "${NVSHMEM_INCLUDE_DIR}")
  if(NOT NVSHMEM_VERSION VERSION_EQUAL 3.4.5)
    message(WARNING "Tessera is pinned to NVSHMEM 3.4.5; found ${NVSHMEM_VERSION}")
  endif()
endif()
