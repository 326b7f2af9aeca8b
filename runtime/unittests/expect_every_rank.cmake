# Runs an MPI program that must fail on every rank, and checks how (issue 9):
# each of the RANKS ranks prints `moert: rank R: error: ...` containing every
# text in EXPECT (a ;-list), the job ends nonzero within LIMIT seconds (so
# no rank waited for the collective timeout or hung), and nothing crashed or
# raised an MPI error instead.
#
#   cmake -DMPIRUN=... -DRANKS=2 -DPROGRAM=... "-DARGS=a;b" "-DEXPECT=x;y"
#         -DLIMIT=8 [-DFAILING=1] -P expect_every_rank.cmake
#
# FAILING (a ;-list) names the ranks that must print the error when the
# others cannot know of it (a fault inside one rank's NCCL call: mpirun
# ends the job when that rank exits); by default every rank.
foreach(var MPIRUN RANKS PROGRAM EXPECT LIMIT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_every_rank.cmake: ${var} is not set")
  endif()
endforeach()
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIRUN} --allow-run-as-root --oversubscribe -np ${RANKS} ${PROGRAM} ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
  TIMEOUT 120)
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")
set(all "${out}\n${err}")
message(STATUS "exit: ${rc}, ${elapsed} s\n${all}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the job succeeded; every rank should have failed")
endif()
if(elapsed GREATER LIMIT)
  message(FATAL_ERROR "the job took ${elapsed} s, more than ${LIMIT} s: a rank waited "
                      "for the timeout or hung")
endif()
foreach(bad "MPI_ERR" "Segmentation fault" "signal 11" "terminate called" "bad_alloc"
            "FAIL:")
  string(FIND "${all}" "${bad}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "the output shows '${bad}' instead of the runtime's error")
  endif()
endforeach()
string(REGEX MATCHALL "moert: rank [0-9]+: error: [^\n]*" lines "${all}")
math(EXPR last "${RANKS} - 1")
if(NOT DEFINED FAILING)
  set(FAILING "")
  foreach(r RANGE ${last})
    list(APPEND FAILING ${r})
  endforeach()
endif()
foreach(r IN LISTS FAILING)
  set(found "")
  foreach(line IN LISTS lines)
    string(FIND "${line}" "moert: rank ${r}: error: " at)
    if(at EQUAL 0)
      set(found "${line}")
    endif()
  endforeach()
  if(found STREQUAL "")
    message(FATAL_ERROR "rank ${r} printed no error")
  endif()
  foreach(text IN LISTS EXPECT)
    string(FIND "${found}" "${text}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "rank ${r}'s error lacks '${text}': ${found}")
    endif()
  endforeach()
endforeach()
