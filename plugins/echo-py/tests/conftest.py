"""Make echo.py and the SDK importable without installing either: the SDK is the
checkout's sdk/python/src unless CAPSTAN_SDK_PYTHON names another directory, or
capstan_sdk is already installed outside a checkout."""

import os
import sys
from pathlib import Path

plugin = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(plugin))
sdk = os.environ.get("CAPSTAN_SDK_PYTHON") or str(plugin.parent.parent / "sdk" / "python" / "src")
if Path(sdk, "capstan_sdk").is_dir():
    sys.path.insert(0, sdk)
