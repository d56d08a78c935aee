"""Strict grammars for every value that can reach a Dockerfile.

A value passes only if it matches one of these patterns in full, so a newline, `$(`, a
backtick, a quote or `;` can never be rendered into a RUN line or a label.
"""

from __future__ import annotations

import re

from packaging.version import Version

_DOMAIN_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[a-f0-9]{64}"

IMAGE_REF = re.compile(rf"^{_NAME}(?::{_TAG})?(?:@{_DIGEST})?$")
REPOSITORY = re.compile(rf"^{_NAME}$")
DIGEST = re.compile(rf"^{_DIGEST}$")
DOCKER_TAG = re.compile(rf"^{_TAG}$")
PYTHON = re.compile(r"^3\.[0-9]{1,2}$")
ACCEL_VERSION = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}(?:\.[0-9]{1,3})?$")
PEP440_STRICT = re.compile(r"^[0-9]+(?:\.[0-9]+){0,3}(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?$")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
OS = re.compile(r"^[a-z]+[0-9]+(?:\.[0-9]+)?$")
DEB_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,62}$")  # Debian policy 5.6.1: a package name
URL = re.compile(r"^(?:https?|file)://[A-Za-z0-9._~:/?#\[\]@!&'()*+,=%-]+$")
_UNSAFE = re.compile(r"[\s'\"`$;\\]")


def is_version(text: str) -> bool:
    """A public PEP 440 release like 2.5.1 or 0.4.35rc1 (no local part, no epoch)."""
    if not PEP440_STRICT.fullmatch(text):
        return False
    try:
        Version(text)
    except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
        return False
    return True


def is_url(text: str) -> bool:
    return bool(URL.fullmatch(text)) and not _UNSAFE.search(text)


def has_userinfo(url: str) -> bool:
    """`scheme://user[:password]@host/...`: credentials in a URL."""
    rest = url.split("://", 1)[1] if "://" in url else url
    return "@" in rest.split("/", 1)[0]


def is_index_url(text: str) -> bool:
    """A package index pip can use: http(s) with a host, or file:// with a path."""
    if not is_url(text):
        return False
    scheme, _, rest = text.partition("://")
    if scheme == "file":
        return rest.startswith("/")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    return bool(host) and not host.startswith(":")


def is_image_ref(text: str) -> bool:
    return len(text) <= 255 and bool(IMAGE_REF.fullmatch(text))
