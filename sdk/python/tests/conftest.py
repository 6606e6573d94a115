import sys
from pathlib import Path

# Test the source tree, not whatever capstan_sdk happens to be installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
