"""A PEP 517 build backend for the wfe client that needs only the standard library.

pip builds a project in an isolated environment into which it installs the
backend's requirements; with setuptools as the backend that means a
download.  This backend has no requirements, so `pip install ./clients/python`
works on a machine without network access.  It builds a pure-Python wheel
(and an sdist) of the `wfe` package from pyproject.toml's [project] table.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "wfe"


def _project() -> Dict[str, Any]:
    """The [project] table of pyproject.toml, its dynamic version filled in from the package."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib  # Python 3.11+
        project = tomllib.loads(raw.decode("utf-8"))["project"]
    except ImportError:  # pragma: no cover - older Pythons
        project = _parse_project(raw.decode("utf-8"))
    if "version" not in project:
        project["version"] = _version()
    return project


def _version() -> str:
    """wfe.__version__, read from wfe/__init__.py (the one place the version is written)."""
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        found = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not found:
        raise RuntimeError(f"{PACKAGE}/__init__.py has no __version__ = \"...\" line")
    return found.group(1)


def _parse_project(text: str) -> Dict[str, Any]:
    """Enough of TOML for our [project] table: strings, string lists, one inline table."""
    section = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    extras = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    out: Dict[str, Any] = {}
    for key, value in re.findall(r'^([\w-]+)\s*=\s*(".*?"|\[.*?\]|\{.*?\})\s*$', section.group(1) if section else "", re.M):
        if value.startswith('"'):
            out[key] = value[1:-1]
        elif value.startswith("["):
            out[key] = re.findall(r'"(.*?)"', value)
        else:
            out[key] = dict(re.findall(r'(\w+)\s*=\s*"(.*?)"', value))
    if extras:
        out["optional-dependencies"] = {
            k: re.findall(r'"(.*?)"', v) for k, v in re.findall(r"^([\w-]+)\s*=\s*(\[.*?\])", extras.group(1), re.M)
        }
    return out


def _names() -> Tuple[str, str]:
    """(name, version) of the distribution."""
    p = _project()
    return p["name"], p["version"]


def _metadata() -> str:
    """The core metadata (METADATA / PKG-INFO), version 2.1."""
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p.get('description', '')}",
    ]
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    if "license" in p:
        lines.append(f"License: {p['license'].get('text', '')}")
    for dep in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for dep in deps:
            lines.append(f'Requires-Dist: {dep}; extra == "{extra}"')
    lines.append("Description-Content-Type: text/markdown")
    readme = os.path.join(ROOT, p.get("readme", "README.md"))
    body = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> List[str]:
    """The package's files, relative to ROOT, in a stable order."""
    files = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".typed")):
                files.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return files


def _record_line(path: str, data: bytes) -> str:
    """One RECORD row: path, urlsafe base64 SHA-256 without padding, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, contents: List[Tuple[str, bytes]]) -> str:
    """Write a py3-none-any wheel holding contents plus its dist-info; return its file name."""
    name, version = _names()
    dist_info = f"{name}-{version}.dist-info"
    contents = contents + [
        (f"{dist_info}/METADATA", _metadata().encode("utf-8")),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: wfe_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    record = [_record_line(path, data) for path, data in contents] + [f"{dist_info}/RECORD,,"]
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in contents:
            whl.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), data)
        whl.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return filename


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    """Nothing: the backend is the standard library."""
    return []


get_requires_for_build_sdist = get_requires_for_build_wheel
get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    """PEP 517: the wheel of the package."""
    files = [(path.replace(os.sep, "/"), open(os.path.join(ROOT, path), "rb").read()) for path in _package_files()]
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose .pth file puts this source tree on sys.path."""
    return _write_wheel(wheel_directory, [("wfe_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    """PEP 517: a source archive with pyproject.toml, the backend, README and the package."""
    name, version = _names()
    base = f"{name}-{version}"
    paths = ["pyproject.toml", "README.md", "_build/wfe_build.py"] + _package_files()
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            full = os.path.join(ROOT, path)
            if os.path.exists(full):
                tar.add(full, arcname=f"{base}/{path}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode("utf-8")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return filename
