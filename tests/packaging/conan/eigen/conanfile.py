"""A stand-in for Conan Center's eigen/3.4.0 (unreachable here): the same package name, version,
CMake file and target names, its headers copied from Debian's libeigen3-dev. Only for testing
vwt's recipe offline (tests/packaging/conan_create.sh); a real build uses Conan Center's."""
import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy


class EigenStandIn(ConanFile):
    name = "eigen"
    version = "3.4.0"
    package_type = "header-library"
    license = "MPL-2.0"
    description = "Debian's Eigen 3.4 headers, packaged under Conan Center's name"
    no_copy_source = True

    def package_id(self):
        self.info.clear()

    def package(self):
        source = "/usr/include/eigen3"
        if not os.path.isdir(os.path.join(source, "Eigen")):
            raise ConanInvalidConfiguration(f"{source}/Eigen not found: install Debian's libeigen3-dev")
        copy(self, "*", source, os.path.join(self.package_folder, "include", "eigen3"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "Eigen3")
        self.cpp_info.set_property("cmake_target_name", "Eigen3::Eigen")
        self.cpp_info.set_property("pkg_config_name", "eigen3")
        self.cpp_info.includedirs = ["include/eigen3"]
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
