"""No history where a reader expects what is: history lives in git, measurements in dated benchmark tables.

What the code and its documentation say must be true of them as they are. A sentence of history — "used
to", "was changed", "before the rewrite", "no longer", a date, "took 36 µs instead of 17" — is true only of
some past version, and goes stale without anyone noticing. Checked here:

- the user docs (``docs/``): no history phrase, date, issue number or name of a machine the project was
  measured on (the preset catalogue names hardware: that is its subject);
- the code's prose (comments and docstrings of ``simasgd/`` and ``executors/``, never its string data):
  no history phrase, date or measured figure (a figure's record is its benchmark page's dated table);
- ``DEVELOPERS.md`` and the root ``README.md``: no history phrase and no date;
- the benchmark and scenario READMEs (``benchmarks/README*.md``, ``scenarios/*/README.md``): they are
  records, so a date may stand where it dates a result — in a heading, a table row, or a line that says
  what was recorded or measured when — and nowhere else; no history phrase anywhere.

Each pattern is tested on sentences it must catch and on sentences it must leave (the last tests), so
that a pattern that catches nothing fails here rather than passing everything.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Sentences that narrate a change: each true of the code only until the next change.
PHRASES = {
    "used to": re.compile(r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bwas )(?<!\bwere )\bused to\b", re.I),
    "was changed": re.compile(r"\b(was|were|has been|have been) (changed|rewritten|reworked|renamed|replaced|"
                              r"switched|moved) (from|to|in|by|with)\b", re.I),
    "before the change": re.compile(r"\bbefore (this|the|that) (rewrite|revision|refactor\w*|fix|change|commit|"
                                    r"patch|existed)\b|\bbefore this existed\b", re.I),
    "the old version": re.compile(r"\b(the|an?) (old|former|earlier|previous) (code|version|loop|kernel|"
                                  r"implementation|executor|behaviou?r|design|model|approach)\b", re.I),
    "previously": re.compile(r"\b(previously|formerly|originally|hitherto)\b", re.I),
    # (a state of data the run changes — a cache line, a lock, a calibration that "no longer holds" — is not history)
    "no longer": re.compile(r"\bno longer\b(?! (holds?|held|true|valid|fits?)\b)", re.I),
    "now the default": re.compile(r"\b(is|are) now (the|a|an|on|off|done|made|computed|taken|measured|"
                                  r"modelled|modeled|default)\b|\bnow the default\b", re.I),
    "as before": re.compile(r"\bas (it |they )?(did |was |were )?before\b(?!\s+(the|a|an|it|its|any|each|every)\b)",
                            re.I),
    "since that run": re.compile(r"\bsince (that|the last|the previous) (run|commit|revision|version|change)\b",
                                 re.I),
}
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# A measured figure in the code's prose: "took 36 µs", "36 µs instead of 17", "at 250 µs instead of 18",
# "measured: ... 5 ms", "3.4x slower", "+2.6 µs". A unit of time or a ratio beside the past tense or a
# comparison with another figure.
_UNIT = r"(?:µs|us|ms|ns|s|GB/s|%)"
_NUM = r"~?\d[\d.,]*"
FIGURES = {
    "took N": re.compile(rf"\btook (about |only |~)?{_NUM}[\s–-]*{_NUM}?\s?{_UNIT}\b", re.I),
    "N instead of M": re.compile(rf"{_NUM}\s?{_UNIT}\s+(instead of|against|where \w+ took)\s+~?\d", re.I),
    "measured: N": re.compile(rf"\bmeasured(\s*[:,(][^.;]*?| (at |as )?){_NUM}\s?(µs|us|ms|ns|s|GB/s|%)(?!\w)",
                              re.I),
    "N× slower": re.compile(r"(\d[\d.]*\s?[x×]|×\s?\d[\d.]*)\s+(slower|faster)\b|\b\d[\d.]*% (slower|faster)\b",
                            re.I),
    "was N": re.compile(rf"\b(was|were) {_NUM}\s?{_UNIT}\b[^.]*\b(now|before|then)\b", re.I),
}
# The user docs: besides the above, an issue number or a machine the project ran on.
DOCS_ONLY = re.compile(r"\bissue \d+|EPYC|Xeon|Firecracker|H200")

# Lines a pattern catches that are not history, by file and line: (path, a regex the line matches, why).
# Keep this short; rewrite the sentence rather than add an entry where the sentence can say what is.
ALLOW: tuple[tuple[str, str, str], ...] = (
    ("simasgd/evaluation/drift.py", r"gradient 24% slower than at calibration 2 h ago",
     "an example of the line Drift.gradient_line prints, not a measurement of the code"),
)


def _allowed(rel: str, line: str) -> bool:
    return any(rel == path and re.search(rx, line) for path, rx, _ in ALLOW)


def prose(source: str) -> list[tuple[int, str]]:
    """The comments and docstrings of a Python source (every string that stands alone as a statement),
    line by line, with their line numbers — not the strings the code uses as data."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out += [(node.lineno + i, line) for i, line in enumerate(node.value.value.splitlines())]
    return sorted(out)


def history_in(line: str, *, figures: bool, dates: bool) -> list[str]:
    """The names of the patterns ``line`` matches: history phrases always, measured figures and dates where asked."""
    found = [name for name, rx in PHRASES.items() if rx.search(line)]
    if figures:
        found += [name for name, rx in FIGURES.items() if rx.search(line)]
    if dates and DATE.search(line):
        found.append("date")
    return found


def _dated_record_line(line: str) -> bool:
    """In a benchmark or scenario README, a date dates a result: a heading, a table row, or a line that says
    what was recorded or measured (and where)."""
    s = line.strip()
    return s.startswith(("#", "|")) or re.search(r"\b(recorded|measured|timed|simulated|predicted|sessions?|runs?)\b", s, re.I) is not None


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _report(hits: list[str], what: str) -> str:
    return (f"history in {what} (say what is; the history is in git, a measurement in its benchmark page's dated "
            f"table; a line that is not history: tests/test_no_history.py ALLOW, with why):\n" + "\n".join(hits))


def code_files() -> list[Path]:
    return sorted(p for top in ("simasgd", "executors") for p in (ROOT / top).rglob("*.py"))


def readmes() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "benchmarks").glob("README*.md")),
            *sorted((ROOT / "scenarios").glob("*/README.md"))]


def test_the_user_docs_carry_no_history() -> None:
    hits = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        catalogue = page.name == "presets.md"  # the preset catalogue's subject is the hardware its presets model
        for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            found = history_in(line, figures=False, dates=True)
            if not catalogue and DOCS_ONLY.search(line):
                found.append("machine or issue")
            elif catalogue and re.search(r"\bissue \d+", line):
                found.append("issue")
            if found and not _allowed(_rel(page), line):
                hits.append(f"{_rel(page)}:{i}: [{', '.join(found)}] {line.strip()[:110]}")
    assert not hits, _report(hits, "the user docs")


def test_the_codes_comments_and_docstrings_carry_no_history() -> None:
    hits = []
    for path in code_files():
        for i, line in prose(path.read_text(encoding="utf-8")):
            found = history_in(line, figures=True, dates=True)
            if found and not _allowed(_rel(path), line):
                hits.append(f"{_rel(path)}:{i}: [{', '.join(found)}] {line.strip()[:110]}")
    assert not hits, _report(hits, "comments and docstrings")


@pytest.mark.parametrize("page", [ROOT / "DEVELOPERS.md", *readmes()], ids=lambda p: _rel(p))
def test_the_developer_guide_and_readmes_carry_no_history(page: Path) -> None:
    record = page.parent.name == "benchmarks" or page.parent.parent.name == "scenarios"
    hits = []
    for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        found = history_in(line, figures=False, dates=not (record and _dated_record_line(line)))
        if found and not _allowed(_rel(page), line):
            hits.append(f"{_rel(page)}:{i}: [{', '.join(found)}] {line.strip()[:110]}")
    assert not hits, _report(hits, _rel(page))


# --- the patterns themselves ---------------------------------------------------------------------------------

CAUGHT = [
    ("the cpu loop used to compute on the live θ", "used to"),
    ("the registry's default was changed to reader", "was changed"),
    ("Before this revision every number was a guess.", "before the change"),
    ("Before this existed, the backend evaluated the loss first", "before the change"),
    ("faster than the old kernel", "the old version"),
    ("previously the monitor ran live", "previously"),
    ("8 threads no longer saturate it", "no longer"),
    ("the thesis' setup, now the default", "now the default"),
    ("``local_copy`` is now the default on sim and cpu", "now the default"),
    ("the kernels then run as they did before", "as before"),
    ("The kernels since that run are compiled for sm_90", "since that run"),
    ("its pass took 12.3-13.0 µs instead of 18.4", "took N"),
    ("a step took 36 µs instead of 17", "N instead of M"),
    ("updates at 250 µs instead of 18 (convoys)", "N instead of M"),
    ("(measured: mutex, 2 workers on 2 CPUs, update-phase p99 5 ms)", "measured: N"),
    ("for small models: measured 0.17 s per gradient of the example CNN", "measured: N"),
    ("was 3.4x slower, 45 against 13 µs", "N× slower"),
    ("the step was 36 µs before, 17 now", "was N"),
]
LEFT = [
    "Atomic file writes: a reader sees a whole file or the old one, never half.",
    "the local steps since the worker's previous exchange reach x̃ in it",
    "the key is used to select the backend",
    "a spinning thread's pauses are short beside the period",
    "the second of 2 workers would often begin its first cycle milliseconds after go",
    "with three model-sized streams instead of five",
    "Python's default: 5 ms",
    "the lock is taken before the update, as before any write",
    "2^28 TSC cycles, about 0.1 s, before it sleeps",
    "# the gradient's share of the probe: ~2000 calls of a 150 µs gradient",
    "# the centre gets x_j as it was before the move",
    "# 0.3, 1, 2 rather than 3×10⁻¹: losses span a decade or two",
    "to tell a wrong model from a calibration that no longer holds",
    "# a range longer than this is a typo (a step of 1e-6 instead of 1e-3), not a grid",
    "(measured runs inside the simulated 90% band, measured runs), over every cell and metric.",
]


@pytest.mark.parametrize(("line", "pattern"), CAUGHT, ids=[c[1] + ": " + c[0][:30] for c in CAUGHT])
def test_a_history_sentence_is_caught(line: str, pattern: str) -> None:
    assert pattern in history_in(line, figures=True, dates=True), history_in(line, figures=True, dates=True)


@pytest.mark.parametrize("line", LEFT, ids=[s[:40] for s in LEFT])
def test_a_sentence_of_what_is_is_left(line: str) -> None:
    assert history_in(line, figures=True, dates=False) == []


def test_dates_are_caught_and_only_dated_records_may_carry_them() -> None:
    assert "date" in history_in("the H200 record of 2026-11-27 predates it", figures=False, dates=True)
    assert history_in("seed 2020, 3 repeats", figures=False, dates=True) == []
    assert _dated_record_line("## Results — one NVIDIA H200, measured 2026-11-27")
    assert _dated_record_line("| 2026-11-26 | 7a357fc | leashed |")
    assert not _dated_record_line("of 2026-11-27 predates it; else `cores` when the corpus is absent")


def test_prose_is_the_comments_and_docstrings_not_the_code() -> None:
    src = ('"""Module: took 5 ms."""\n'
           'X = "no longer a docstring: data"\n'
           'def f() -> None:\n'
           '    """Used to be slow."""\n'
           '    y = 1  # was changed to 1\n')
    lines = dict(prose(src))
    assert lines == {1: "Module: took 5 ms.", 4: "Used to be slow.", 5: "# was changed to 1"}


def test_every_allowlist_entry_matches_a_line_and_says_why() -> None:
    """A stale entry (its line rewritten) would allow the next history sentence written there."""
    for path, rx, why in ALLOW:
        file = ROOT / path
        lines = prose(file.read_text(encoding="utf-8")) if file.suffix == ".py" else \
            list(enumerate(file.read_text(encoding="utf-8").splitlines(), 1))
        assert any(re.search(rx, line) for _, line in lines), f"ALLOW entry for {path} matches no line: {rx}"
        assert why.strip(), f"ALLOW entry for {path} gives no reason"
