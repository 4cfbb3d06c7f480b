"""attntune_build: the PEP 517 build backend of the attntune Python package (pyproject.toml names it).

It needs nothing but the standard library, so `pip install ./python` works offline and in a fresh venv. The wheel
bundles an attntune install beside the Python code (attntune/_lib: lib/libattn.so.0, bin/attntune and the Lua
strategies under share/attntune/strategies, the layout `cmake --install` makes, so the CLI finds its strategies),
taken from the first of:

  1. an install prefix: `pip install --config-settings prefix=DIR ./python` (pip 23.1 and later also take
     `-C prefix=DIR`; Debian 12's pip 23.0 does not) or $ATTNTUNE_PREFIX (`cmake --install build --prefix DIR`)
  2. a CMake build directory: `--config-settings build-dir=DIR` or $ATTNTUNE_BUILD_DIR (runtime/libattn.so.0,
     tuner/attntune)
  3. an install pkg-config knows: `pkg-config --variable=prefix attntune` (PKG_CONFIG_PATH=DIR/lib/pkgconfig)
  4. the source tree around python/: libattn and the CLI configured and built with CMake in a temporary directory

The attntune CLI found must report the package's version. The build writes nothing into the source directory
(but Python's bytecode cache of this module, unless PYTHONDONTWRITEBYTECODE is set).
"""
import base64
import glob
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "attntune"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("attntune/__init__.py lacks __version__")
    return m.group(1)


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: attention through libattn, the attntune runtime (tuned kernels for CPUs and NVIDIA GPUs)\n"
            "Requires-Python: >=3.8\nRequires-Dist: numpy\n" % (NAME, _version()))


def _setting(config_settings, key, env):
    v = (config_settings or {}).get(key) or os.environ.get(env)
    return os.path.abspath(v) if v else None


def _first(paths):
    for p in paths:
        if os.path.isfile(p):
            return p
    return None


def _from_prefix(prefix):
    """(libattn, CLI, strategies dir) of an install prefix; libattn under lib, lib64 or a multiarch lib/<triple>."""
    lib = _first([os.path.join(prefix, d, "libattn.so.0") for d in ("lib", "lib64")] +
                 sorted(glob.glob(os.path.join(prefix, "lib", "*", "libattn.so.0"))))
    return lib, os.path.join(prefix, "bin", "attntune"), os.path.join(prefix, "share", "attntune", "strategies")


def _from_build_dir(build):
    return (os.path.join(build, "runtime", "libattn.so.0"), os.path.join(build, "tuner", "attntune"),
            os.path.join(build, "share", "attntune", "strategies"))


def _from_pkg_config():
    try:
        r = subprocess.run(["pkg-config", "--variable=prefix", NAME], capture_output=True, text=True, check=False)
    except OSError:
        return None
    if r.returncode != 0 or not r.stdout.strip():
        return None
    return os.path.normpath(r.stdout.strip())


def _build_from_source(tmp):
    """Configures and builds libattn and the CLI (which brings its strategies beside it) from the source tree
    python/ sits in; returns the build directory."""
    src = os.path.dirname(HERE)
    top = os.path.join(src, "CMakeLists.txt")
    if not os.path.isfile(top):
        return None
    with open(top, encoding="utf-8") as f:
        if "project(attntune" not in f.read():
            return None
    build = os.path.join(tmp, "build")
    jobs = str(os.cpu_count() or 2)
    for cmd in (["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", build, "-j", jobs, "--target", "attn", "attntune"]):
        print("attntune_build: " + " ".join(cmd), file=sys.stderr)
        try:
            rc = subprocess.run(cmd, stdout=sys.stderr, check=False).returncode
        except OSError as e:
            raise RuntimeError("attntune_build: no libattn found and cannot build one: %s" % e) from None
        if rc != 0:
            raise RuntimeError("attntune_build: `%s` failed (output above)" % " ".join(cmd))
    return build


def locate(config_settings=None, tmp=None):
    """(libattn, CLI, strategies dir, where they came from): the first source that has all three."""
    tried = []
    candidates = []
    p = _setting(config_settings, "prefix", "ATTNTUNE_PREFIX")
    if p:
        candidates.append(("prefix %s" % p, _from_prefix(p), True))
    b = _setting(config_settings, "build-dir", "ATTNTUNE_BUILD_DIR")
    if b:
        candidates.append(("build directory %s" % b, _from_build_dir(b), True))
    if not candidates:
        pc = _from_pkg_config()
        if pc:
            candidates.append(("prefix %s (pkg-config)" % pc, _from_prefix(pc), False))
    for what, (lib, cli, strategies), named in candidates:
        missing = [] if lib and os.path.isfile(lib) else ["libattn.so.0"]
        missing += [] if os.path.isfile(cli) else [cli]
        missing += [] if os.path.isdir(strategies) else [strategies]
        if not missing:
            return lib, cli, strategies, what
        tried.append("%s: lacks %s" % (what, ", ".join(missing)))
        if named:  # a location the user gave is never passed over for another
            raise RuntimeError("attntune_build: " + tried[-1])
    if tmp is not None:
        build = _build_from_source(tmp)
        if build:
            lib, cli, strategies = _from_build_dir(build)
            if os.path.isfile(lib) and os.path.isfile(cli) and os.path.isdir(strategies):
                return lib, cli, strategies, "source tree %s, built now" % os.path.dirname(HERE)
            raise RuntimeError("attntune_build: the build in %s lacks %s" % (build, lib))
    raise RuntimeError("attntune_build: no libattn found (%s); give an install prefix (pip install "
                       "--config-settings prefix=DIR, or ATTNTUNE_PREFIX=DIR) or a build directory "
                       "(--config-settings build-dir=DIR, ATTNTUNE_BUILD_DIR=DIR)"
                       % ("; ".join(tried) or "no prefix, build directory or pkg-config entry, and no source tree"))


def _check_version(cli):
    r = subprocess.run([cli, "--version"], capture_output=True, text=True, check=False)
    want = "attntune %s" % _version()
    if r.returncode != 0 or r.stdout.strip() != want:
        raise RuntimeError("attntune_build: %s --version says %r, this package is %r"
                           % (cli, (r.stdout or r.stderr).strip(), want))


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _zip_add(z, record, arcname, data, mode=0o644):
    info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16  # a regular file; pip keeps the executable bit
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)
    record.append("%s,%s,%d" % (arcname, _record_hash(data), len(data)))


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The metadata alone, so that pip need not build the wheel (and so libattn) twice."""
    dist_info = "%s-%s.dist-info" % (NAME, _version())
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return dist_info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    tag = "py3-none-" + re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())
    with tempfile.TemporaryDirectory(prefix="attntune-build-") as tmp:
        lib, cli, strategies, what = locate(config_settings, tmp)
        _check_version(cli)
        print("attntune_build: bundling libattn and the CLI from the %s" % what, file=sys.stderr)
        wheel = "%s-%s-%s.whl" % (NAME, version, tag)
        dist_info = "%s-%s.dist-info" % (NAME, version)
        record = []
        with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as z:
            for py in sorted(glob.glob(os.path.join(HERE, NAME, "*.py"))):
                _zip_add(z, record, "%s/%s" % (NAME, os.path.basename(py)), _read(py))
            _zip_add(z, record, NAME + "/_lib/lib/libattn.so.0", _read(lib), 0o755)
            _zip_add(z, record, NAME + "/_lib/bin/attntune", _read(cli), 0o755)
            for lua in sorted(glob.glob(os.path.join(strategies, "*.lua"))):
                _zip_add(z, record, NAME + "/_lib/share/attntune/strategies/" + os.path.basename(lua), _read(lua))
            _zip_add(z, record, dist_info + "/METADATA", _metadata().encode())
            _zip_add(z, record, dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: attntune_build\n"
                                                       "Root-Is-Purelib: false\nTag: %s\n" % tag).encode())
            record.append(dist_info + "/RECORD,,")  # RECORD lists itself without a hash
            info = zipfile.ZipInfo(dist_info + "/RECORD", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o100644 << 16
            z.writestr(info, "\n".join(record) + "\n")
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    """The Python sources only: a wheel built from it bundles a libattn found as above (1 to 3)."""
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    files = ["pyproject.toml", "attntune_build.py"] + [os.path.relpath(p, HERE) for p in
                                                      sorted(glob.glob(os.path.join(HERE, NAME, "*.py")))]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in files:
            t.add(os.path.join(HERE, rel), arcname=base + "/" + rel)
        data = _metadata().encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name


if __name__ == "__main__":  # python3 attntune_build.py: where a wheel built now would take libattn from (1 to 3)
    print("\n".join(locate()))
