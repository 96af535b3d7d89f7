"""Put this checkout on the calling venv's import path (a `rtinfer_checkout.pth` in its
site-packages), so `examples` and `peers` import from any directory in a dev venv.

The wheel ships rtinfer, controllers and models only (pyproject.toml: top-level `examples` and
`peers` would collide with other projects' names in site-packages), and an editable install
maps only what the wheel ships; the launch files and the tests name example nodes by module
string, so a dev venv needs the checkout itself. Run by the Makefile and the env scripts after
`pip install -e`:

    VENV/bin/python scripts/checkout_pth.py
"""

import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    pth = Path(sysconfig.get_paths()["purelib"]) / "rtinfer_checkout.pth"
    pth.write_text(f"{ROOT}\n")
    print(f"{pth}: {ROOT}")
