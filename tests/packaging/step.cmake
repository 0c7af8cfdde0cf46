# step(WHAT COMMAND [ARGS...]): runs the command; a non-zero status stops the calling script with
# "WHAT failed" and the command's output. Afterwards step_output holds its standard output.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE r OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT r EQUAL 0)
    message(FATAL_ERROR "${what} failed:\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()
