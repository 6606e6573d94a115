"""What the package ships besides code: its version and the WIT it implements."""

import tomllib
from pathlib import Path

import capstan_sdk

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def test_the_version_is_the_projects():
    project = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["project"]
    assert capstan_sdk.__version__ == project["version"]


def test_the_shipped_wit_is_the_one_the_sdk_implements():
    text = (Path(capstan_sdk.wit_dir()) / "reconciler.wit").read_text()
    assert f"package {capstan_sdk.WIT_PACKAGE};" in text


def test_the_shipped_wit_is_the_checkouts():
    # A copy, so an installed SDK (a wheel, or src/ on the path) carries it; refresh it
    # with `cp wit/reconciler.wit sdk/python/src/capstan_sdk/data/wit/` after editing wit/.
    checkout = ROOT / "wit" / "reconciler.wit"
    if not checkout.exists():
        import pytest

        pytest.skip("not in a Capstan checkout")
    shipped = Path(capstan_sdk.wit_dir()) / "reconciler.wit"
    assert shipped.read_bytes() == checkout.read_bytes(), (
        "sdk/python's copy of the WIT is stale: cp wit/reconciler.wit sdk/python/src/capstan_sdk/data/wit/"
    )
