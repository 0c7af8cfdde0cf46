# Installs the vwt build tree into a fresh prefix, then configures, builds and runs the consumer,
# with CMake and with the installed pkg-config file.
include(${CMAKE_CURRENT_LIST_DIR}/packaging/step.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
step("installing vwt" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
step("configuring the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build
  -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_CXX_COMPILER=${CXX} -DVWT_CONSUMER_CUDA=${WITH_CUDA} -DVWT_CONSUMER_ONEDNN=${WITH_ONEDNN})
step("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
# Runs one built consumer program, printing its output; `what` names it in the failure.
function(run_consumer program what)
  step("${what}" ${WORK_DIR}/build/${program})
  message("${step_output}")
endfunction()
run_consumer(consumer "the consumer")
if(WITH_ONEDNN)
  run_consumer(consumer_onednn "the oneDNN consumer")
endif()
if(WITH_CUDA)
  run_consumer(consumer_cuda "the cuda consumer")
endif()
if(WITH_TOOLS AND NOT EXISTS ${WORK_DIR}/prefix/bin/vwt)
  message(FATAL_ERROR "the vwt tool was not installed")
endif()

# The same program built without CMake, with the flags of the installed pkg-config file (which
# carries C++20, the include directory, EIGEN_DONT_PARALLELIZE and OpenMP where vwt used it).
find_program(PKG_CONFIG pkg-config REQUIRED)  # scripts/setup.sh installs it
step("pkg-config finding the installed vwt.pc" ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${WORK_DIR}/prefix/share/pkgconfig
  ${PKG_CONFIG} --cflags --libs "vwt >= 0.2")
string(STRIP "${step_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
step("building the consumer with pkg-config's flags" ${CXX} ${SOURCE_DIR}/main.cpp -O1 ${flags} -o ${WORK_DIR}/consumer_pkgconfig)
step("the pkg-config consumer" ${WORK_DIR}/consumer_pkgconfig)
if(NOT step_output MATCHES "prefill logits finite")
  message(FATAL_ERROR "the pkg-config consumer printed: ${step_output}")
endif()
message("consumer (pkg-config): ${step_output}")
