"""The docs a newcomer reads (issue 40 item 5): a short README that states the two set-up commands CI runs, one line
per command and links into docs/; the details live in docs/, and what they document exists.

README.md: at most 150 lines, none over 200 characters, no timing logs (clock times, durations); its test command is
the one .ci/run calls; its command table is `builder --help`'s list; every doc it links exists and every doc is linked.
docs/benchmarks.md: at most 300 lines (latest figures and the method; the dated history is in git).
docs/commands.md: every option its overview names is an option of that command.
docs/architecture.md: its stage order is tests/test_boundaries.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from builder.cli import main
from tests.test_boundaries import STAGES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLOCK = re.compile(r"\b\d{1,2}:\d{2}\b(?!\.\d)")  # 14:36, not 127.0.0.1:5000 (no word boundary after 1:50)
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:s|ms|sec|secs|seconds|min|mins|minutes|h|hours)\b", re.IGNORECASE)
GENERATED = {"support-matrix.md"}  # `builder report` writes it; never committed (tests/test_report_output.py)


def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_is_short_with_short_lines() -> None:
    lines = readme().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move details into docs/ (at most 150)"
    long = [f"README.md:{n}: {len(line)} characters" for n, line in enumerate(lines, 1) if len(line) > 200]
    assert long == [], "lines over 200 characters:\n" + "\n".join(long)


def test_readme_holds_no_timings() -> None:
    """Run figures go stale the day they are written: they belong in docs/benchmarks.md."""
    found = [
        f"README.md:{n}: {line.strip()}" for n, line in enumerate(readme().splitlines(), 1) if CLOCK.search(line) or DURATION.search(line)
    ]
    assert found == [], "timings in the README (docs/benchmarks.md has them):\n" + "\n".join(found)


def test_the_clock_and_duration_patterns_catch_a_timing_line() -> None:
    """The check above must be able to fail: the lines the README used to hold are caught."""
    assert CLOCK.search("CI's last two runs: 14:36, and 14:30 for the whole `.ci/run`")
    assert DURATION.search("the offline tier alone (about 1.5 minutes)") and DURATION.search("95 s to 64 s a build")
    assert not CLOCK.search("127.0.0.1:5000/gpu-images@sha256:...") and not DURATION.search("torch=2.13 python=3.11")


def test_readme_set_up_commands_are_the_scripts_and_ci_runs_the_test_command() -> None:
    text = readme()
    for command in ("bash scripts/main.sh", "bash scripts/test.sh"):
        assert re.search(rf"^{re.escape(command)}\b", text, re.MULTILINE), f"README.md lacks the set-up line `{command}`"
        assert (ROOT / command.split()[1]).is_file()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("#")]
    assert any(line.startswith("bash scripts/test.sh") for line in ci), ".ci/run must run the README's test command, bash scripts/test.sh"
    pull = re.search(r"^(?:BUILDER_ALLOWED_SIGNERS=(\S+) )?\.venv/bin/builder pull \S+=\S+", text, re.MULTILINE)
    assert pull, "README.md lacks the `builder pull QUERY` line"
    # the main job signs with its demo key: the pull line a new user copies must name the signers it writes
    # (without them, pull of signed records is refused, as it must be)
    main = (ROOT / "scripts" / "main.sh").read_text(encoding="utf-8")
    assert pull.group(1) and pull.group(1) in main, "README's pull line must give the signers scripts/main.sh writes"


def test_readme_lists_every_command_once() -> None:
    listed = re.findall(r"^\| `builder ([a-z-]+)` \|", readme(), re.MULTILINE)
    assert sorted(listed) == sorted(main.commands), "README.md's command table must be `builder --help`'s list, one row each"


def test_readme_links_every_doc_and_each_link_exists() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme()))
    missing = sorted(link for link in linked if not (ROOT / link).is_file())
    assert missing == [], f"README.md links to missing files: {missing}"
    unlinked = sorted(f"docs/{p.name}" for p in DOCS.glob("*.md") if p.name not in GENERATED and f"docs/{p.name}" not in linked)
    assert unlinked == [], f"docs not linked from README.md: {unlinked}"


def test_docs_link_only_to_files_that_exist() -> None:
    broken = []
    for page in sorted(DOCS.glob("*.md")):
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not (page.parent / target).is_file():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == [], "broken links:\n" + "\n".join(broken)


def test_benchmarks_doc_is_the_latest_figures_only() -> None:
    lines = (DOCS / "benchmarks.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"docs/benchmarks.md has {len(lines)} lines (at most 300: latest figures and method; history is in git)"
    text = "\n".join(lines)
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert [s for s in scripts if f"benchmarks/{s}" not in text] == [], "every benchmark script needs its section"


def test_commands_doc_names_only_options_that_exist() -> None:
    """Each overview row `builder CMD [--opt ...]` of docs/commands.md names options CMD has (env: its subcommands')."""
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `builder ([a-z]+)([^`]*)` \|([^\n]*)", text, re.MULTILINE)
    assert sorted({name for name, _, _ in rows}) == sorted(main.commands), "docs/commands.md needs one overview row per command"
    wrong = []
    for name, usage, does in rows:
        command = main.commands[name]
        commands = list(command.commands.values()) if isinstance(command, click.Group) else [command]
        known = {opt for c in commands for p in c.params for opt in (*p.opts, *p.secondary_opts)}
        named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", usage))
        named |= set(re.findall(r"`(--[a-z][a-z-]*)", does)) - {"--gpus"}  # `docker run --gpus all` is Docker's
        wrong += [f"builder {name} {opt}" for opt in sorted(named - known - {"-h", "--help"})]
    assert wrong == [], "docs/commands.md names options that do not exist:\n" + "\n".join(wrong)


def test_architecture_stage_order_is_the_boundary_tests() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    order = [line for line in text.splitlines() if line.startswith("foundations < ")]
    assert order == [" < ".join(("foundations", *STAGES))], "docs/architecture.md's stage order must be tests/test_boundaries.py STAGES"
    long_cells = [line for line in text.splitlines() if line.startswith("|") and any(len(c) > 160 for c in line.split("|"))]
    assert long_cells == [], "keep architecture.md's table cells short (at most 160 characters)"
