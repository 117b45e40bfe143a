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
