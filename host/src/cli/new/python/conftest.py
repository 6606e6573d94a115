"""pytest's setup: {{crate}}.py importable from the tests, and the SDK the project was
made with (SDK_PATH: the one the `capstan` binary carries, or `capstan new --sdk
CHECKOUT`'s); emptied, capstan_sdk is the pip-installed package."""

import sys
from pathlib import Path

SDK_PATH = "{{sdk-path}}"

sys.path.insert(0, str(Path(__file__).resolve().parent))
if SDK_PATH:
    sys.path.insert(0, str(Path(SDK_PATH) / "python" / "src"))
