#!/usr/bin/env bash
# Re-execute every notebook in notebooks/ top to bottom with its committed parameters and save it in
# place with its outputs (the figures the docs site shows):
#
#   bash scripts/notebooks.sh                 # all of them
#   bash scripts/notebooks.sh 01_quickstart   # only those whose name contains one of the arguments
#
# It runs .venv's interpreter as the kernel (a kernelspec in a temporary JUPYTER_PATH, so nothing is
# installed), writes results under results/nbNN/ (ignored by git), and keeps the stored files small and
# quiet in diffs: figures are PNG at the inline backend's dpi, and per-cell timing, widget state and the
# interpreter's version string are dropped. A notebook that fails stops the script; the file is left as
# it was. Notebooks 03 and 05 time this machine (backends cpu and torch), so their numbers are this
# machine's; each prints its time at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "no .venv: run 'bash scripts/setup.sh' first" >&2; exit 2; }
exec "$PY" - "$@" <<'EOF'
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL = "simasgd-notebooks"
notebooks = sorted(Path("notebooks").glob("*.ipynb"))
if sys.argv[1:]:
    notebooks = [p for p in notebooks if any(a in p.name for a in sys.argv[1:])]
    if not notebooks:
        sys.exit(f"no notebook matches {sys.argv[1:]}")

with tempfile.TemporaryDirectory() as jupyter:
    spec = Path(jupyter) / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "simasgd", "language": "python"}))
    os.environ["JUPYTER_PATH"] = jupyter
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    total = time.perf_counter()
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        kernelspec = dict(nb.metadata.get("kernelspec", {}))
        start = time.perf_counter()
        NotebookClient(nb, timeout=1200, kernel_name=KERNEL,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        took = time.perf_counter() - start
        # What changes on every run and says nothing about the results: timings, widgets, versions.
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
            cell.metadata.pop("ExecuteTime", None)
        nb.metadata.pop("widgets", None)
        nb.metadata["kernelspec"] = kernelspec or {"display_name": "Python 3", "language": "python",
                                                   "name": "python3"}
        nb.metadata["language_info"] = {"name": "python"}
        nbformat.validate(nb)
        nbformat.write(nb, path)
        print(f"{path.name}: {took:.0f} s, {path.stat().st_size / 1024:.0f} KB", flush=True)
    print(f"all {len(notebooks)}: {time.perf_counter() - total:.0f} s")
EOF
