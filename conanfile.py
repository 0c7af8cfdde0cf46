"""Conan 2 recipe for vwt, a header-only C++20 library (one package for every setting).

    conan create . -s compiler.cppstd=20            # the profile must ask for C++20 (or gnu20)
    # consumers: requires = "vwt/0.2.0"; find_package(vwt) and target vwt::vwt

Options: with_openmp (thread the ops with OpenMP; default on); with_tokenizer (the vwt::tokenizer
component, tokenizer.json on Conan Center's pcre2; default off); with_onednn and with_mpi (the
vwt::onednn and vwt::mpi components, against the system's oneDNN and MPI, which Conan Center does
not provide in a form vwt has been tested with; default off). The CUDA component is a compiled
library and this package is headers only: take it from the CMake build or vcpkg's `cuda` feature.
"""
import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load


class VwtConan(ConanFile):
    name = "vwt"
    package_type = "header-library"
    license = "MIT"
    url = "https://github.com/vwt-project/vwt"
    description = "Variable-Width Transformers (the ><former): header-only C++20 training and inference"
    topics = ("transformer", "language-model", "header-only", "eigen")
    settings = "os", "arch", "compiler", "build_type"
    options = {"with_openmp": [True, False], "with_tokenizer": [True, False], "with_onednn": [True, False], "with_mpi": [True, False]}
    default_options = {"with_openmp": True, "with_tokenizer": False, "with_onednn": False, "with_mpi": False}
    exports_sources = "CMakeLists.txt", "cmake/*", "include/*", "LICENSE", "README.md", "CHANGELOG.md"
    no_copy_source = True

    def set_version(self):
        # the one place the version is written: project(VERSION) in CMakeLists.txt
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        match = re.search(r"project\(vwt VERSION ([0-9]+\.[0-9]+\.[0-9]+)", text)
        if not match:
            raise ConanInvalidConfiguration("vwt: no project(vwt VERSION x.y.z) in CMakeLists.txt")
        self.version = match.group(1)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        self.requires("eigen/3.4.0")
        self.requires("nlohmann_json/[>=3.10 <4]")
        if self.options.with_tokenizer:
            self.requires("pcre2/[>=10.40 <11]")

    def validate(self):
        try:
            check_min_cppstd(self, 20)
        except ConanInvalidConfiguration:
            raise ConanInvalidConfiguration(
                f"vwt needs C++20, and the profile asks for compiler.cppstd={self.settings.get_safe('compiler.cppstd')}: "
                "add compiler.cppstd=20 (or gnu20) to the profile's [settings], or pass -s compiler.cppstd=20")

    def package_id(self):
        self.info.clear()  # headers only: one package whatever the settings and options

    def generate(self):
        CMakeDeps(self).generate()
        tc = CMakeToolchain(self)
        for flag in ("VWT_BUILD_TESTS", "VWT_BUILD_BENCH", "VWT_BUILD_EXAMPLES", "VWT_BUILD_TOOLS", "VWT_WITH_CUDA"):
            tc.cache_variables[flag] = False
        tc.cache_variables["VWT_INSTALL"] = True
        tc.cache_variables["VWT_WITH_OPENMP"] = bool(self.options.with_openmp)
        tc.cache_variables["VWT_WITH_ONEDNN"] = bool(self.options.with_onednn)
        tc.cache_variables["VWT_WITH_MPI"] = bool(self.options.with_mpi)
        tc.generate()

    def build(self):
        CMake(self).configure()  # nothing to compile; configuring generates <vwt/version.hpp>

    def package(self):
        CMake(self).install()
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "vwt")
        self.cpp_info.set_property("pkg_config_name", "vwt")

        def component(name, requires, defines=(), system_libs=()):
            """A headers-only component `name`, target vwt::<name> (core is vwt::vwt)."""
            c = self.cpp_info.components[name]
            c.set_property("cmake_target_name", "vwt::vwt" if name == "core" else f"vwt::{name}")
            c.requires = list(requires)
            c.defines = list(defines)
            c.system_libs = list(system_libs)
            c.bindirs = []
            c.libdirs = []
            return c

        # EIGEN_DONT_PARALLELIZE: vwt threads its ops itself (README: build options)
        core = component("core", ["eigen::eigen", "nlohmann_json::nlohmann_json"], ["EIGEN_DONT_PARALLELIZE"])
        if self.options.with_openmp:
            flag = "/openmp" if self.settings.compiler == "msvc" else "-fopenmp"
            core.cxxflags = [flag]
            core.sharedlinkflags = [flag]
            core.exelinkflags = [flag]
        if self.options.with_tokenizer:
            component("tokenizer", ["core", "pcre2::pcre2"])
        if self.options.with_onednn:
            component("onednn", ["core"], ["VWT_WITH_ONEDNN"], ["dnnl"])
        if self.options.with_mpi:
            component("mpi", ["core"], ["VWT_WITH_MPI"], ["mpi_cxx", "mpi"])
