"""Build llama-cpp-python with a GPU backend into the current environment: `gguf-bench build-gpu --vulkan|--cuda`.

From the installed version's own sdist (the same llama.cpp sources the CPU build compiled), into a wheel kept in
the cache (`~/.cache/gguf-bench/wheels/<backend>/`), so a second call, or CI on the same machine, installs it in
seconds instead of compiling again (pip's own wheel cache keys on the sdist, not on CMAKE_ARGS: it would hand back
the CPU wheel).

Every system package a backend needs is checked first; what is missing is named with the command that installs it.

Vulkan on Debian 12: its Vulkan headers (1.3.239) predate VK_EXT_layer_settings, which the vendored ggml-vulkan
uses in one block (validation-layer settings at instance creation). Where the headers lack it, that block is
guarded with `#ifdef VK_EXT_layer_settings` and the instance is created without those settings, which only matter
with Khronos' validation layer installed. No newer Vulkan headers are packaged for Debian 12 (backports included),
so the guard stays until the distribution catches up.

A CPU-type Vulkan device (Mesa's lavapipe, llvmpipe) is skipped by ggml-vulkan unless GGML_VK_VISIBLE_DEVICES names
it: `vulkan_env()` gives the variable to set, and `info` says so when a GPU build sees no device.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gguf_bench.errors import BenchError
from gguf_bench.models.files import cache_dir

BACKENDS = ("vulkan", "cuda")
APT = "apt-get update && apt-get install -y"


@dataclass(frozen=True)
class Requirement:
    what: str  # what the build needs, as a person would name it
    package: str  # the Debian package that provides it
    present: Callable[[], bool]


def _file(*patterns: str) -> Callable[[], bool]:
    return lambda: any(glob.glob(p) for p in patterns)


def _tool(name: str) -> Callable[[], bool]:
    return lambda: shutil.which(name) is not None


COMMON = [Requirement("CMake", "cmake", _tool("cmake")), Requirement("a C++ compiler (g++)", "g++", _tool("g++"))]
REQUIREMENTS = {
    "cpu": COMMON,  # llama-server on the installed ggml (server_build.py)
    "vulkan": COMMON + [
        Requirement("the GLSL compiler glslc", "glslc", _tool("glslc")),
        Requirement("Vulkan headers and loader", "libvulkan-dev", _file("/usr/include/vulkan/vulkan.hpp")),
        Requirement("SPIR-V headers", "spirv-headers", _file("/usr/include/spirv/unified1/spirv.hpp")),
        Requirement("a Vulkan driver (Mesa's, with the lavapipe software device)", "mesa-vulkan-drivers",
                    _file("/usr/share/vulkan/icd.d/*.json", "/etc/vulkan/icd.d/*.json")),
        Requirement("vulkaninfo (to see the devices)", "vulkan-tools", _tool("vulkaninfo")),
    ],
    "cuda": COMMON + [Requirement("the CUDA compiler nvcc (the CUDA toolkit)", "nvidia-cuda-toolkit",
                                  lambda: shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").is_file())],
}
CMAKE_ARGS = {"vulkan": "-DGGML_VULKAN=on", "cuda": "-DGGML_CUDA=on"}


def missing(backend: str) -> list[Requirement]:
    return [r for r in REQUIREMENTS[backend] if not r.present()]


def check_requirements(backend: str) -> None:
    """One line naming what is missing and the command that installs it."""
    if backend not in REQUIREMENTS:
        raise BenchError(f"unknown backend '{backend}'; choose from {', '.join(BACKENDS)}")
    lacking = missing(backend)
    if lacking:
        packages = " ".join(dict.fromkeys(r.package for r in lacking))
        raise BenchError(f"building the {backend} backend needs {', '.join(r.what for r in lacking)}; "
                         f"install with: {APT} {packages}")


def installed_version() -> str:
    try:
        return importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        raise BenchError("llama-cpp-python is not installed in this environment: pip install -e . first") from None


def wheel_dir(backend: str, version: str) -> Path:
    return cache_dir() / "wheels" / backend / version


def cached_wheel(backend: str, version: str) -> Path | None:
    found = sorted(wheel_dir(backend, version).glob("llama_cpp_python-*.whl"))
    return found[-1] if found else None


def vulkan_env() -> dict[str, str]:
    """What ggml-vulkan needs to use a CPU-type device (lavapipe): without it, 'No devices found'."""
    return {"GGML_VK_VISIBLE_DEVICES": os.environ.get("GGML_VK_VISIBLE_DEVICES", "0")}


def _pip(*args: str, log: Path | None = None, env: dict | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    with open(log, "a") if log else open(os.devnull, "w") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        where = f"; the log is {log}" if log else ""
        raise BenchError(f"`pip {' '.join(args[:2])} ...` failed (exit {rc}){where}")


def run_logged(cmd: list[str], log: Path) -> None:
    """Run a build command with its output appended to `log`; BenchError naming the log when it fails."""
    with open(log, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise BenchError(f"`{' '.join(cmd[:3])} ...` failed (exit {rc}); the log is {log}")


def sources(version: str, log: Path) -> Path:
    """The sdist of `version`, unpacked in the cache (once)."""
    root = cache_dir() / "sdist"
    src = root / f"llama_cpp_python-{version}"
    if (src / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
        return src
    root.mkdir(parents=True, exist_ok=True)
    _pip("download", "--no-deps", "--no-binary", ":all:", f"llama-cpp-python=={version}", "-d", str(root), log=log)
    archive = next(root.glob(f"llama_cpp_python-{version}.tar.gz"), None)
    if archive is None:
        raise BenchError(f"pip did not fetch the llama-cpp-python {version} sdist; the log is {log}")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return src


LAYER_SETTINGS_BLOCK = """    VkBool32 enable_best_practice = layer_settings;
    std::vector<vk::LayerSettingEXT> settings = {"""
CREATE_WITH_SETTINGS = ("    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
                        "extensions, &layer_setting_info);\n")
GUARD_ELSE = ("#else\n    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
              "extensions);\n#endif\n")


def headers_have_layer_settings() -> bool:
    core = Path("/usr/include/vulkan/vulkan_core.h")
    return core.is_file() and "VK_EXT_layer_settings" in core.read_text(errors="replace")


def guard_layer_settings(src: Path) -> bool:
    """Guard ggml-vulkan's layer-settings block for Vulkan headers without VK_EXT_layer_settings (module note).
    Returns whether the file was changed (False: already guarded)."""
    path = src / "vendor" / "llama.cpp" / "ggml" / "src" / "ggml-vulkan" / "ggml-vulkan.cpp"
    text = path.read_text()
    if "#ifdef VK_EXT_layer_settings" in text:
        return False
    if LAYER_SETTINGS_BLOCK not in text or CREATE_WITH_SETTINGS not in text:
        raise BenchError(f"{path.name} has changed: the layer-settings block this build guards for old Vulkan headers "
                         "is not where it was; install newer Vulkan headers, or update runtimes/build.py")
    text = text.replace(LAYER_SETTINGS_BLOCK, "#ifdef VK_EXT_layer_settings\n" + LAYER_SETTINGS_BLOCK, 1)
    text = text.replace(CREATE_WITH_SETTINGS, CREATE_WITH_SETTINGS + GUARD_ELSE, 1)
    path.write_text(text)
    return True


def cmake_args(backend: str) -> str:
    """The backend's flag, then the caller's own CMAKE_ARGS (-DCMAKE_CUDA_ARCHITECTURES=90, say: without it ggml-cuda
    compiles for a list of architectures, several times longer), which come later and so win on CMake's command line."""
    return " ".join(filter(None, (CMAKE_ARGS[backend], os.environ.get("CMAKE_ARGS", "").strip())))


def build_wheel(backend: str, version: str, log: Path, jobs: int | None = None) -> Path:
    """Compile llama-cpp-python `version` with `backend` into a wheel in the cache; the cached one if present."""
    if (wheel := cached_wheel(backend, version)) is not None:
        return wheel
    check_requirements(backend)
    src = sources(version, log)
    if backend == "vulkan" and not headers_have_layer_settings():
        guard_layer_settings(src)
    out = wheel_dir(backend, version)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CMAKE_ARGS": cmake_args(backend), "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs or os.cpu_count() or 1)}
    _pip("wheel", "--no-deps", "--no-cache-dir", "-w", str(out), str(src), log=log, env=env)
    wheel = cached_wheel(backend, version)
    if wheel is None:
        raise BenchError(f"the build wrote no wheel; the log is {log}")
    return wheel


def install(wheel: Path, log: Path) -> None:
    _pip("install", "--no-deps", "--force-reinstall", str(wheel), log=log)


def offload_available(backend: str) -> bool:
    """Whether a fresh interpreter with this environment's llama-cpp-python sees a GPU device."""
    env = {**os.environ, **(vulkan_env() if backend == "vulkan" else {})}
    code = "import llama_cpp, sys; llama_cpp.llama_backend_init(); sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 3)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode == 0
