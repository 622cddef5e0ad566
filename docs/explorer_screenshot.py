"""Takes the README's screenshot of the explorer (docs/explorer.png) with headless Chromium.

    python docs/explorer_screenshot.py docs/explorer.png

Needs Debian's chromium and chromium-driver (`make chromium`) and selenium (the test extra).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import numpy as np
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from posenc import explorer

SPEC = "rope:scaling=yarn,factor=8,original_max_positions=64"


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page = explorer.write(tmp)
        options = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1680,1240",
                     "--hide-scrollbars", "--force-device-scale-factor=1"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        try:
            driver.get(f"{page.as_uri()}#spec={quote(SPEC, safe='')}&length=256&dim=64&heads=8")
            shot = Path(tmp) / "shot.png"
            driver.save_screenshot(str(shot))
        finally:
            driver.quit()
        im = Image.open(shot).convert("RGB")
        ink = np.asarray(im) < 250  # crop the white margin right and below the page
        cols, rows = np.flatnonzero(ink.any(axis=(0, 2))), np.flatnonzero(ink.any(axis=(1, 2)))
        im = im.crop((0, 0, min(im.width, cols.max() + 16), min(im.height, rows.max() + 16)))
        im.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/explorer.png")
