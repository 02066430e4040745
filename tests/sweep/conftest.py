from __future__ import annotations

import sys
from pathlib import Path

# The sweep_fakes module must import by name in spawned pool workers too (they inherit sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))
