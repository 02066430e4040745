"""``python -m simasgd.reference --write``: regenerate the reference pages."""

import sys

from simasgd.reference import main

sys.exit(main())
