# Runs a command that must be refused: it must exit with status 1 (the CLI's exit status for
# an error) and print a line matching EXPECT (a regular expression) on stdout or stderr;
# with MAX_SECONDS, within that many seconds (a fault must not leave ranks waiting).
#   cmake -DEXPECT=<regex> [-DMAX_SECONDS=<n>] -P expect_failure.cmake -- <command> [args...]
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
string(TIMESTAMP started "%s")
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE out TIMEOUT 120)
string(TIMESTAMP ended "%s")
math(EXPR seconds "${ended} - ${started}")
if(NOT status STREQUAL "1")
  message(FATAL_ERROR "exit status ${status} (expected 1) from: ${command}\n${out}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}': ${command}\n${out}")
endif()
if(DEFINED MAX_SECONDS AND seconds GREATER MAX_SECONDS)
  message(FATAL_ERROR "took ${seconds} s (expected at most ${MAX_SECONDS}): ${command}\n${out}")
endif()
message(STATUS "refused as expected in ${seconds} s: ${out}")
