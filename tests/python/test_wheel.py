"""The wheel `pip wheel .` builds: what it carries and needs (an `auditwheel show`-style check), and
the whole tool working from it in a fresh virtual environment that has torch and nothing of the
build, offline."""

import fcntl
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import memseal

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPTS = os.path.join(ROOT, "examples", "scripts")
TORCH_LIB = os.path.join(os.path.dirname(__import__("torch").__file__), "lib")

# The system's C and C++ runtime: what every Linux wheel may need (auditwheel's manylinux policies
# list these).
SYSTEM_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                    "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"}
WHEEL_BINARIES = ("memseal/bin/memseal", "memseal/lib/libmemseal.so",
                  "memseal/lib/memseal/libmemseal_preload.so",
                  "memseal/lib/memseal/libmemseal_run.so")
WHEEL_FILES = (*WHEEL_BINARIES, "memseal/_torch_build.py")  # the torch release it was built against

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None or shutil.which("ninja") is None,
                                reason="needs readelf and ninja (scripts/bootstrap.sh installs them)")


def _elf(path):
    with open(path, "rb") as file:
        return file.read(4) == b"\x7fELF"


def _dynamic(path):
    """NEEDED and RUNPATH entries of an ELF file (readelf -d)."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.+?)\]", out)
    return needed, [entry for item in runpath for entry in item.split(":")]


def _glibc_needed(path):
    out = subprocess.run(["readelf", "--dyn-syms", "-W", path], capture_output=True, text=True,
                         check=True).stdout
    versions = {tuple(int(part) for part in v.split(".")) for v in re.findall(r"@GLIBC_([0-9.]+)", out)}
    return max(versions, default=(0,))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """`pip wheel .`, in the build folder `pip install .` uses (build/python), offline."""
    out = tmp_path_factory.mktemp("dist")
    environment = dict(os.environ, CMAKE_GENERATOR="Ninja", CC=os.environ.get("CC", "cc"),
                       CXX=os.environ.get("CXX", "c++"))
    if shutil.which("ccache"):
        environment.update(CMAKE_CXX_COMPILER_LAUNCHER="ccache", CMAKE_C_COMPILER_LAUNCHER="ccache")
    # One build at a time in that folder (pytest-xdist's workers each build their own wheel).
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    with open(os.path.join(ROOT, "build", ".python-build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                                 "--no-deps", "--no-index", "--disable-pip-version-check", "-q",
                                 "-w", str(out), ROOT],
                                capture_output=True, text=True, env=environment, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    (path,) = out.glob("memseal-*.whl")
    return path


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory):
    folder = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder)
    return folder


def test_the_wheel_carries_the_whole_tool(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"memseal-{memseal.__version__}.dist-info/entry_points.txt").decode()
        command_mode = archive.getinfo("memseal/bin/memseal").external_attr >> 16
    for name in WHEEL_FILES:
        assert name in names, name
    assert any(re.fullmatch(r"memseal/_memseal\..*\.so", name) for name in names)
    assert "memseal = memseal._cli:console_main" in entry_points
    assert command_mode & 0o111, "memseal/bin/memseal must keep its executable bit"
    # Nothing of the build folder or the tests.
    assert not [name for name in names if "CMakeFiles" in name or name.startswith("tests/")]
    # A platform tag that claims no more than was checked: linux_x86_64, this Python only.
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.endswith(f"-{tag}-{tag}-linux_x86_64.whl"), wheel.name
    # Its size, compressed: the core is linked into four binaries (module, library, command's
    # runtime); a wheel several times this size means something else got in.
    assert wheel.stat().st_size < 40 * 1024 * 1024, wheel.stat().st_size


def test_the_wheels_binaries_need_only_libtorch_and_the_c_library(unpacked):
    torch_own = {name for name in os.listdir(TORCH_LIB) if ".so" in name}
    # What libtorch's libraries need themselves (the CUDA runtime of a CUDA build, found by their
    # RUNPATH in the nvidia packages beside torch) comes with torch, not with memseal.
    torch_needs = set()
    for name in torch_own:
        path = os.path.join(TORCH_LIB, name)
        if os.path.isfile(path) and _elf(path):
            torch_needs.update(_dynamic(path)[0])
    torch_glibc = max(_glibc_needed(os.path.join(TORCH_LIB, name)) for name in ("libc10.so", "libtorch_cpu.so"))
    checked = 0
    for folder, _, files in os.walk(unpacked):
        for name in files:
            path = os.path.join(folder, name)
            if not _elf(path):
                continue
            checked += 1
            needed, runpath = _dynamic(path)
            foreign = [lib for lib in needed
                       if lib not in SYSTEM_LIBRARIES and lib not in torch_own
                       and lib not in torch_needs and lib != "libmemseal.so"]
            assert not foreign, f"{name} needs {foreign}"
            # Every search path relative to the file itself: never the build machine's folders.
            assert all(entry.startswith("$ORIGIN") for entry in runpath), f"{name}: {runpath}"
            glibc = _glibc_needed(path)
            print(f"{os.path.relpath(path, unpacked)}: glibc {'.'.join(map(str, glibc))} "
                  f"(torch's libraries: {'.'.join(map(str, torch_glibc))})")
    assert checked == len(WHEEL_BINARIES) + 2  # the module and libmemseal_run_python.so too


def _torch_only_site(folder):
    """A folder on the fresh environment's path (through a .pth file) that holds this
    environment's torch and its dependencies, linked, and nothing of memseal."""
    source = sysconfig.get_paths()["purelib"]
    folder.mkdir()
    for name in os.listdir(source):
        if name.startswith(("memseal", "__editable__", "_memseal")) or name.endswith(".pth"):
            continue
        os.symlink(os.path.join(source, name), folder / name)
    return folder


@pytest.fixture(scope="module")
def fresh_environment(wheel, tmp_path_factory):
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    torch_site = _torch_only_site(root / "torch-site")
    with open(os.path.join(purelib, "torch-site.pth"), "w") as pth:
        pth.write(str(torch_site) + "\n")
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PYTHON", "MEMSEAL_", "VIRTUAL_ENV", "LD_"))}
    environment["PATH"] = f"{venv / 'bin'}:{environment.get('PATH', '/usr/bin:/bin')}"
    # Offline: no index; torch (a dependency) is already there, through the .pth file.
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                             "--no-index", "--disable-pip-version-check", "-q", str(wheel)],
                            capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return venv, environment


def _run(environment, *command, cwd=None):
    return subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          env=environment, cwd=cwd, timeout=600)


def test_the_fresh_environment_has_memseal_from_the_wheel_only(fresh_environment, tmp_path):
    venv, environment = fresh_environment
    where = _run(environment, venv / "bin" / "python", "-c",
                 "import memseal, torch; print(memseal.__file__); print(torch.__version__)",
                 cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    memseal_file, torch_version = where.stdout.split()
    assert memseal_file.startswith(str(venv)), memseal_file
    assert torch_version.split("+")[0] == importlib.metadata.version("torch").split("+")[0]


def test_memseal_run_from_the_wheel_finds_the_leak_of_an_unmodified_script(fresh_environment, tmp_path):
    venv, environment = fresh_environment
    result = _run(environment, venv / "bin" / "memseal", "run", "--fail-on-leak", "--",
                  venv / "bin" / "python", os.path.join(SCRIPTS, "train.py"), "--leak", "total-loss",
                  "--steps", "120", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "autograd-graph-retained" in result.stderr
    assert "train.py" in result.stderr


def test_python_m_memseal_check_from_the_wheel(fresh_environment, case_path, tmp_path):
    venv, environment = fresh_environment
    result = _run(environment, venv / "bin" / "python", "-m", "memseal", "check", "--steps", "15",
                  "--warmup", "3", case_path("losses_list.py"), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "memseal: LEAK" in result.stdout


def test_the_versions_agree_in_the_fresh_environment(fresh_environment, tmp_path):
    venv, environment = fresh_environment
    command = _run(environment, venv / "bin" / "memseal", "--version", cwd=tmp_path)
    module = _run(environment, venv / "bin" / "python", "-m", "memseal", "--version", cwd=tmp_path)
    package = _run(environment, venv / "bin" / "python", "-c",
                   "import importlib.metadata as m, memseal; "
                   "print(m.version('memseal'), memseal.__version__)", cwd=tmp_path)
    assert command.returncode == module.returncode == package.returncode == 0
    assert command.stdout == module.stdout
    distribution, core = package.stdout.split()
    assert distribution == core
    torch_release = importlib.metadata.version("torch").split("+")[0]  # the one memseal built with
    assert command.stdout.startswith(f"memseal {core} (libtorch {torch_release}")


def test_the_command_in_an_environment_without_torch_says_what_is_missing(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PYTHON", "MEMSEAL_", "VIRTUAL_ENV", "LD_"))}
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                              "install", "--no-index", "--no-deps", "--disable-pip-version-check",
                              "-q", str(wheel)], capture_output=True, text=True, env=environment,
                             timeout=600)
    assert install.returncode == 0, install.stderr
    for command in ([venv / "bin" / "memseal", "--version"],
                    [venv / "bin" / "memseal", "run", "--", "true"]):
        result = _run(environment, *command, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "this Python has no torch" in result.stderr
