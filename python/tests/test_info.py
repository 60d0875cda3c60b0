import subprocess
import sys

import tessera


def test_info_names_version_backends_and_parameters():
    info = tessera.info()
    assert info["version"] == tessera.__version__
    assert tessera.__version__.count(".") == 2
    assert "cpu" in info["backends"]
    assert info["build"]["nanobind"].startswith(("2.", "3."))
    names = {p["name"] for p in info["params"]}
    assert "TESSERA_TIMEOUT_MS" in names


def test_python_dash_m_tessera_info_prints_the_build():
    out = subprocess.run(
        [sys.executable, "-m", "tessera", "info"], capture_output=True, text=True, check=True
    ).stdout
    assert f"tessera {tessera.__version__}" in out
    assert "backends: cpu" in out
    assert "TESSERA_TIMEOUT_MS" in out


def test_python_dash_m_tessera_refuses_other_commands():
    run = subprocess.run([sys.executable, "-m", "tessera", "bench"], capture_output=True, text=True)
    assert run.returncode == 2
    assert "usage: python -m tessera info" in run.stderr
