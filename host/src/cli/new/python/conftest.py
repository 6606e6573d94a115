"""pytest's setup: {{crate}}.py importable from the tests, and the SDK the project was
made with. `capstan new --sdk CHECKOUT` names the checkout's SDK here (SDK_PATH); else
capstan_sdk is the pip-installed package (pip install 'capstan-sdk[testing]')."""

import sys
from pathlib import Path

SDK_PATH = "{{sdk-path}}"

sys.path.insert(0, str(Path(__file__).resolve().parent))
if SDK_PATH:
    sys.path.insert(0, str(Path(SDK_PATH) / "python" / "src"))
