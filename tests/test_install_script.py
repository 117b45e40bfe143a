"""scripts/install.py hands uv what pip is configured with: the same indexes, wheel folders and
constraints, and pip's best-match across indexes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("install", Path(__file__).resolve().parents[1] / "scripts" / "install.py")
install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install)


def test_pip_options_become_uv_variables(monkeypatch):
    for variable in ("UV_INDEX", "UV_FIND_LINKS", "UV_CONSTRAINT", "UV_DEFAULT_INDEX", "SSL_CERT_FILE", "UV_INDEX_STRATEGY"):
        monkeypatch.delenv(variable, raising=False)
    env = install.uv_environment({"extra-index-url": "file:///a/simple file:///b/simple", "find-links": "/w1 /w2",
                                  "constraint": "/etc/c.txt", "index-url": "https://mirror/simple", "cert": "/ca.pem",
                                  "timeout": "60"})
    assert env == {"UV_INDEX": "file:///a/simple file:///b/simple", "UV_INDEX_STRATEGY": "unsafe-best-match",
                   "UV_FIND_LINKS": "/w1,/w2", "UV_CONSTRAINT": "/etc/c.txt", "UV_DEFAULT_INDEX": "https://mirror/simple",
                   "SSL_CERT_FILE": "/ca.pem"}


def test_a_variable_the_user_set_for_uv_wins(monkeypatch):
    monkeypatch.setenv("UV_FIND_LINKS", "/mine")
    assert "UV_FIND_LINKS" not in install.uv_environment({"find-links": "/theirs"})
    assert install.uv_environment({}) == {}


def test_pip_config_list_is_read_a_variable_over_a_file(monkeypatch):
    class Done:
        stdout = ":env:.find-links='/from-env'\nglobal.find-links='/from-file'\nglobal.extra-index-url='file:///x y'\nnoise\n"
    monkeypatch.setattr(install.subprocess, "run", lambda *a, **k: Done())
    assert install.pip_settings() == {"find-links": "/from-env", "extra-index-url": "file:///x y"}


def test_the_engine_override_keeps_prefects_fastapi_range():
    """The override replaces every fastapi requirement: it must be exactly the range Prefect needs,
    or installing the engines would move fastapi under the orchestrator."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    prefect_fastapi = next(Requirement(r) for r in metadata.requires("prefect") if Requirement(r).name == "fastapi")
    lines = [line for line in (install.ENGINES / "overrides.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    overrides = {Requirement(line).name: Requirement(line) for line in lines}
    assert overrides["fastapi"].specifier == prefect_fastapi.specifier


def test_engine_extras_are_installed_with_the_override_and_on_cpu_without_cuda_vision(monkeypatch):
    calls = []
    monkeypatch.setattr(install.subprocess, "run", lambda cmd, **k: calls.append((cmd, k)) or type("R", (), {"returncode": 0, "stdout": ""})())
    assert install.main(["--engines", "cpu"]) == 0
    command = calls[-1][0]
    assert command[command.index("--overrides") + 1].endswith("overrides.txt")
    assert command[command.index("--excludes") + 1].endswith("excludes-cpu.txt")
    assert command[-1].endswith("[cpu-engines]")
    assert install.main(["--engines", "gpu", "--dry-run", "--public-index"]) == 0
    command, options = calls[-1]
    assert "--excludes" not in command and command[-1].endswith("[gpu]") and "--dry-run" in command
    assert options["env"]["UV_DEFAULT_INDEX"] == install.PUBLIC_INDEX
    assert not any(k.startswith("PIP_") and k != "PIP_CONFIG_FILE" for k in options["env"])
    assert install.main(["--engines", "tpu"]) == 2
