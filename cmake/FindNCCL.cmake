# Finds NCCL (pinned: 2.28.9). Looks in NCCL_ROOT, then the nvidia.nccl Python package
# (the PyTorch virtualenv on the GPU machine, so Tessera and torch share one NCCL), then
# the CUDA toolkit. Defines NCCL::nccl and NCCL_VERSION.
include(TesseraPythonPackage)
tessera_python_package_dir(_nccl_py nvidia.nccl)
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${_nccl_py} ${CUDAToolkit_INCLUDE_DIRS}/.. ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${_nccl_py} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
if(NCCL_INCLUDE_DIR)
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" _pat "${_v}")
  set(NCCL_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_INCLUDE_DIR NCCL_LIBRARY VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl SHARED IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  if(NOT NCCL_VERSION VERSION_EQUAL 2.28.9)
    message(WARNING "Tessera is pinned to NCCL 2.28.9; found ${NCCL_VERSION} at ${NCCL_LIBRARY}")
  endif()
endif()
