"""MkDocs hook (mkdocs.yml `hooks:`): the project's records that live outside docs/ shown on the site.

The benchmark tables, the fidelity record and the studies' READMEs are kept beside the code that produces
them (`benchmarks/`, `scenarios/`); the site shows them as they stand at build time, with no second copy
to keep in step. Each becomes a page at the address `PAGES` gives it, under a note naming its file; its
relative links are rewritten to where their targets are on the site (a page brought in, a page of docs/)
or, for a file the site does not hold (a script, a scenario), to its path in the repository as code.

A hand-written page takes one section of such a file with a line of its own::

    <!-- include benchmarks/fidelity.md § The corpus: score against the machine-exact ceiling -->

which becomes the section's body (its heading left out, up to the next heading of its level or above),
its links rewritten as above. A file or section that is not there fails the build, naming both.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# site address (relative to docs/) -> the repository file shown there
PAGES: dict[str, str] = {
    "evidence/fidelity.md": "benchmarks/fidelity.md",
    "evidence/ek-numa.md": "benchmarks/ek_numa.md",
    "evidence/benchmarks-sim.md": "benchmarks/README_sim.md",
    "evidence/benchmarks-cpu.md": "benchmarks/README_cpu.md",
    "evidence/benchmarks-cuda.md": "benchmarks/README_cuda.md",
    "evidence/benchmarks-dist.md": "benchmarks/README_dist.md",
    "evidence/benchmarks-sweep.md": "benchmarks/README_sweep.md",
    "evidence/distributed.md": "scenarios/distributed/README.md",
    "studies/ek2021.md": "scenarios/ek2021/README.md",
    "studies/lopez2020.md": "scenarios/lopez2020/README.md",
    "studies/wongpanich2020.md": "scenarios/wongpanich2020/README.md",
    "studies/hattendorf2024.md": "scenarios/hattendorf2024/README.md",
}
SITE_OF = {source: page for page, source in PAGES.items()}

LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^()\s]+)\)")
INCLUDE = re.compile(r"^<!-- include (\S+) § (.+?) -->$", flags=re.MULTILINE)
HEADING = re.compile(r"^(#{1,6}) +(.*?)\s*$")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", flags=re.IGNORECASE)


class SourceError(ValueError):
    """An include names a file or section that is not there."""


def rewrite_links(text: str, source: str, page: str) -> str:
    """``text``'s relative links, written from repository file ``source``, as links from site page ``page``."""
    here = posixpath.dirname(source)
    at = posixpath.dirname(page)

    def one(m: re.Match[str]) -> str:
        bang, label, target = m.groups()
        if EXTERNAL.match(target):
            return m.group(0)
        path, _, fragment = target.partition("#")
        anchor = f"#{fragment}" if fragment else ""
        repo = posixpath.normpath(posixpath.join(here, path))
        if repo in SITE_OF:
            return f"{bang}[{label}]({posixpath.relpath(SITE_OF[repo], at)}{anchor})"
        if repo.startswith("docs/") and (ROOT / repo).exists():
            return f"{bang}[{label}]({posixpath.relpath(repo[len('docs/'):], at)}{anchor})"
        shown = label.strip("`")
        return f"`{repo}`" if shown == repo or not label else f"{label} (`{repo}`)"

    return LINK.sub(one, text)


def page_text(page: str) -> str:
    """The site page ``page`` (a key of ``PAGES``): its source file under a note, links rewritten."""
    source = PAGES[page]
    body = (ROOT / source).read_text(encoding="utf-8")
    note = (f"!!! note \"A record kept in the repository\"\n    This page is `{source}`, shown as it stands in "
            f"the repository. Its tables are dated measurements: each says on what machine and under what "
            f"load it was taken.\n\n")
    lines = body.splitlines(keepends=True)
    # the note goes under the page's title, so the title stays the page's name
    if lines and lines[0].startswith("# "):
        return lines[0] + "\n" + note + rewrite_links("".join(lines[1:]), source, page)
    return note + rewrite_links(body, source, page)


def section(source: str, title: str) -> str:
    """The body of the section of ``source`` headed ``title``: up to the next heading of its level or above."""
    path = ROOT / source
    if not path.is_file():
        raise SourceError(f"include: {source} is not a file of the repository")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    fence = False
    start: int | None = None
    level = 0
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else HEADING.match(line)
        if m is None:
            continue
        if start is None and m.group(2) == title:
            start, level = i + 1, len(m.group(1))
        elif start is not None and len(m.group(1)) <= level:
            return "".join(lines[start:i]).strip("\n") + "\n"
    if start is None:
        raise SourceError(f"include: {source} has no heading {title!r}")
    return "".join(lines[start:]).strip("\n") + "\n"


def expand(markdown: str, page: str) -> str:
    """``markdown`` of site page ``page`` with every include line replaced by its section."""
    return INCLUDE.sub(lambda m: rewrite_links(section(m.group(1), m.group(2)), m.group(1), page).rstrip("\n"),
                       markdown)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for page in PAGES:
        files.append(File.generated(config, page, content=page_text(page)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    try:
        return expand(markdown, page.file.src_uri)
    except SourceError as e:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_uri}: {e}") from None


def on_config(config: Any) -> Any:
    # `mkdocs serve` rebuilds when a record changes, as it does for a page of docs/
    config["watch"] = [*config.get("watch", []), *sorted({str(ROOT / posixpath.dirname(s)) for s in PAGES.values()})]
    return config
