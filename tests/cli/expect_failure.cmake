# Runs a command that must be refused: it must exit with status 1 (the CLI's exit status for
# an error) and print a line matching EXPECT (a regular expression) on stdout or stderr.
#   cmake -DEXPECT=<regex> -P expect_failure.cmake -- <command> [args...]
# The command runs without a shell; prefix `cmake -E env NAME=value` to set variables.
set(command)
set(seen_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(seen_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(seen_separator TRUE)
  endif()
endforeach()
if(NOT command OR NOT DEFINED EXPECT)
  message(FATAL_ERROR "usage: cmake -DEXPECT=<regex> -P expect_failure.cmake -- <command...>")
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE out TIMEOUT 120)
if(NOT status STREQUAL "1")
  message(FATAL_ERROR "exit status ${status} (expected 1) from: ${command}\n${out}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}': ${command}\n${out}")
endif()
message(STATUS "refused as expected: ${out}")
