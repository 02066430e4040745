"""Every command in README.md's code blocks runs: the ``simasgd`` ones through the CLI, on small budgets; the
two scripts (which create a virtual environment) are checked for existence and syntax; the install line
names an extra that pyproject.toml defines. A command the README gains that none of these covers fails."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simasgd.cli import app

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

# Small budgets a README command runs with here (appended; the last -s of a key wins).
SMALL = {
    "run": ["-n", "1", "-s", "stop.max_updates=150", "-s", "stop.eval_every_updates=50"],
    "compare": ["-n", "2", "-s", "stop.max_updates=150", "-s", "stop.eval_every_updates=50"],
    "sweep": ["-n", "1", "-j", "0", "-s", "stop.max_updates=60", "-s", "stop.eval_every_updates=30"],
    "calibrate": ["--quick"],
}


def commands() -> list[list[str]]:
    """The command lines of the README's ```bash blocks, comments removed, as argument lists."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()
            if shlex.split(line, comments=True)]


def measures_this_host(argv: list[str]) -> bool:
    """Real threads or a calibration: seconds to minutes of measuring, the slow tier."""
    backends = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-b", "--backend")]
    return argv[1] == "calibrate" or any(b != "sim" and b != "serial" for b in backends)


def simasgd_commands(slow: bool) -> list[list[str]]:
    return [c for c in commands() if c[0] == "simasgd" and measures_this_host(c) == slow]


def test_every_readme_command_is_covered() -> None:
    """Each command is a simasgd one (run below), one of the two scripts, the install line or the venv."""
    other = [c for c in commands() if c[0] != "simasgd"]
    assert simasgd_commands(False) and other
    for c in other:
        assert c in (["bash", "scripts/quickstart.sh"], ["bash", "scripts/test.sh"],
                     ["pip", "install", "-e", ".[torch]"], ["source", ".venv/bin/activate"]), c


@pytest.mark.parametrize("script", ["scripts/quickstart.sh", "scripts/test.sh", "scripts/setup.sh"])
def test_the_scripts_exist_and_parse(script: str) -> None:
    assert ["bash", script] in commands() or script == "scripts/setup.sh"
    res = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    # They set themselves up from python3 alone: the venv first, then simasgd into it.
    assert "setup.sh" in (REPO / script).read_text() or "-m venv" in (REPO / script).read_text()


def test_the_install_line_names_a_defined_extra() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for c in commands():
        if c[:3] == ["pip", "install", "-e"]:
            extra = re.fullmatch(r"\.\[(\w+)\]", c[3])
            assert extra and extra.group(1) in extras, c


def _workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh folder holding the clone's scenarios, as the README's commands expect; its own profile path."""
    (tmp_path / "scenarios").symlink_to(REPO / "scenarios")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIMASGD_PROFILE", str(tmp_path / "profiles" / "this.toml"))
    monkeypatch.setenv("MPLBACKEND", "Agg")


def _run_all(cmds: list[list[str]]) -> None:
    runner = CliRunner()
    for argv in cmds:
        args = argv[1:] + SMALL.get(argv[1], [])
        res = runner.invoke(app, args)
        assert res.exit_code == 0, f"{shlex.join(argv)}:\n{res.output}"


@pytest.mark.slow
def test_the_readme_simulator_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the README's order: each one's files are the next one's input."""
    _workspace(tmp_path, monkeypatch)
    _run_all(simasgd_commands(False))
    assert (tmp_path / "my.toml").is_file() and (tmp_path / "results" / "my8" / "summary.json").is_file()


@pytest.mark.slow
def test_the_readme_commands_that_measure_this_machine_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _workspace(tmp_path, monkeypatch)
    slow = simasgd_commands(True)
    assert any(c[1] == "calibrate" for c in slow)
    _run_all(slow)
    assert (tmp_path / "profiles" / "this.toml").is_file()  # calibrate wrote it, compare read it


def test_the_readme_is_a_users_guide_not_a_log() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for pattern in (r"\b20\d\d-\d\d-\d\d\b", r"\bissue\s*#?\d", r"\b(EPYC|Xeon|Firecracker)\b", r"\.\./shared",
                    r"\d\d:\d\d UTC", r"\bdiverged\b"):
        assert not re.search(pattern, text, flags=re.IGNORECASE), pattern


def test_the_readmes_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links and [link for link in links if not (REPO / link).exists()] == []
