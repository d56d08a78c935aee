"""Load and validate matrix.yaml into a `Matrix` record.

Every problem is a `UserError` naming the file, the line and the fix. Values that end up in a
Dockerfile are checked against `builder.grammar` here, before anything is planned or rendered.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from packaging.version import Version

from builder.compat.rules import names as framework_names
from builder.model.plan import AMD64, PLATFORMS, VENDORS, Base, Matrix, Newest, Rule
from builder.spec import grammar
from builder.util.errors import UserError
from builder.util.query import is_glob, value_matches
from builder.util.text import printable
from builder.util.yamlsrc import LDict, LList, load

TOP_KEYS = (
    "registry", "defaults", "bases", "python", "frameworks", "stacks", "exclude", "include", "indexes", "build", "source", "unlocked",
    "cuda_exceptions", "keep_older_gpus", "newest", "canonical_layers", "line_layers",
)  # fmt: skip
REQUIRED_TOP = ("registry", "bases", "python", "frameworks", "stacks")
BASE_KEYS = ("vendor", "version", "os", "image", "digest", "bootstrap", "platforms", "packages")
BOOTSTRAPS = ("debootstrap",)
RULE_FIELDS = ("base", "stack", "python", "vendor", "platform")  # and every framework of the registry in force
BUILD_KEYS = ("ca_bundle",)
ROCM_DEBIAN = ("debian13",)  # the Debian releases with a ROCm user space of their own (5.7.1 in trixie)
MAX_COMBINATIONS = 100_000  # planning more is a mistake: every combination is decided and listed


def rule_keys() -> tuple[str, ...]:
    """What an include/exclude entry may name: the fields, and each framework of the registry in force."""
    return (*RULE_FIELDS, *framework_names())


class _Ctx:
    """The file being validated; turns (message, line) into UserErrors."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, message: str, line: int) -> UserError:
        return UserError(message, self.file, line)

    def mapping(self, value: Any, what: str, line: int) -> LDict:
        if not isinstance(value, LDict):
            raise self.fail(f"{what} must be a mapping (key: value lines)", getattr(value, "line", line))
        return value

    def seq(self, value: Any, what: str, line: int) -> LList:
        if not isinstance(value, LList):
            raise self.fail(f'{what} must be a list, e.g. ["a", "b"]', getattr(value, "line", line))
        return value

    def keys(self, mapping: LDict, allowed: Iterable[str], what: str) -> None:
        allowed = tuple(allowed)
        for key in mapping:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"allowed: {', '.join(allowed)}"
                raise self.fail(f"unknown key {key!r} in {what}; {hint}", mapping.line_of(key))

    def text(self, value: Any, what: str, line: int, check: Callable[[str], object], example: str) -> str:
        if isinstance(value, bool) or value is None or isinstance(value, (LDict, LList)):
            raise self.fail(f"{what} must be a quoted string like {example}", line)
        if isinstance(value, float):
            typed = getattr(value, "source", str(value))
            raise self.fail(f'{what} {typed} was read as a number; quote it: "{typed}" (e.g. {example})', line)
        text = str(value)
        if not check(text):
            raise self.fail(f"{what} {printable(text, 60)!r} is not valid; expected something like {example}", line)
        return text


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file; raises UserError (file:line: fix) on any problem."""
    display = _display(path)
    doc = load(path, display)
    ctx = _Ctx(display)
    if doc is None:
        raise ctx.fail("the file is empty; start from the example in docs/matrix.md", 1)
    top = ctx.mapping(doc, "the top level", 1)
    ctx.keys(top, TOP_KEYS, "the top level")
    for key in REQUIRED_TOP:
        if key not in top:
            raise ctx.fail(f"missing required key '{key}'; see docs/matrix.md", top.line)

    registry = ctx.text(top["registry"], "registry", top.line_of("registry"), grammar.REPOSITORY.fullmatch, "ghcr.io/acme/gpu-images")
    bases = _bases(ctx, ctx.mapping(top["bases"], "bases", top.line_of("bases")))
    pythons = _pythons(ctx, ctx.seq(top["python"], "python", top.line_of("python")))
    frameworks = _frameworks(ctx, ctx.mapping(top["frameworks"], "frameworks", top.line_of("frameworks")))
    stacks = _stacks(ctx, ctx.mapping(top["stacks"], "stacks", top.line_of("stacks")), dict(frameworks))
    names = {"base": {b.name for b in bases}, "stack": {s for s, _ in stacks}, "platform": set(PLATFORMS)}
    exclude = _rules(ctx, top.get("exclude"), top.line_of("exclude"), "exclude", names)
    include = _rules(ctx, top.get("include"), top.line_of("include"), "include", names)
    newest = _newest(ctx, top.get("newest"), top.line_of("newest"), names)
    for rule in include:
        _check_include(ctx, rule, dict(stacks), dict(frameworks), {b.name: b for b in bases})
    default_select = _defaults(ctx, top)
    indexes = _indexes(ctx, top.get("indexes"), top.line_of("indexes"))
    ca_bundle = _build(ctx, top.get("build"), top.line_of("build"), path.parent)
    source = "https://github.com/example/gpu-images"
    if "source" in top:
        source = ctx.text(top["source"], "source", top.line_of("source"), grammar.is_url, "https://github.com/acme/gpu-images")
        _no_credentials(ctx, source, "source", top.line_of("source"))
    matrix = Matrix(
        path=display,
        registry=registry,
        default_select=default_select,
        bases=bases,
        python=pythons,
        frameworks=frameworks,
        stacks=stacks,
        exclude=exclude,
        include=include,
        newest=newest,
        index_urls=indexes,
        ca_bundle=ca_bundle,
        source=source,
        unlocked=_unlocked(ctx, top.get("unlocked"), top.line_of("unlocked")),
        cuda_exceptions=_policies(
            ctx,
            top.get("cuda_exceptions"),
            top.line_of("cuda_exceptions"),
            "cuda_exceptions",
            "which images, and why their CUDA wheels may leave the base's CUDA minor",
        ),
        keep_older_gpus=_policies(
            ctx,
            top.get("keep_older_gpus"),
            top.line_of("keep_older_gpus"),
            "keep_older_gpus",
            "which images keep the cuDNN that still runs on older GPUs, and why",
        ),
        canonical_layers=_policies(
            ctx,
            top.get("canonical_layers"),
            top.line_of("canonical_layers"),
            "canonical_layers",
            "which locked images get their venv as a canonical layer made on the build host, and why",
        ),
        line_layers=_policies(
            ctx,
            top.get("line_layers"),
            top.line_of("line_layers"),
            "line_layers",
            "which CUDA-from-wheels images share their line's NVIDIA wheels as one layer, and why",
        ),
    )
    _bounded(ctx, matrix, top.line_of("bases"))
    return matrix


def _bounded(ctx: _Ctx, matrix: Matrix, line: int) -> None:
    from builder.spec.expand import combination_count  # local import: expand depends on records only

    count = combination_count(matrix) + len(matrix.include)
    if count > MAX_COMBINATIONS:
        raise ctx.fail(
            f"the matrix expands to {count:,} combinations (bases x pythons x framework versions per stack), more than "
            f"{MAX_COMBINATIONS:,}; narrow it (fewer bases, Pythons or versions) or split it into several matrix files",
            line,
        )


def _no_credentials(ctx: _Ctx, url: str, what: str, line: int) -> None:
    """matrix.yaml is committed and its URLs are rendered into images/: no user:password@ in them."""
    if grammar.has_userinfo(url):
        raise ctx.fail(
            f"{what} carries credentials (user:password@ in the URL); matrix.yaml is committed and rendered into images/: "
            "remove them and give them at build time (--index-url, pip config, ~/.netrc)",
            line,
        )


def _display(path: Path) -> str:
    """The path as people should read it in messages: relative to the working folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _bases(ctx: _Ctx, bases: LDict) -> tuple[Base, ...]:
    if not bases:
        raise ctx.fail("bases is empty; declare at least one base", bases.line)
    out = []
    for name, spec in bases.items():
        line = bases.line_of(name)
        if not grammar.NAME.fullmatch(name):
            raise ctx.fail(f"base name {name!r} must be lowercase letters, digits, '.', '_' or '-'", line)
        spec = ctx.mapping(spec, f"base '{name}'", line)
        ctx.keys(spec, BASE_KEYS, f"base '{name}'")
        if "vendor" not in spec:
            raise ctx.fail(f"base '{name}' needs 'vendor: cuda|rocm|cpu'", line)
        vendor = spec["vendor"]
        if vendor not in VENDORS:
            close = difflib.get_close_matches(str(vendor), VENDORS, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "use cuda, rocm or cpu"
            raise ctx.fail(f"base '{name}': unknown vendor {vendor!r}; {hint}", spec.line_of("vendor"))
        if "os" not in spec:
            raise ctx.fail(f"base '{name}' needs 'os:' (e.g. ubuntu22.04, debian12)", line)
        os_ = ctx.text(spec["os"], f"base '{name}' os", spec.line_of("os"), grammar.OS.fullmatch, "ubuntu22.04")
        version = None
        if vendor in ("cuda", "rocm"):
            if "version" not in spec:
                raise ctx.fail(f"base '{name}' ({vendor}) needs 'version:' (e.g. \"12.4.1\")", line)
            version = ctx.text(
                spec["version"], f"base '{name}' version", spec.line_of("version"), grammar.ACCEL_VERSION.fullmatch, '"12.4.1"'
            )
        elif "version" in spec:
            raise ctx.fail(f"base '{name}' is a cpu base; remove 'version:' (only cuda/rocm bases have one)", spec.line_of("version"))
        bootstrap = spec.get("bootstrap")
        image = spec.get("image")
        if bootstrap is not None:
            if bootstrap not in BOOTSTRAPS:
                raise ctx.fail(f"base '{name}': unknown bootstrap {bootstrap!r}; supported: debootstrap", spec.line_of("bootstrap"))
            if image is not None:
                raise ctx.fail(f"base '{name}' has both 'image' and 'bootstrap'; keep one", spec.line_of("image"))
            if not os_.startswith("debian") or (vendor == "rocm" and os_ not in ROCM_DEBIAN):
                raise ctx.fail(
                    f"base '{name}': debootstrap builds Debian bases for cpu images, CUDA from wheels (os: debian12, debian13) and "
                    f"Debian's own ROCm user space (vendor: rocm, os: {', '.join(ROCM_DEBIAN)}); another ROCm needs a rocm/* base image",
                    spec.line_of("bootstrap"),
                )
        elif image is None:
            raise ctx.fail(
                f"base '{name}' needs 'image:' (e.g. nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04) or 'bootstrap: debootstrap'", line
            )
        else:
            image = ctx.text(
                image, f"base '{name}' image", spec.line_of("image"), grammar.is_image_ref, "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"
            )
        digest = None
        if "digest" in spec:
            digest = ctx.text(
                spec["digest"], f"base '{name}' digest", spec.line_of("digest"), grammar.DIGEST.fullmatch, '"sha256:<64 hex digits>"'
            )
            if bootstrap is not None:
                raise ctx.fail(
                    f"base '{name}' is bootstrapped locally; a digest pin applies to registry images only", spec.line_of("digest")
                )
        platforms = _platforms(ctx, spec, name)
        packages = _packages(ctx, spec, name, bootstrap)
        if vendor == "rocm" and bootstrap is not None and not packages:
            raise ctx.fail(
                f"base '{name}' is a bootstrapped ROCm base: list its Debian ROCm packages under 'packages:' (e.g. [libamdhip64-5])",
                spec.line_of("bootstrap"),
            )
        out.append(
            Base(
                name=name,
                vendor=vendor,
                os=os_,
                version=version,
                image=image,
                digest=digest,
                bootstrap=bootstrap,
                line=line,
                platforms=platforms,
                packages=packages,
            )
        )
    return tuple(out)


def _packages(ctx: _Ctx, spec: LDict, name: str, bootstrap: str | None) -> tuple[str, ...]:
    """`packages: [libamdhip64-5]`: Debian packages a bootstrapped base adds to those every base has (its
    recipe, so another local tag); they reach debootstrap's command line, so each is a Debian package name."""
    if "packages" not in spec:
        return ()
    if bootstrap is None:
        raise ctx.fail(
            f"base '{name}' is an image base; 'packages:' adds Debian packages to a bootstrapped base only (put them in your image)",
            spec.line_of("packages"),
        )
    items = ctx.seq(spec["packages"], f"base '{name}' packages", spec.line_of("packages"))
    out = [
        ctx.text(v, f"base '{name}' package", items.line_of(i), grammar.DEB_PACKAGE.fullmatch, "libamdhip64-5") for i, v in enumerate(items)
    ]
    if len(set(out)) != len(out):
        raise ctx.fail(f"base '{name}' packages lists a package twice", items.line)
    return tuple(sorted(out))


def _platforms(ctx: _Ctx, spec: LDict, name: str) -> tuple[str, ...]:
    """`platforms: [linux/amd64, linux/arm64]`: the platforms a base exists for; linux/amd64 alone when absent."""
    if "platforms" not in spec:
        return (AMD64,)
    items = ctx.seq(spec["platforms"], f"base '{name}' platforms", spec.line_of("platforms"))
    if not items:
        raise ctx.fail(f"base '{name}' platforms is empty; list at least one of {', '.join(PLATFORMS)}", items.line)
    out = []
    for i, value in enumerate(items):
        if not isinstance(value, str) or value not in PLATFORMS:
            close = difflib.get_close_matches(str(value), PLATFORMS, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"supported: {', '.join(PLATFORMS)}"
            raise ctx.fail(f"base '{name}': unknown platform {value!r}; {hint}", items.line_of(i))
        out.append(value)
    _no_repeats(ctx, out, items, f"base '{name}' platforms")
    return tuple(sorted(out, key=PLATFORMS.index))


def _pythons(ctx: _Ctx, items: LList) -> tuple[str, ...]:
    if not items:
        raise ctx.fail('python is empty; list at least one version, e.g. ["3.11"]', items.line)
    out = [ctx.text(v, "python version", items.line_of(i), grammar.PYTHON.fullmatch, '"3.11"') for i, v in enumerate(items)]
    _no_repeats(ctx, out, items, "python")
    return tuple(out)


def _no_repeats(ctx: _Ctx, values: list[str], items: LList, what: str) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise ctx.fail(f"{what} lists {value!r} twice; remove one", items.line_of(i))
        seen.add(value)


def _frameworks(ctx: _Ctx, frameworks: LDict) -> tuple[tuple[str, tuple[str, ...]], ...]:
    ctx.keys(frameworks, framework_names(), "frameworks")
    out = []
    for name, versions in frameworks.items():
        items = ctx.seq(versions, f"frameworks.{name}", frameworks.line_of(name))
        if not items:
            raise ctx.fail(f"frameworks.{name} is empty; list a version or remove the key", frameworks.line_of(name))
        values = [ctx.text(v, f"{name} version", items.line_of(i), grammar.is_version, '"2.5.1"') for i, v in enumerate(items)]
        _no_repeats(ctx, values, items, f"frameworks.{name}")
        _one_spelling(ctx, values, items, f"frameworks.{name}")
        out.append((name, tuple(values)))
    return tuple(out)


def _one_spelling(ctx: _Ctx, values: list[str], items: LList, what: str) -> None:
    """2.14.2, 2.14.2.0 and 2.14.02 are one release to pip (PEP 440) but three image ids, tags and
    builds: a release is listed once. The spelling to keep is the one already in normal form."""
    first: dict[Version, int] = {}
    for i, value in enumerate(values):
        release = Version(value)
        if release in first:
            j = first[release]
            spellings = [values[j], value]
            keep = next((v for v in spellings if str(Version(v)) == v), str(release))
            raise ctx.fail(
                f"{what} lists {value!r} and {values[j]!r} (line {items.line_of(j)}), one release by PEP 440; keep {keep!r} and remove the other",
                items.line_of(i),
            )
        first[release] = i


def _stacks(ctx: _Ctx, stacks: LDict, frameworks: dict[str, tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not stacks:
        raise ctx.fail("stacks is empty; e.g. stacks: {torch: [torch]}", stacks.line)
    out = []
    for name, members in stacks.items():
        line = stacks.line_of(name)
        if not grammar.NAME.fullmatch(name):
            raise ctx.fail(f"stack name {name!r} must be lowercase letters, digits, '.', '_' or '-'", line)
        items = ctx.seq(members, f"stack '{name}'", line)
        if not items:
            raise ctx.fail(f"stack '{name}' is empty; list its frameworks", line)
        for i, member in enumerate(items):
            known = framework_names()
            if member not in known:
                close = difflib.get_close_matches(str(member), known, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
                raise ctx.fail(f"stack '{name}': unknown framework {member!r}; {hint}", items.line_of(i))
            if member not in frameworks:
                raise ctx.fail(
                    f"stack '{name}' uses {member} but frameworks.{member} lists no versions; add it under frameworks:", items.line_of(i)
                )
        _no_repeats(ctx, [str(m) for m in items], items, f"stack '{name}'")
        out.append((name, tuple(str(m) for m in items)))
    return tuple(out)


def _rules(ctx: _Ctx, value: Any, line: int, what: str, names: dict[str, set[str]]) -> tuple[Rule, ...]:
    if value is None:
        return ()
    items = ctx.seq(value, what, line)
    out = []
    for i, item in enumerate(items):
        rule = ctx.mapping(item, f"{what} entry", items.line_of(i))
        ctx.keys(rule, rule_keys(), f"an {what} entry")
        out.append(_rule(ctx, rule, what, names))
    return tuple(out)


def _rule(ctx: _Ctx, rule: LDict, what: str, names: dict[str, set[str]]) -> Rule:
    """One include/exclude/newest selector: known keys checked by the caller, each value a name the matrix has."""
    if not rule:
        raise ctx.fail(f"empty {what} entry; name at least one of {', '.join(rule_keys())}", rule.line)
    fields = []
    for key, raw in rule.items():
        kline = rule.line_of(key)
        text = ctx.text(raw, f"{what}.{key}", kline, lambda t: bool(t) and not any(c in t for c in " \n'\"`$;\\"), '"2.5.1"')
        if key in names and not is_glob(text) and not any(value_matches(text, name) for name in names[key]):
            close = difflib.get_close_matches(text, sorted(names[key]), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(sorted(names[key]))}"
            raise ctx.fail(f"{what} names unknown {key} '{text}'; {hint}", kline)
        if key == "vendor" and text not in VENDORS:
            raise ctx.fail(f"{what} names unknown vendor '{text}'; use cuda, rocm or cpu", kline)
        fields.append((key, text))
    return Rule(fields=tuple(fields), line=rule.line, key_lines=tuple((k, rule.line_of(k)) for k, _ in fields))


def _newest(ctx: _Ctx, value: Any, line: int, names: dict[str, set[str]]) -> tuple[Newest, ...]:
    """`newest: [{base: local-debian13, releases: 1}]`: a selector (the keys of an exclude entry) and
    how many of each framework's newest releases that install there to plan (spec/newest.py)."""
    if value is None:
        return ()
    items = ctx.seq(value, "newest", line)
    out = []
    for i, item in enumerate(items):
        entry = ctx.mapping(item, "newest entry", items.line_of(i))
        ctx.keys(entry, (*rule_keys(), "releases"), "a newest entry")
        if "releases" not in entry:
            raise ctx.fail("a newest entry needs 'releases: N' (how many of each framework's newest releases to plan, e.g. 1)", entry.line)
        count = entry["releases"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ctx.fail(f"newest.releases must be a whole number of at least 1 (e.g. 1), not {count!r}", entry.line_of("releases"))
        selector = LDict((k, v) for k, v in entry.items() if k != "releases")
        selector.line, selector.key_lines = entry.line, {k: n for k, n in entry.key_lines.items() if k != "releases"}
        out.append(Newest(rule=_rule(ctx, selector, "newest", names), releases=count))
    return tuple(out)


def _check_include(
    ctx: _Ctx, rule: Rule, stacks: dict[str, tuple[str, ...]], frameworks: dict[str, tuple[str, ...]], bases: dict[str, Base]
) -> None:
    keys = dict(rule.fields)
    for key in ("base", "stack", "python"):
        if key not in keys or any(c in keys[key] for c in "*?["):
            raise ctx.fail(f"an include entry needs an exact '{key}:' (it adds one combination)", rule.line_of(key))
    platform = keys.get("platform", AMD64)
    if platform not in bases[keys["base"]].platforms:
        raise ctx.fail(
            f"include is for {platform}, which base '{keys['base']}' does not declare (platforms: "
            f"{', '.join(bases[keys['base']].platforms)}); add it to the base's platforms or name one it has",
            rule.line_of("platform"),
        )
    if not grammar.PYTHON.fullmatch(keys["python"]):
        raise ctx.fail(f'include python {keys["python"]!r} is not valid; expected like "3.11"', rule.line_of("python"))
    for member in stacks[keys["stack"]]:
        if member not in keys:
            raise ctx.fail(f"include for stack '{keys['stack']}' needs '{member}: \"<version>\"'", rule.line)
        if not grammar.is_version(keys[member]):
            raise ctx.fail(
                f'include {member} version {printable(keys[member], 60)!r} is not valid; expected like "2.5.1"', rule.line_of(member)
            )
        listed = next((v for v in frameworks.get(member, ()) if Version(v) == Version(keys[member]) and v != keys[member]), None)
        if listed is not None:
            raise ctx.fail(
                f"include {member} {keys[member]!r} is frameworks.{member}'s {listed!r} spelled another way; write {listed!r}",
                rule.line_of(member),
            )
    extra = sorted(set(keys) - {"base", "stack", "python", "platform", *stacks[keys["stack"]]})
    if extra:
        raise ctx.fail(f"include names {', '.join(extra)}, which stack '{keys['stack']}' does not have; remove it", rule.line_of(extra[0]))


def _defaults(ctx: _Ctx, top: LDict) -> tuple[tuple[str, int], ...]:
    """`defaults.select`: one select expression, or a list of them meaning their union; each
    (expression, its line), checked here so a typo fails at load with its own line."""
    if "defaults" not in top:
        return ()
    defaults = ctx.mapping(top["defaults"], "defaults", top.line_of("defaults"))
    ctx.keys(defaults, ("select",), "defaults")
    if "select" not in defaults:
        return ()
    value, line = defaults["select"], defaults.line_of("select")
    example = '"base=local-debian12" or a list of such expressions (their union)'
    if isinstance(value, LList):
        if not value:
            raise ctx.fail(f"defaults.select is an empty list; give {example}, or remove it to select everything", line)
        entries = [(item, value.line_of(i)) for i, item in enumerate(value)]
    else:
        entries = [(value, line)]
    from builder.spec.select import parse_select  # local import: select depends on records only

    out: dict[str, int] = {}
    for item, item_line in entries:
        text = ctx.text(item, "defaults.select", item_line, lambda t: True, example)
        try:
            parse_select(text)
        except UserError as exc:
            raise ctx.fail(f"defaults.select: {exc.message}", item_line) from None
        if not text.strip():
            if len(entries) == 1 and not isinstance(value, LList):
                return ()  # `select: ""`: no default, as if the key were absent (everything)
            raise ctx.fail(f"defaults.select has an empty expression in its list, which would select everything; give {example}", item_line)
        if text in out:
            raise ctx.fail(f"defaults.select lists {text!r} twice (lines {out[text]} and {item_line}); remove one", item_line)
        out[text] = item_line
    return tuple(out.items())


def _indexes(ctx: _Ctx, value: Any, line: int) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    indexes = ctx.mapping(value, "indexes", line)
    out = []
    for key, url in indexes.items():
        kline = indexes.line_of(key)
        if not key.startswith(tuple(f"{f}-" for f in framework_names())):
            raise ctx.fail(f"indexes key {key!r}: use '<framework>-<variant>' like torch-cu124 or torch-* (globs allowed)", kline)
        text = ctx.text(
            url,
            f"indexes.{key}",
            kline,
            lambda t: grammar.is_url(t.replace("{variant}", "variant")),
            "https://mirror.example.com/pytorch/{variant}",
        )
        _no_credentials(ctx, text, f"indexes.{key}", kline)
        out.append((key, text))
    return tuple(out)


def _build(ctx: _Ctx, value: Any, line: int, root: Path) -> str | None:
    if value is None:
        return None
    build = ctx.mapping(value, "build", line)
    ctx.keys(build, BUILD_KEYS, "build")
    if "ca_bundle" not in build:
        return None
    text = ctx.text(
        build["ca_bundle"], "build.ca_bundle", build.line_of("ca_bundle"), lambda t: bool(t), "/etc/ssl/certs/ca-certificates.crt"
    )
    path = Path(text) if Path(text).is_absolute() else root / text
    if not path.is_file():
        raise ctx.fail(f"build.ca_bundle {text!r} does not exist; give a PEM file path", build.line_of("ca_bundle"))
    return str(path)


def _unlocked(ctx: _Ctx, value: Any, line: int) -> tuple[tuple[str, str, int], ...]:
    """`unlocked:` entries: images that may build without a lock, each with the reason."""
    return _policies(ctx, value, line, "unlocked", "which images, and why they cannot be locked")


def _policies(ctx: _Ctx, value: Any, line: int, key: str, what: str) -> tuple[tuple[str, str, int], ...]:
    """A list of `{select, reason}` entries (`unlocked:`, `cuda_exceptions:`): which images a policy
    covers and why, each select checked here so a typo fails at load with its line."""
    if value is None:
        return ()
    from builder.spec.select import parse_select  # local import: select depends on records only

    out = []
    items = ctx.seq(value, key, line)
    for i, item in enumerate(items):
        entry = ctx.mapping(item, f"an {key} entry", items.line_of(i))
        ctx.keys(entry, ("select", "reason"), f"an {key} entry")
        for field in ("select", "reason"):
            if field not in entry:
                raise ctx.fail(f"an {key} entry needs '{field}:' ({what})", entry.line)
        expr = ctx.text(entry["select"], f"{key}.select", entry.line_of("select"), bool, '"index=https://download.pytorch.org/*"')
        try:
            parse_select(expr)
        except UserError as exc:
            raise ctx.fail(f"{key}.select: {exc.message}", entry.line_of("select")) from None
        reason = ctx.text(
            entry["reason"], f"{key}.reason", entry.line_of("reason"), lambda r: "\n" not in r and bool(r.strip()), '"index not reachable"'
        )
        out.append((expr, reason, entry.line))
    return tuple(out)
