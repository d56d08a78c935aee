"""Build settings from the host: pip sources (config files + PIP_*), CA bundle precedence, proxies.

Pure: every environment is an explicit mapping, every pip config file lives in tmp_path, and the
host's own config files and CA paths are patched out, so the machine running the tests is never read.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from builder.engine import settings
from builder.engine.settings import PROXY_VARS, BuildSettings, PipSources, pip_config_files, read_pip_sources, resolve
from builder.util.errors import UserError

PROXIES = {
    "HTTP_PROXY": "http://proxy.corp:3128",
    "HTTPS_PROXY": "http://proxy.corp:3129",
    "NO_PROXY": "localhost,.corp",
    "http_proxy": "http://lower.corp:3128",
    "https_proxy": "http://lower.corp:3129",
    "no_proxy": "127.0.0.1",
}


def _conf(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


TEST_CA = Path(__file__).parent / "fixtures" / "test-ca.pem"  # a real self-signed certificate: bundles are parsed


def _pem(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(TEST_CA.read_bytes())
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    """Existing local pip sources, plus paths that do not exist."""
    out = {
        "links": tmp_path / "wheels",
        "links2": tmp_path / "more-wheels",
        "index": tmp_path / "mirror" / "simple",
        "house": tmp_path / "house",
    }
    for path in out.values():
        path.mkdir(parents=True)
    out["missing"] = tmp_path / "missing"
    return out


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """resolve() reads no pip config file of this machine and finds no system CA file."""
    monkeypatch.setattr(settings, "pip_config_files", lambda env: [])
    monkeypatch.setattr(settings, "HOST_CA_FILES", (str(tmp_path / "no-system-ca.crt"),))
    return tmp_path


# -- pip config file lookup --------------------------------------------------------------------
def test_pip_config_files_in_pips_order(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_DIRS": f"{tmp_path}/xdg1:{tmp_path}/xdg2",
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "PIP_CONFIG_FILE": str(tmp_path / "env.conf"),
    }
    assert pip_config_files(env) == [
        tmp_path / "xdg1" / "pip" / "pip.conf",
        tmp_path / "xdg2" / "pip" / "pip.conf",
        Path("/etc/pip.conf"),
        tmp_path / "home" / ".pip" / "pip.conf",
        tmp_path / "cfg" / "pip" / "pip.conf",
        tmp_path / "env.conf",
    ]


def test_pip_config_files_defaults(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    assert pip_config_files(env) == [
        Path("/etc/xdg/pip/pip.conf"),
        Path("/etc/pip.conf"),
        tmp_path / ".pip" / "pip.conf",
        tmp_path / ".config" / "pip" / "pip.conf",
    ]


def test_pip_config_file_devnull_disables_all_config_files(tmp_path: Path, dirs: dict[str, Path]) -> None:
    """pip: PIP_CONFIG_FILE=os.devnull means no config file is loaded at all (pip/_internal/configuration.py)."""
    home = tmp_path / "home"
    _conf(home / ".config" / "pip" / "pip.conf", f"[global]\nindex-url = https://user.example/simple\nfind-links = {dirs['links']}\n")
    env = {"HOME": str(home), "XDG_CONFIG_DIRS": str(tmp_path / "no-xdg"), "PIP_CONFIG_FILE": os.devnull}
    assert read_pip_sources(env) == PipSources()


# -- read_pip_sources --------------------------------------------------------------------------
def test_global_section_index_extra_and_find_links(tmp_path: Path, dirs: dict[str, Path]) -> None:
    conf = _conf(
        tmp_path / "pip.conf",
        f"""\
        [global]
        index-url = https://mirror.corp/simple
        extra-index-url = https://extra.corp/simple
            file://{dirs["index"]}
            file://{dirs["missing"]}
            https://download.pytorch.org/whl/cpu
        find-links = {dirs["links"]}
            {dirs["missing"]}/links
        """,
    )
    assert read_pip_sources({}, [conf]) == PipSources(
        index_url="https://mirror.corp/simple",
        extra_index_urls=("https://extra.corp/simple", "https://download.pytorch.org/whl/cpu"),
        local_dirs=(dirs["index"], dirs["links"]),
    )


def test_no_files_no_env_gives_nothing(tmp_path: Path) -> None:
    assert read_pip_sources({}, []) == PipSources()
    assert read_pip_sources({}, [tmp_path / "absent.conf"]) == PipSources()


def test_install_section_is_read(tmp_path: Path) -> None:
    conf = _conf(tmp_path / "pip.conf", "[install]\nextra-index-url = https://install.corp/simple\n")
    assert read_pip_sources({}, [conf]) == PipSources(extra_index_urls=("https://install.corp/simple",))


def test_unrelated_sections_and_keys_are_ignored(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path / "pip.conf",
        "[global]\ncert = /etc/ssl/x.pem\ntimeout = 60\n[download]\nindex-url = https://download-only.corp/simple\n",
    )
    assert read_pip_sources({}, [conf]) == PipSources()


def test_later_file_wins(tmp_path: Path) -> None:
    first = _conf(tmp_path / "a.conf", "[global]\nindex-url = https://first.corp/simple\nextra-index-url = https://x.corp/simple\n")
    second = _conf(tmp_path / "b.conf", "[global]\nindex-url = https://second.corp/simple\n")
    assert read_pip_sources({}, [first, second]) == PipSources(
        index_url="https://second.corp/simple", extra_index_urls=("https://x.corp/simple",)
    )


def test_install_section_beats_global_section_of_a_later_file(tmp_path: Path) -> None:
    """pip orders by section before file: [global] < [install] < PIP_* (pip/_internal/cli/parser.py)."""
    user = _conf(tmp_path / "user.conf", "[install]\nindex-url = https://install.corp/simple\n")
    env_file = _conf(tmp_path / "env.conf", "[global]\nindex-url = https://global.corp/simple\n")
    assert read_pip_sources({}, [user, env_file]).index_url == "https://install.corp/simple"


def test_broken_config_file_is_skipped(tmp_path: Path) -> None:
    broken = _conf(tmp_path / "broken.conf", "index-url = https://no-section.corp/simple\n")
    good = _conf(tmp_path / "good.conf", "[global]\nindex-url = https://good.corp/simple\n")
    assert read_pip_sources({}, [good, broken]).index_url == "https://good.corp/simple"


def test_percent_encoded_credentials_in_config_are_read_verbatim(tmp_path: Path) -> None:
    """pip reads its files with RawConfigParser: `%40` (an @ in a password) is plain text."""
    conf = _conf(
        tmp_path / "pip.conf",
        "[global]\nindex-url = https://bot:p%40ss@mirror.corp/simple\nextra-index-url = https://bot:p%40ss@extra.corp/simple\n",
    )
    assert read_pip_sources({}, [conf]) == PipSources(
        index_url="https://bot:p%40ss@mirror.corp/simple", extra_index_urls=("https://bot:p%40ss@extra.corp/simple",)
    )


def test_env_overrides_files(tmp_path: Path, dirs: dict[str, Path]) -> None:
    conf = _conf(
        tmp_path / "pip.conf",
        f"[global]\nindex-url = https://file.corp/simple\nextra-index-url = https://file-extra.corp/simple\nfind-links = {dirs['links']}\n",
    )
    env = {
        "PIP_INDEX_URL": "https://env.corp/simple",
        "PIP_EXTRA_INDEX_URL": "https://env-a.corp/simple https://env-b.corp/simple",
        "PIP_FIND_LINKS": str(dirs["links2"]),
    }
    assert read_pip_sources(env, [conf]) == PipSources(
        index_url="https://env.corp/simple",
        extra_index_urls=("https://env-a.corp/simple", "https://env-b.corp/simple"),
        local_dirs=(dirs["links2"],),
    )


def test_empty_env_values_do_not_override(tmp_path: Path) -> None:
    conf = _conf(tmp_path / "pip.conf", "[global]\nindex-url = https://file.corp/simple\n")
    env = {"PIP_INDEX_URL": "", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": ""}
    assert read_pip_sources(env, [conf]) == PipSources(index_url="https://file.corp/simple")


def test_env_only(dirs: dict[str, Path]) -> None:
    env = {"PIP_EXTRA_INDEX_URL": f"https://a.corp/simple file://{dirs['index']}", "PIP_FIND_LINKS": f"{dirs['links']} {dirs['missing']}"}
    assert read_pip_sources(env, []) == PipSources(extra_index_urls=("https://a.corp/simple",), local_dirs=(dirs["index"], dirs["links"]))


def test_local_index_url_becomes_a_local_dir(dirs: dict[str, Path]) -> None:
    assert read_pip_sources({"PIP_INDEX_URL": f"file://{dirs['index']}"}, []) == PipSources(local_dirs=(dirs["index"],))
    assert read_pip_sources({"PIP_INDEX_URL": str(dirs["index"])}, []) == PipSources(local_dirs=(dirs["index"],))


def test_missing_local_index_url_is_dropped(dirs: dict[str, Path]) -> None:
    assert read_pip_sources({"PIP_INDEX_URL": f"file://{dirs['missing']}"}, []) == PipSources()
    assert read_pip_sources({"PIP_INDEX_URL": str(dirs["missing"])}, []) == PipSources()


def test_file_url_is_unquoted(tmp_path: Path) -> None:
    folder = tmp_path / "my wheels"
    folder.mkdir()
    assert read_pip_sources({"PIP_FIND_LINKS": f"file://{tmp_path}/my%20wheels"}, []).local_dirs == (folder,)


def test_a_file_is_not_a_local_dir(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    assert read_pip_sources({"PIP_FIND_LINKS": str(wheel)}, []) == PipSources()


def test_remote_find_links_is_not_an_extra_index(dirs: dict[str, Path]) -> None:
    env = {"PIP_FIND_LINKS": f"https://storage.corp/links.html {dirs['links']}"}
    assert read_pip_sources(env, []) == PipSources(local_dirs=(dirs["links"],))


def test_local_dirs_are_deduplicated(dirs: dict[str, Path]) -> None:
    env = {"PIP_EXTRA_INDEX_URL": f"file://{dirs['links']}", "PIP_FIND_LINKS": f"{dirs['links']} file://{dirs['links']}"}
    assert read_pip_sources(env, []).local_dirs == (dirs["links"],)


# -- resolve: CA bundle ------------------------------------------------------------------------
def test_ca_precedence(isolated: Path) -> None:
    cli, builder_env, matrix, host = (_pem(isolated / f"{n}.pem") for n in ("cli", "env", "matrix", "host"))
    env = {"BUILDER_CA_BUNDLE": str(builder_env), "PIP_CERT": str(host)}
    assert resolve(env, ca_bundle=str(cli), matrix_ca_bundle=str(matrix)).ca_bundle == cli
    assert resolve(env, matrix_ca_bundle=str(matrix)).ca_bundle == builder_env
    assert resolve({"PIP_CERT": str(host)}, matrix_ca_bundle=str(matrix)).ca_bundle == matrix
    assert resolve({"PIP_CERT": str(host)}).ca_bundle == host
    assert resolve({}).ca_bundle is None


def test_host_ca_variables_in_order(isolated: Path) -> None:
    pip_cert, requests_ca, ssl_file = (_pem(isolated / f"{n}.pem") for n in ("pip", "requests", "ssl"))
    env = {"PIP_CERT": str(pip_cert), "REQUESTS_CA_BUNDLE": str(requests_ca), "SSL_CERT_FILE": str(ssl_file)}
    assert resolve(env).ca_bundle == pip_cert
    assert resolve({k: v for k, v in env.items() if k != "PIP_CERT"}).ca_bundle == requests_ca
    assert resolve({"SSL_CERT_FILE": str(ssl_file)}).ca_bundle == ssl_file


def test_host_ca_variable_naming_a_missing_file_is_skipped(isolated: Path) -> None:
    ssl_file = _pem(isolated / "ssl.pem")
    env = {"PIP_CERT": str(isolated / "gone.pem"), "REQUESTS_CA_BUNDLE": str(isolated), "SSL_CERT_FILE": str(ssl_file)}
    assert resolve(env).ca_bundle == ssl_file


def test_system_bundle_paths() -> None:
    assert settings.HOST_CA_FILES[0] == "/etc/ssl/certs/ca-certificates.crt"
    assert settings.HOST_CA_ENV[:3] == ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


def test_host_ca_falls_back_to_the_system_bundle(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = _pem(isolated / "etc" / "ca-certificates.crt")
    monkeypatch.setattr(settings, "HOST_CA_FILES", (str(isolated / "absent.crt"), str(system)))
    assert resolve({}).ca_bundle == system
    assert resolve({"PIP_CERT": str(isolated / "gone.pem")}).ca_bundle == system


def test_no_host_settings_takes_no_ca_and_no_pip_sources(isolated: Path, dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    host_ca = _pem(isolated / "host.pem")
    conf = _conf(isolated / "pip.conf", "[global]\nindex-url = https://file.corp/simple\n")
    monkeypatch.setattr(settings, "pip_config_files", lambda env: [conf])
    monkeypatch.setattr(settings, "HOST_CA_FILES", (str(host_ca),))
    env = {
        "PIP_CERT": str(host_ca),
        "SSL_CERT_FILE": str(host_ca),
        "PIP_INDEX_URL": "https://env.corp/simple",
        "PIP_EXTRA_INDEX_URL": "https://env-extra.corp/simple",
        "PIP_FIND_LINKS": str(dirs["links"]),
    }
    assert resolve(env, use_host=False) == BuildSettings()
    # ...while the same host is used by default
    with_host = resolve(env)
    assert with_host.ca_bundle == host_ca
    assert with_host.pip == PipSources(
        index_url="https://env.corp/simple", extra_index_urls=("https://env-extra.corp/simple",), local_dirs=(dirs["links"],)
    )


def test_no_host_settings_still_honours_explicit_settings(isolated: Path, dirs: dict[str, Path]) -> None:
    cli = _pem(isolated / "cli.pem")
    got = resolve(
        {"PIP_INDEX_URL": "https://env.corp/simple"},
        ca_bundle=str(cli),
        use_host=False,
        wheelhouse=(str(dirs["house"]),),
        index_url="https://cli.corp/simple",
        extra_index_urls=("https://cli-extra.corp/simple",),
    )
    assert got == BuildSettings(
        ca_bundle=cli,
        pip=PipSources(
            index_url="https://cli.corp/simple", extra_index_urls=("https://cli-extra.corp/simple",), local_dirs=(dirs["house"],)
        ),
    )


@pytest.mark.parametrize("source", ["cli", "env", "matrix"])
def test_missing_ca_bundle_is_a_user_error(isolated: Path, source: str) -> None:
    missing = str(isolated / "nope.pem")
    kwargs = {"cli": {"ca_bundle": missing}, "env": {}, "matrix": {"matrix_ca_bundle": missing}}[source]
    env = {"BUILDER_CA_BUNDLE": missing} if source == "env" else {}
    with pytest.raises(UserError, match=r"CA bundle '.*nope\.pem' does not exist"):
        resolve(env, **kwargs)  # type: ignore[arg-type]


def test_ca_bundle_folder_is_a_user_error(isolated: Path) -> None:
    with pytest.raises(UserError, match="is a folder; give the PEM file inside it"):
        resolve({}, ca_bundle=str(isolated))


@pytest.mark.parametrize(
    "content", [b"", b"garbage\n", b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", b"\xff\xfe"]
)
def test_a_ca_bundle_without_certificates_is_refused_before_any_build(isolated: Path, content: bytes) -> None:
    bundle = isolated / "bad.pem"
    bundle.write_bytes(content)
    with pytest.raises(UserError, match="holds no usable PEM certificates"):
        resolve({}, ca_bundle=str(bundle))


@pytest.mark.parametrize("url", ["not-a-url", "ftp://mirror/simple", "https://", "http:///simple", "file://relative/x", "https://a b/"])
def test_index_urls_must_be_http_or_file(url: str) -> None:
    with pytest.raises(UserError, match="is not a package index URL"):
        resolve({}, use_host=False, index_url=url)
    with pytest.raises(UserError, match="--extra-index-url"):
        resolve({}, use_host=False, extra_index_urls=(url,))


def test_a_bad_index_url_in_the_host_pip_config_names_its_source(isolated: Path) -> None:
    with pytest.raises(UserError, match="the host's pip configuration"):
        resolve({"PIP_INDEX_URL": "htps://mirror.corp/simple", "PIP_CONFIG_FILE": "/dev/null"})


def test_credentials_never_reach_the_url_error() -> None:
    with pytest.raises(UserError) as caught:
        resolve({}, use_host=False, index_url="ftp://ci:s3cret@mirror/simple")
    assert "s3cret" not in str(caught.value)


def test_explicit_missing_ca_is_an_error_even_when_the_host_has_one(isolated: Path) -> None:
    host = _pem(isolated / "host.pem")
    with pytest.raises(UserError):
        resolve({"PIP_CERT": str(host)}, ca_bundle=str(isolated / "nope.pem"))


# -- resolve: pip sources ----------------------------------------------------------------------
def test_wheelhouse_must_be_a_folder(isolated: Path, dirs: dict[str, Path]) -> None:
    a_file = isolated / "wheel.whl"
    a_file.write_bytes(b"PK")
    for bad in (a_file, dirs["missing"]):
        with pytest.raises(UserError, match=r"wheelhouse .* is not a folder"):
            resolve({}, wheelhouse=(str(dirs["house"]), str(bad)))


def test_wheelhouses_come_before_host_dirs_without_duplicates(isolated: Path, dirs: dict[str, Path]) -> None:
    env = {"PIP_FIND_LINKS": f"{dirs['links']} {dirs['house']}"}
    got = resolve(env, wheelhouse=(str(dirs["house"]), str(dirs["links2"])))
    assert got.pip.local_dirs == (dirs["house"], dirs["links2"], dirs["links"])


def test_cli_index_overrides_host_and_extras_merge(isolated: Path) -> None:
    env = {"PIP_INDEX_URL": "https://host.corp/simple", "PIP_EXTRA_INDEX_URL": "https://shared.corp/simple https://host-extra.corp/simple"}
    got = resolve(
        env, index_url="https://cli.corp/simple", extra_index_urls=("https://cli-extra.corp/simple", "https://shared.corp/simple")
    )
    assert got.pip == PipSources(
        index_url="https://cli.corp/simple",
        extra_index_urls=("https://cli-extra.corp/simple", "https://shared.corp/simple", "https://host-extra.corp/simple"),
    )
    assert resolve(env).pip.index_url == "https://host.corp/simple"


# -- resolve: proxies --------------------------------------------------------------------------
def test_proxy_vars_are_dockers_predefined_six() -> None:
    assert set(PROXY_VARS) == set(PROXIES)
    assert len(PROXY_VARS) == 6


def test_only_proxy_variables_become_build_args(isolated: Path, dirs: dict[str, Path]) -> None:
    env = {
        **PROXIES,
        "PIP_INDEX_URL": "https://bot:secret@mirror.corp/simple",
        "PIP_EXTRA_INDEX_URL": "https://extra.corp/simple",
        "PIP_FIND_LINKS": str(dirs["links"]),
        "PIP_CERT": str(isolated / "gone.pem"),
        "FTP_PROXY": "http://ftp.corp:21",
        "ALL_PROXY": "socks5://all.corp:1080",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "GITHUB_TOKEN": "ghp_x",
        "HOME": "/root",
    }
    got = resolve(env)
    assert got.build_args == PROXIES
    assert got.proxies == tuple(PROXIES.items())


def test_unset_or_empty_proxies_are_not_passed(isolated: Path) -> None:
    assert resolve({"HTTP_PROXY": "", "https_proxy": "http://p.corp:3128"}).build_args == {"https_proxy": "http://p.corp:3128"}
    assert resolve({"PIP_INDEX_URL": "https://mirror.corp/simple"}).build_args == {}


def test_build_args_of_default_settings_are_empty() -> None:
    assert BuildSettings().build_args == {}


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://[::1/simple", "https://mirror:99999/simple", "https://mirror:0/simple", "file://[::1/x"]
)
def test_index_urls_urllib_cannot_parse_are_refused_in_one_line(url: str) -> None:
    with pytest.raises(UserError, match="is not a package index URL") as bad:
        resolve({}, use_host=False, index_url=url)
    assert "\n" not in str(bad.value)
    resolve({}, use_host=False, index_url="http://[::1]:8080/simple/")  # a bracketed IPv6 host is fine


def test_a_malformed_url_in_the_host_pip_config_is_one_line_not_a_traceback(isolated: Path) -> None:
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        env = {key: "file://[::1/wheels", "PIP_CONFIG_FILE": "/dev/null"}
        if key == "PIP_FIND_LINKS":
            assert resolve(env).pip.local_dirs == ()  # a find-links that is no folder is not used
            continue
        with pytest.raises(UserError, match="the host's pip configuration"):
            resolve(env)


def test_an_email_user_name_and_its_password_never_reach_the_url_error() -> None:
    with pytest.raises(UserError) as caught:
        resolve({}, use_host=False, index_url="ftp://me@corp.example:s3cretPW@mirror/simple")
    assert "s3cretPW" not in str(caught.value) and "corp.example" not in str(caught.value)


@pytest.mark.timeout(20)
def test_a_pip_config_that_is_a_fifo_or_too_big_is_skipped_not_waited_on(tmp_path: Path) -> None:
    """Found by the second hostile pass: PIP_CONFIG_FILE naming a FIFO (or /dev/zero) hung `builder
    lock` for ever. Like /dev/null, a file that is no config file is no configuration."""
    fifo = tmp_path / "pip.fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.conf"
    huge.write_text("[global]\nindex-url = https://huge.example/simple\n" + "#" * (settings.PIP_CONFIG_LIMIT + 1), encoding="utf-8")
    good = _conf(tmp_path / "pip.conf", "[global]\nextra-index-url = https://extra.corp/simple\n")
    assert read_pip_sources({}, [fifo, huge, good]) == PipSources(extra_index_urls=("https://extra.corp/simple",))
    assert (
        read_pip_sources({"PIP_CONFIG_FILE": str(fifo), "HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "x")})
        == PipSources()
    )
