# vwt as a subproject: the parent builds against vwt::vwt, and the parent's `cmake --install`
# installs the parent's program only (VWT_INSTALL is off below the top level), nothing of vwt's.
# Usage: cmake -DSOURCE_DIR=... -DWORK_DIR=... -DCXX=... -P subproject.cmake
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/step.cmake)
step("configuring the parent" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/packaging/subproject -B ${WORK_DIR}/build
  -DVWT_SOURCE=${SOURCE_DIR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
step("building it" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step("installing it" ${CMAKE_COMMAND} --install ${WORK_DIR}/build --prefix ${WORK_DIR}/prefix)
if(NOT EXISTS ${WORK_DIR}/prefix/bin/parent_app)
  message(FATAL_ERROR "the parent's program was not installed")
endif()
file(GLOB_RECURSE installed RELATIVE ${WORK_DIR}/prefix ${WORK_DIR}/prefix/*)
list(REMOVE_ITEM installed bin/parent_app)
if(installed)
  message(FATAL_ERROR "the parent's install also installed vwt's files: ${installed}")
endif()
step("running the parent's program" ${WORK_DIR}/prefix/bin/parent_app)
if(NOT step_output MATCHES "prefill logits finite")
  message(FATAL_ERROR "the parent's program printed: ${step_output}")
endif()
message("subproject: the parent builds with vwt::vwt and installs only bin/parent_app")
