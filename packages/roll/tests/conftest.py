"""roll's tests: their helper modules importable by name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # helper modules such as policy_fakes
