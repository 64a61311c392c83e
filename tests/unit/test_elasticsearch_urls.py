"""Any Elasticsearch URL a user gives, with any scheme, is either used or refused in one line with a non-zero exit:
never a traceback from the client library."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitax.cli import main
from aitax.common.errors import UserError
from aitax.telemetry.elastic_access import CREDENTIALS_ENV, usable_url
from tests.command_line import command_paths, find

# What else each command that takes --es needs to get as far as using the URL
OTHER_ARGUMENTS = {("report",): ["--run", "R"], ("events", "template"): [], ("events", "replay"): []}
UNUSABLE = ["http://127.0.0.1:1", "ftp://127.0.0.1:1", "127.0.0.1:9200", "https://127.0.0.1:99999", "https://",
            "https://user:secret@127.0.0.1:1", "https://127.0.0.1:1", "https://nowhere.invalid:9200"]


@pytest.fixture
def tls_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in (("username", "reader"), ("password", "secret"), ("ca.crt", "not read before a connection")):
        (tmp_path / name).write_text(text)
    monkeypatch.setenv(CREDENTIALS_ENV, str(tmp_path))
    return tmp_path


def test_every_command_taking_es_is_covered() -> None:
    taking_es = {path for path in command_paths() if any("--es" in getattr(p, "opts", ()) for p in find(path).params)}
    assert taking_es == set(OTHER_ARGUMENTS)


@pytest.mark.parametrize("path", sorted(OTHER_ARGUMENTS))
@pytest.mark.parametrize("url", UNUSABLE)
def test_an_unusable_url_is_one_line_and_a_non_zero_exit(path: tuple[str, ...], url: str, tls_credentials: Path,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AITAX_HOME", str(tmp_path / "home"))  # replay's spools: none
    assert main([*path, *OTHER_ARGUMENTS[path], "--es", url]) != 0
    error = capsys.readouterr().err.strip()
    assert error.startswith("aitax") and "\n" not in error and "Traceback" not in error
    assert "secret" not in error


def test_a_usable_url_gets_its_port_spelt_out(tls_credentials: Path) -> None:
    assert usable_url("https://es.example.org") == "https://es.example.org:443"
    # an external cluster's URL may carry its credentials (the chart's existingSecret): kept, never shown
    assert usable_url("https://writer:s3cret@es.example.org/") == "https://writer:s3cret@es.example.org:443"
    assert usable_url("https://[::1]:9200/") == "https://[::1]:9200"
    assert usable_url("https://127.0.0.1:9200/prefix/") == "https://127.0.0.1:9200/prefix"


@pytest.mark.parametrize(("url", "named"), [
    ("http://127.0.0.1:9200", "plain http"), ("gopher://h:1", "not gopher://"), ("h:9200", "the scheme"),
    ("https://h:0x1", "port"), ("https://:9200", "no host"), ("http://u:secret@h:1", "plain http"),
])
def test_each_reason_is_named(url: str, named: str, tls_credentials: Path) -> None:
    with pytest.raises(UserError, match=named) as refused:
        usable_url(url)
    assert "secret" not in str(refused.value)


def test_plain_http_is_used_when_the_credentials_hold_no_ca(tls_credentials: Path) -> None:
    (tls_credentials / "ca.crt").unlink()
    assert usable_url("http://127.0.0.1:9200") == "http://127.0.0.1:9200"
