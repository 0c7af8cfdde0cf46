# vwt built and installed with -DVWT_WITH_OPENMP=OFF (a toolchain without OpenMP, e.g. AppleClang):
# the installed package must not ask for OpenMP, and a consumer configured where OpenMP cannot be
# found at all builds, runs serially and does not link an OpenMP runtime.
# Usage: cmake -DSOURCE_DIR=... -DWORK_DIR=... -DCXX=... -P no_openmp.cmake
file(REMOVE_RECURSE ${WORK_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/step.cmake)
step("configuring vwt without OpenMP" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/vwt -DCMAKE_CXX_COMPILER=${CXX}
  -DVWT_WITH_OPENMP=OFF -DVWT_INSTALL=ON -DVWT_BUILD_TESTS=OFF -DVWT_BUILD_BENCH=OFF -DVWT_BUILD_EXAMPLES=OFF
  -DVWT_BUILD_TOOLS=OFF -DVWT_WITH_ONEDNN=OFF -DVWT_WITH_MPI=OFF)
step("installing it" ${CMAKE_COMMAND} --install ${WORK_DIR}/vwt --prefix ${WORK_DIR}/prefix)
step("configuring a consumer where OpenMP cannot be found" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer
  -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=TRUE -DCMAKE_BUILD_TYPE=Release)
step("building it" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
step("running it" ${WORK_DIR}/consumer/consumer)
if(NOT step_output MATCHES "prefill logits finite")
  message(FATAL_ERROR "the consumer printed: ${step_output}")
endif()
find_program(LDD ldd)
if(LDD)
  step("ldd" ${LDD} ${WORK_DIR}/consumer/consumer)
  if(step_output MATCHES "libgomp|libomp")
    message(FATAL_ERROR "the consumer of a vwt without OpenMP links an OpenMP runtime:\n${step_output}")
  endif()
endif()
message("no OpenMP: the package asks for none, the consumer builds, runs serially, links no OpenMP runtime")
