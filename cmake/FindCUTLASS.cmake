# Finds the CUTLASS/CuTe headers: CUTLASS_INCLUDE_DIR, then .deps/cutlass/include (the copy
# ./run makes, which travels to the GPU machine), then the nvidia-cutlass Python package.
# Defines CUTLASS::headers.
include(TesseraPythonPackage)
tessera_python_package_dir(_cutlass_py cutlass_library)
find_path(CUTLASS_INCLUDE_DIR cute/tensor.hpp
  HINTS ${CUTLASS_INCLUDE_DIR} $ENV{CUTLASS_INCLUDE_DIR} ${PROJECT_SOURCE_DIR}/.deps/cutlass/include
        ${_cutlass_py}/source/include NO_DEFAULT_PATH)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUTLASS REQUIRED_VARS CUTLASS_INCLUDE_DIR)
if(CUTLASS_FOUND AND NOT TARGET CUTLASS::headers)
  add_library(CUTLASS::headers INTERFACE IMPORTED)
  set_target_properties(CUTLASS::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CUTLASS_INCLUDE_DIR}")
endif()
