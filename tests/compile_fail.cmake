# Usage: cmake -DCXX=... -DSOURCE=... -DINCLUDE=... -P compile_fail.cmake
# Passes when SOURCE compiles with -DVWT_EXPECT_OK and fails to compile without it, with an error
# matching the regex on its "// expect-error:" line (default: vwt::detail::fail, for constexpr
# schedule checks).
file(STRINGS ${SOURCE} expect_line REGEX "^// expect-error: ")
set(expected "fail")
if(expect_line)
  string(REGEX REPLACE "^// expect-error: " "" expected "${expect_line}")
endif()
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -DVWT_EXPECT_OK -I${INCLUDE} ${SOURCE}
  RESULT_VARIABLE ok_result ERROR_VARIABLE ok_err)
if(NOT ok_result EQUAL 0)
  message(FATAL_ERROR "the valid variant of ${SOURCE} does not compile:\n${ok_err}")
endif()
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${SOURCE}
  RESULT_VARIABLE bad_result ERROR_VARIABLE bad_err)
if(bad_result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
if(NOT bad_err MATCHES "${expected}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but not with an error matching '${expected}':\n${bad_err}")
endif()
message(STATUS "rejected at compile time as expected")
