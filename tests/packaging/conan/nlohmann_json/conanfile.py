"""A stand-in for Conan Center's nlohmann_json (unreachable here): the same package name, CMake
file and target names, its headers copied from Debian's nlohmann-json3-dev (3.11.2). Only for
testing vwt's recipe offline (tests/packaging/conan_create.sh); a real build uses Conan Center's."""
import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy


class NlohmannJsonStandIn(ConanFile):
    name = "nlohmann_json"
    version = "3.11.2"
    package_type = "header-library"
    license = "MIT"
    description = "Debian's nlohmann/json headers, packaged under Conan Center's name"
    no_copy_source = True

    def package_id(self):
        self.info.clear()

    def package(self):
        source = "/usr/include/nlohmann"
        if not os.path.isfile(os.path.join(source, "json.hpp")):
            raise ConanInvalidConfiguration(f"{source}/json.hpp not found: install Debian's nlohmann-json3-dev")
        copy(self, "*", source, os.path.join(self.package_folder, "include", "nlohmann"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "nlohmann_json")
        self.cpp_info.set_property("cmake_target_name", "nlohmann_json::nlohmann_json")
        self.cpp_info.set_property("pkg_config_name", "nlohmann_json")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
