# Usage: cmake -DCXX=... -DSOURCE=... -DINCLUDE=... -P compile_fail.cmake
# Passes when SOURCE compiles with -DVWT_EXPECT_OK and fails to compile without it.
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -DVWT_EXPECT_OK -I${INCLUDE} ${SOURCE}
  RESULT_VARIABLE ok_result ERROR_VARIABLE ok_err)
if(NOT ok_result EQUAL 0)
  message(FATAL_ERROR "the valid variant of ${SOURCE} does not compile:\n${ok_err}")
endif()
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${SOURCE}
  RESULT_VARIABLE bad_result ERROR_VARIABLE bad_err)
if(bad_result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but an invalid schedule must not")
endif()
if(NOT bad_err MATCHES "fail")
  message(FATAL_ERROR "${SOURCE} failed to compile, but not in vwt::detail::fail:\n${bad_err}")
endif()
message(STATUS "rejected at compile time as expected")
