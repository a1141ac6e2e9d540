"""What ships: one import package `rentopt`, a complete sdist, and the bundled snapshot.

These tests build the real artefacts offline (no build isolation: setuptools and wheel are test
dependencies) from a clean copy of the working tree, so they check the pyproject/MANIFEST that a
release would use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import rentopt

ROOT = Path(__file__).resolve().parent.parent
IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", ".hypothesis",
                                 ".pytest_cache", ".bench", "*.pyc")

pytestmark = pytest.mark.slow


def _build(backend_call: str, source: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    code = f"import sys; from setuptools import build_meta as b; print(b.{backend_call}(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory):
    """(sdist, wheel built from the unpacked sdist)."""
    base = tmp_path_factory.mktemp("release")
    clean = base / "checkout"
    shutil.copytree(ROOT, clean, ignore=IGNORED)
    sdist = _build("build_sdist", clean, base / "dist")
    with tarfile.open(sdist) as tar:
        tar.extractall(base / "unpacked", filter="data")
    unpacked = next((base / "unpacked").iterdir())
    wheel = _build("build_wheel", unpacked, base / "wheel")
    return sdist, wheel


def test_the_sdist_carries_what_the_tests_need(artefacts):
    sdist, _ = artefacts
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "README.md", "pyproject.toml", "tests/conftest.py", "tests/test_packaging.py",
                   "tests/providers/helpers.py", "tools/fixture_routes.py", "tools/build_snapshot.py",
                   "tools/build_data_twins.py",
                   "fixtures/vast/bundles.json", "fixtures/vast/routes.json", "optimizer/data/snapshot.json.gz",
                   "optimizer/data/snapshot-columns.bin.gz",
                   "providers/sheets/jygpu.toml", "rentopt/__init__.py", ".ci/run"):
        assert needed in names, f"{needed} is missing from the sdist"
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


def test_the_wheel_installs_exactly_one_top_level_package(artefacts):
    _, wheel = artefacts
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top = zf.read(next(n for n in names if n.endswith(".dist-info/top_level.txt"))).decode().split()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert top == ["rentopt"]
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"rentopt"}, roots
    for data in ("rentopt/optimizer/data/snapshot.json.gz", "rentopt/optimizer/data/snapshot-columns.bin.gz",
                 "rentopt/optimizer/data/gpus.toml", "rentopt/optimizer/data/gpus.toml.json",
                 "rentopt/optimizer/data/models.toml.json", "rentopt/optimizer/data/fx.toml.json",
                 "rentopt/providers/sheets/jygpu.toml"):
        assert data in names
    assert "rentopt.providers.vast:VastProvider" in entry_points
    assert "rentopt = rentopt.optimizer.cli:main" in entry_points
    assert f"rentopt-{rentopt.__version__}-" in wheel.name


IMPOSTORS = {
    # The unrelated PyPI packages named `optimizer` and `providers`, as far as a collision goes.
    "optimizer/__init__.py": "WHO = 'someone else: optimizer'\n",
    "optimizer/cli.py": "raise ImportError('not rentopt')\n",
    "providers/__init__.py": "WHO = 'someone else: providers'\n",
    "providers/base.py": "raise ImportError('not rentopt')\n",
}


def test_rentopt_installs_next_to_other_optimizer_and_providers_packages(artefacts, tmp_path):
    _, wheel = artefacts
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    import pydantic

    # The dependencies are installed here already: point the new venv at them (no network).
    (site / "_rentopt_test_deps.pth").write_text(str(Path(pydantic.__file__).resolve().parent.parent) + "\n")
    for rel, text in IMPOSTORS.items():  # installed first, as if by `pip install optimizer providers`
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, cwd=tmp_path)
    for rel, text in IMPOSTORS.items():
        assert (site / rel).read_text() == text, f"installing rentopt changed {rel}"
    home = tmp_path / "empty-home"
    check = textwrap.dedent("""
        import optimizer, providers
        assert optimizer.WHO.startswith("someone else") and providers.WHO.startswith("someone else")
        import rentopt
        from rentopt.optimizer.catalog import load_offers
        from rentopt.providers.base import provider_names
        found = load_offers()
        assert found.origin == "bundled", found.origin
        assert "site-packages" in rentopt.__file__, rentopt.__file__
        assert "vast" in provider_names()
        print(len(found.offers))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"RENTOPT_HOME": str(home)}
    result = subprocess.run([str(python), "-c", check], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 0
    version = subprocess.run([str(python), "-m", "rentopt", "--version"], capture_output=True, text=True,
                             cwd=tmp_path, env=env)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"rentopt, version {rentopt.__version__}"
    assert not home.exists()  # a read-only quote path never creates the home
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "uninstall", "--quiet", "--yes", "rentopt"],
                   check=True, cwd=tmp_path)
    for rel, text in IMPOSTORS.items():
        assert (site / rel).read_text() == text, f"uninstalling rentopt changed {rel}"
