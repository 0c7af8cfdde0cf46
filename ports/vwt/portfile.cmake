# vcpkg overlay port of vwt, built from the checkout it lives in:
#   vcpkg install vwt --overlay-ports=<vwt>/ports          (features: [cuda], [mpi], [tools])
# A registry port would fetch the release tag instead (vcpkg_from_github with REF "v${VERSION}").
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

if(NOT "cuda" IN_LIST FEATURES AND NOT "tools" IN_LIST FEATURES)
  set(VCPKG_BUILD_TYPE release)  # headers only: nothing differs between debug and release
endif()

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda  VWT_WITH_CUDA
    mpi   VWT_WITH_MPI
    tools VWT_BUILD_TOOLS
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DVWT_INSTALL=ON
    -DVWT_BUILD_TESTS=OFF
    -DVWT_BUILD_BENCH=OFF
    -DVWT_BUILD_EXAMPLES=OFF
    -DVWT_WITH_ONEDNN=OFF
    -DVWT_NATIVE_ARCH=OFF
    ${FEATURE_OPTIONS}
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/vwt)
vcpkg_fixup_pkgconfig()
if("tools" IN_LIST FEATURES)
  vcpkg_copy_tools(TOOL_NAMES vwt AUTO_CLEAN)
endif()

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug/include" "${CURRENT_PACKAGES_DIR}/debug/share")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
