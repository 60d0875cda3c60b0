# tessera_python_package_dir(<out-var> <module>): the folder of a Python package such as
# nvidia.nccl, looked for first in the project's .deps/py (what ./run installs on a
# development machine), then through the python3 on PATH (the PyTorch virtualenv on the
# GPU machine). Sets <out-var> to "" when not found.
function(tessera_python_package_dir out_var module)
  string(REPLACE "." "/" rel "${module}")
  set(local_dir "${PROJECT_SOURCE_DIR}/.deps/py/${rel}")
  if(EXISTS "${local_dir}")
    set(${out_var} "${local_dir}" PARENT_SCOPE)
    return()
  endif()
  find_program(TESSERA_PYTHON3 NAMES python3 python)
  if(TESSERA_PYTHON3)
    execute_process(
      COMMAND "${TESSERA_PYTHON3}" -c "import ${module} as m; print(list(m.__path__)[0])"
      OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND EXISTS "${dir}")
      set(${out_var} "${dir}" PARENT_SCOPE)
      return()
    endif()
  endif()
  set(${out_var} "" PARENT_SCOPE)
endfunction()
