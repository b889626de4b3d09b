"""The documentation site builds and its examples run.

``mkdocs build --strict`` (the config's ``strict: true`` and ``validation`` settings) fails
on a broken link, an anchor that is gone, a page left out of the nav and an API reference
(``::: ftactors.X``) that names nothing; the second test proves the build really fails on
those. Every fenced ``python`` block of the site's pages and of the README runs here, the
blocks of a page one after another in one namespace (as a reader would paste them), on the
``local`` transport where a block leaves ``transport`` out (the same programs run on Ray
in the transport tests); a block that cannot run here says so on its first line
(``(not run: WHY)``). Every shell block says on its first line, or in an HTML comment on
the line before it (the README's set-up commands, which stay exactly as they are), which
test runs its command (``# tested by tests/FILE.py::test_name``) or why none can
(``# not run by the tests: WHY``).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ftactors

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"(?:^(<!--[^\n]*-->)\n)?^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"\(not run: [^)]{8,}\)")
SHELL = ("bash", "sh", "console", "shell")


def _build(config: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config), "-d", str(out)],
                          capture_output=True, text=True, cwd=config.parent, env=env,
                          timeout=300)


def test_the_site_builds_with_no_warning(tmp_path):
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    for page in ("reference/cli", "reference/options", "reference/api", "getting-started"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page
    site = tmp_path / "site" / "reference"
    cli = (site / "cli/index.html").read_text()
    assert "ftactors chaos" in cli and "--report" in cli  # the hooks ran
    assert "heartbeat_timeout_s" in (site / "api/index.html").read_text()
    assert "Multi-level recovery" in (site / "modules/index.html").read_text()


@pytest.mark.parametrize("body, named", [
    ("See [gone](no-such-page.md) and [a section that is gone](#no-such-section).",
     ("no-such-page.md", "no-such-section")),
    ("::: ftactors.no_such_name", ("no_such_name",))])
def test_the_build_fails_on_a_broken_link_and_a_stale_name(tmp_path, body, named):
    """The site's own settings on a page with a link to nowhere, or a reference to a name
    that does not exist: the build must fail and name it."""
    config = (ROOT / "mkdocs.yml").read_text()
    config = re.sub(r"(?ms)^nav:.*?(?=^\S)", "nav:\n  - index.md\n", config)
    config = config.replace("docs/hooks/", str(ROOT / "docs/hooks") + "/")
    (tmp_path / "mkdocs.yml").write_text(config)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/index.md").write_text(f"# Broken\n\n{body}\n")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and all(n in done.stderr for n in named), done.stderr


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, code, the HTML comment on the line before or "") of every fenced block
    of ``page``."""
    return [(lang, code, note) for note, lang, code in FENCE.findall(page.read_text())]


def _runnable(page: Path) -> list[str]:
    return [code for lang, code, _ in blocks(page)
            if lang == "python" and not NOT_RUN.search(code.split("\n", 1)[0])]


EXAMPLE_PAGES = [p for p in [*PAGES, ROOT / "README.md"] if _runnable(p)]


@pytest.fixture
def local_by_default(monkeypatch):
    """``ft.run``, ``ft.run_async`` and ``ft.launch`` on the local transport where the
    example names none."""
    for name in ("run", "run_async", "launch"):
        monkeypatch.setattr(ftactors, name, _on_local(getattr(ftactors, name)))


def _on_local(start):
    def on_local(*args, **kwargs):
        kwargs.setdefault("transport", "local")
        return start(*args, **kwargs)
    return on_local


@pytest.mark.filterwarnings("error::ftactors.FaultToleranceWarning")  # a kill that never fired
@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_example_runs(page, local_by_default, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # checkpoints and traces the examples write go there
    namespace: dict = {"__name__": "__docs_example__"}
    for i, code in enumerate(_runnable(page)):
        try:
            exec(compile(code, f"{page.name}, example {i + 1}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{page.name}, example {i + 1} failed:\n{code}") from exc


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shell_example_names_its_test_or_why_it_cannot_run(page):
    for lang, code, note in blocks(page):
        if lang not in SHELL:
            continue
        first = note.removeprefix("<!--").removesuffix("-->").strip() or code.split("\n")[0]
        tested = re.fullmatch(r"#? ?tested by (tests/[\w/]+\.py)::(\w+)(,? .*)?", first)
        if tested:
            path, name = tested.group(1), tested.group(2)
            assert re.search(rf"def {name}\(", (ROOT / path).read_text()), first
        else:
            assert re.fullmatch(r"#? ?not run by the tests: .{8,}", first), (page.name, first)


def test_the_readme_starts_with_the_two_set_up_commands_and_ci_runs_the_second():
    first = next(code for lang, code, _ in blocks(ROOT / "README.md"))
    before = (ROOT / "README.md").read_text().split("```")[0]
    assert "\n## " not in before  # nothing but the title and the block's note before it
    install, test = first.splitlines()
    assert install == "pip install -e . && ftactors demo"
    assert test == 'pip install -e ".[test]" && python -m pytest -q -n 3 --dist loadfile'
    assert (ROOT / ".ci/run").read_text().rstrip().endswith(test)
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200  # a landing page


def test_the_example_checks_find_what_is_wrong(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\n# skipped (not run: needs a cluster of real nodes)\nx = 1\n```\n"
                    "```python\ny = 2\n```\n```bash\nftactors demo\n```\n")
    assert _runnable(page) == ["y = 2\n"]
    with pytest.raises(AssertionError):
        test_every_shell_example_names_its_test_or_why_it_cannot_run(page)
