"""The vcpkg overlay port (ports/vwt) and the developer manifest (vcpkg.json), tested without
vcpkg (which cannot be installed here): the JSON files are valid and agree with the version in
CMakeLists.txt; the CMake options the portfile passes configure and install vwt into a prefix
whose layout is what the portfile's fixup steps expect; and a consumer written from the port's
`usage` text builds and runs against that prefix.
Usage: vcpkg_port.py SOURCE WORK CMAKE CXX"""
import json
import os
import re
import shutil
import subprocess
import sys

source, work, cmake, cxx = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def fail(what):
    sys.exit(f"vcpkg_port: {what}")


version = re.search(r"project\(vwt VERSION ([0-9.]+)", open(os.path.join(source, "CMakeLists.txt")).read()).group(1)
port = json.load(open(os.path.join(source, "ports/vwt/vcpkg.json")))
manifest = json.load(open(os.path.join(source, "vcpkg.json")))
for name, m in (("ports/vwt/vcpkg.json", port), ("vcpkg.json", manifest)):
    if m.get("name") != "vwt" or m.get("version") != version:
        fail(f"{name}: name {m.get('name')!r}, version {m.get('version')!r}; CMakeLists.txt says {version}")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", m["name"]):
        fail(f"{name}: '{m['name']}' is not a vcpkg port name")
deps = {d if isinstance(d, str) else d["name"] for d in port["dependencies"]}
if not {"eigen3", "nlohmann-json", "vcpkg-cmake", "vcpkg-cmake-config"} <= deps:
    fail(f"the port's dependencies {sorted(deps)} miss one of eigen3, nlohmann-json, vcpkg-cmake, vcpkg-cmake-config")
if set(port["features"]) != {"cuda", "mpi", "tools"} or not all(f.get("description") for f in port["features"].values()):
    fail(f"the port's features {sorted(port['features'])}: cuda, mpi and tools, each described")

portfile = open(os.path.join(source, "ports/vwt/portfile.cmake")).read()
configure = portfile[portfile.index("vcpkg_cmake_configure("):]
configure = configure[:configure.index("\n)")]
options = re.findall(r"-D\w+=\w+", configure)
features = dict(re.findall(r"^\s+(cuda|mpi|tools)\s+(VWT_\w+)\s*$", portfile, re.M))
if features != {"cuda": "VWT_WITH_CUDA", "mpi": "VWT_WITH_MPI", "tools": "VWT_BUILD_TOOLS"}:
    fail(f"the portfile maps features to {features}")
cmake_options = open(os.path.join(source, "CMakeLists.txt")).read()
for name in [o[2:].split("=")[0] for o in options] + list(features.values()):
    if not re.search(r"option\(" + name + r"\b", cmake_options):
        fail(f"the portfile sets {name}, which CMakeLists.txt has no option for")
config_path = re.search(r"vcpkg_cmake_config_fixup\(CONFIG_PATH ([\w/]+)\)", portfile).group(1)

# the portfile's steps, default features (vcpkg_check_features turns each off: -DX=OFF)
build, prefix = os.path.join(work, "build"), os.path.join(work, "prefix")
feature_off = [f"-D{v}=OFF" for v in features.values()]
subprocess.run([cmake, "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CXX_COMPILER={cxx}", *options,
                *feature_off], check=True, stdout=subprocess.DEVNULL)
subprocess.run([cmake, "--build", build], check=True, stdout=subprocess.DEVNULL)
subprocess.run([cmake, "--install", build, "--prefix", prefix], check=True, stdout=subprocess.DEVNULL)
for path in (os.path.join(config_path, "vwtConfig.cmake"), os.path.join(config_path, "vwtConfigVersion.cmake"),
             "share/pkgconfig/vwt.pc", "include/vwt/vwt.hpp", "include/vwt/version.hpp"):
    if not os.path.isfile(os.path.join(prefix, path)):
        fail(f"the install has no {path} (the portfile's fixup steps expect it)")
if os.path.exists(os.path.join(prefix, "bin")):
    fail("without the tools feature the install has a bin/ directory")

# a consumer written from the usage text
usage = open(os.path.join(source, "ports/vwt/usage")).read()
lines = [l.strip() for l in usage.splitlines() if l.strip().startswith(("find_package(", "target_link_libraries("))]
if len(lines) != 2:
    fail(f"the usage text should show find_package and target_link_libraries, found {lines}")
consumer = os.path.join(work, "consumer")
os.makedirs(consumer)
shutil.copy(os.path.join(source, "tests/consumer/main.cpp"), consumer)
with open(os.path.join(consumer, "CMakeLists.txt"), "w") as f:
    f.write("cmake_minimum_required(VERSION 3.25)\nproject(usage LANGUAGES CXX)\n" + lines[0] +
            "\nadd_executable(main main.cpp)\n" + lines[1] + "\n")
subprocess.run([cmake, "-S", consumer, "-B", os.path.join(consumer, "build"), f"-DCMAKE_PREFIX_PATH={prefix}",
                f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_BUILD_TYPE=Release"], check=True, stdout=subprocess.DEVNULL)
subprocess.run([cmake, "--build", os.path.join(consumer, "build")], check=True, stdout=subprocess.DEVNULL)
out = subprocess.run([os.path.join(consumer, "build", "main")], check=True, capture_output=True, text=True).stdout
if "prefill logits finite" not in out:
    fail(f"the usage consumer printed {out!r}")
print(f"vcpkg_port: manifests at {version}, the portfile's configure/install steps and its usage work")
