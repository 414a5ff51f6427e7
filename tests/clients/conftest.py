"""The Python client is imported from its source folder (`clients/python`), not installed into the venv.

That keeps the project's own install (`pip install '.[dev]'`) unchanged and always tests the
working tree; `pip install ./clients/python` is what users run.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
