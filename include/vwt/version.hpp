// The library version, kept in step with project(VERSION) in CMakeLists.txt.
// Checked by the test suite against the CMake package version.
#pragma once

#define VWT_VERSION_MAJOR 0
#define VWT_VERSION_MINOR 1
#define VWT_VERSION_PATCH 0

namespace vwt {
inline constexpr const char* version_string = "0.1.0";
}
