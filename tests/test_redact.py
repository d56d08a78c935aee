"""Credentials never printed (engine.secrets.redact) and network text never driving the terminal
(builder.util.text.printable): examples from the hardening issue, then properties over generated passwords."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import example, given, settings
from hypothesis import strategies as st

from builder.lock.resolve import classify
from builder.util.text import escape_controls, printable, redact

PROPERTY = settings(max_examples=400, deadline=None, derandomize=True)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # an e-mail user name (Artifactory, Nexus): the userinfo runs to the LAST @
        ("https://me@corp.example:s3cretPW@host/pypi", "https://****@host/pypi"),
        ("http://user:pass word@host/x", "http://****@host/x"),  # a space in the password
        ("error: cannot reach https://ci:s3cret@mirror/simple (timed out)", "error: cannot reach https://****@mirror/simple (timed out)"),
        ("https://user:pa/ss@host/x", "https://****@host/x"),  # a raw / no client parses, still masked
        ("https://u:p#w@host/pypi", "https://****@host/pypi"),
        ("https://tok/en@host", "https://****@host"),
        ("x https://a:b@h/ and https://c:d@e/y", "x https://****@h/ and https://****@e/y"),
        ("https://u:ab://cd@host/p", "https://****@host/p"),
        ("a\nhttps://u:p@h/\nmail admin@corp", "a\nhttps://****@h/\nmail admin@corp"),  # never past the line
        ("https://u:p@bücher.example/simple", "https://****@bücher.example/simple"),
    ],
)
def test_redact_masks_the_whole_userinfo(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert redact(shown) == shown  # idempotent: a redacted line stays as it is


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # issue 37: a `?token=` mirror URL was echoed whole in the refusal of --index-json-url
        (
            "error: the package index URL 'https://pypi.example/pypi?token=s3cret' has a query",
            "error: the package index URL 'https://pypi.example/pypi?token=****' has a query",
        ),
        ("https://h/x?a=1&b=2;c=3#sha256=ab then", "https://h/x?a=****&b=****;c=****#sha256=ab then"),  # the fragment (a hash) stays
        ("https://u:p@h/simple?X-Amz-Signature=abc", "https://****@h/simple?X-Amz-Signature=****"),
        ("see https://h/simple/?s3cret.", "see https://h/simple/?****"),  # a bare value too
        ("who? https://h/x and then? what", "who? https://h/x and then? what"),  # a question mark outside a URL
    ],
)
def test_redact_masks_every_query_value(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert redact(shown) == shown


def test_a_token_in_index_json_url_is_not_echoed(cli: Callable[..., Result], write_matrix: Callable[..., Path]) -> None:
    from tests.test_updates import MATRIX

    result = cli("--matrix", str(write_matrix(MATRIX)), "updates", "--index-json-url", "https://pypi.example/pypi?token=s3cret")
    assert result.exit_code == 2 and "s3cret" not in result.output and "?token=****" in result.output, result.output


@pytest.mark.parametrize(
    "text",
    [
        "https://pypi.org/simple/torch/",
        "the package index https://host/pypi answered HTTP 401: check the mirror's credentials (user:password@ in the URL)",
        "no URL here: me@example.com",
        "https://",
    ],
)
def test_redact_leaves_text_without_credentials_alone(text: str) -> None:
    assert redact(text) == text


_NO_LINE_BREAK = st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n")
_USER = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="._-@+"), min_size=1, max_size=20)


@PROPERTY
@given(secret=st.text(_NO_LINE_BREAK.filter(lambda c: not c.isspace() and c not in "&;#'\"<>`@"), min_size=1, max_size=40))
def test_a_query_secret_never_survives_redaction(secret: str) -> None:
    """(A raw `@` in a query is read as the end of a userinfo, which masks all before it instead.)"""
    line = f"error: cannot reach https://mirror.example/pypi?token={secret} (HTTP 503)"
    assert redact(line) == "error: cannot reach https://mirror.example/pypi?token=**** (HTTP 503)"


@PROPERTY
@given(user=_USER, password=st.text(_NO_LINE_BREAK.filter(lambda c: not c.isspace()), min_size=1, max_size=40))
@example(user="me@corp.example", password="s3cretPW")
@example(user="u", password="pa/ss?x#y@z:w")
def test_a_password_without_spaces_never_survives_redaction(user: str, password: str) -> None:
    """Any printable password (raw `@`, `:`, `/`, `?`, `#`, `://` and non-ASCII included)."""
    line = f"error: cannot reach the package index https://{user}:{password}@mirror.example/pypi (HTTP 503; 3 tries)"
    assert redact(line) == "error: cannot reach the package index https://****@mirror.example/pypi (HTTP 503; 3 tries)"


@PROPERTY
@given(user=_USER, password=st.text(_NO_LINE_BREAK.filter(lambda c: c not in "/?#"), min_size=1, max_size=40))
@example(user="user", password="pass word")
@example(user="u", password="a b @c d")
def test_a_password_with_spaces_never_survives_redaction(user: str, password: str) -> None:
    """Spaces (and tabs) too, as long as no raw `/`, `?` or `#` ends the authority before the `@`."""
    line = f"cannot fetch http://{user}:{password}@host.example:8080/simple/torch/ (connection refused)"
    assert redact(line) == "cannot fetch http://****@host.example:8080/simple/torch/ (connection refused)"


def test_lock_failures_are_redacted_and_escaped() -> None:
    fetch = "error: Failed to fetch: `https://me@corp.example:s3cretPW@mirror.corp/simple/torch/`\n"
    assert classify(2, fetch).message.startswith("index https://****@mirror.corp/simple/ cannot be reached")
    failed = classify(1, "error: Request failed for https://me@corp.example:s3cretPW@mirror.corp/x: 503 \x1b[2JService Unavailable\n")
    assert "s3cretPW" not in failed.message and "corp.example" not in failed.message
    assert "\x1b" not in failed.message and "\\x1b[2J" in failed.message


def test_printable_escapes_controls_and_truncates() -> None:
    assert printable(">=3.10\x1b]8;;http://evil\x07x\x1b]8;;\x07") == ">=3.10\\x1b]8;;http://evil\\x07x\\x1b]8;;\\x07"
    assert printable("a\nb\tc\x9bd\u202ee") == "a\\x0ab\\x09c\\x9bd\\u202ee"
    assert printable("x" * 1000, 20) == "x" * 19 + "…"
    assert printable("ok") == "ok" and printable(42) == "42"


@PROPERTY
@given(st.text(max_size=300))
def test_printable_never_lets_a_control_character_through(text: str) -> None:
    shown = printable(text, 100)
    assert len(shown) <= 100
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert escape_controls(shown) == shown


def test_the_cli_redacts_every_error_line_it_prints(
    cli: Callable[..., Result], write_matrix: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last guard: a message that forgot to redact still prints no password."""
    from builder.updates import releases
    from builder.util.errors import RunFailure
    from tests.test_updates import MATRIX

    def check(*args: object, **kwargs: object) -> None:
        raise RunFailure("cannot reach https://me@corp.example:s3cretPW@mirror.corp/pypi (connection refused)")

    monkeypatch.setattr(releases, "check", check)
    result = cli("--matrix", str(write_matrix(MATRIX)), "updates")
    assert result.exit_code == 1
    assert "error: cannot reach https://****@mirror.corp/pypi (connection refused)" in result.output and "s3cretPW" not in result.output


def test_redact_stays_linear_on_long_hostile_lines() -> None:
    """A pattern that restarts at every letter (or scans to the line end per URL) is quadratic: a
    megabyte of log took minutes. Each of these is a megabyte."""
    import time

    for text in ("https://" + "a" * 1_000_000, "a" * 1_000_000, "a://" * 250_000, "https://u:p@h/x " * 62_500, "@a" * 500_000):
        started = time.process_time()
        redact(text)
        assert time.process_time() - started < 10, text[:20]


def test_an_error_never_carries_a_credential_whoever_prints_it() -> None:
    """Errors are redacted where they are made: doctor's table and a nightly summary print them
    without the CLI's last-line redaction."""
    from builder.util.errors import RunFailure, UserError

    assert "s3cret" not in str(UserError("cannot reach https://ci:s3cret@mirror/simple", "matrix.yaml", 3))
    assert "s3cret" not in UserError("cannot reach https://ci:s3cret@mirror/simple").message
    assert "s3cret" not in str(RunFailure("push to https://ci:s3cret@registry/x failed"))


def test_a_password_in_docker_host_never_reaches_doctor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the second hostile pass: `DOCKER_HOST=https://u:pw@host builder doctor` printed the
    password in the engine row."""
    from builder.host.facts import engine_facts

    monkeypatch.setenv("DOCKER_HOST", "https://ci:s3cret@127.0.0.1:1")
    facts = engine_facts()
    assert not facts.reachable
    assert facts.error and "s3cret" not in facts.error and "127.0.0.1:1" in facts.error


@pytest.mark.parametrize("host", ["http://[::1", "\x1b[2J::::"])
def test_a_docker_host_no_url_parser_reads_is_one_line(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the second hostile pass: a $DOCKER_HOST urllib cannot parse was a ValueError traceback
    from `builder clean --dry-run`; now the engine's one-line refusal, its control characters escaped."""
    from builder.engine.client import connect
    from builder.util.errors import UserError

    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(UserError, match="no Docker engine answers at") as raised:
        connect()
    assert "\x1b" not in str(raised.value) and "\n" not in str(raised.value)
