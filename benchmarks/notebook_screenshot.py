"""The README's picture of a notebook widget, ``docs/notebook-widget.png``, taken in a real
JupyterLab: a notebook whose cell is ``normlab.widgets.Experiment("bn-lr", lr=2.0)``, run from
JupyterLab's Run menu, photographed once its run has finished.

JupyterLab is started as ``benchmarks/widgets.py`` starts it for its notebook row
(:func:`widgets.jupyter_lab`: settings in throwaway folders, its calls to the network off), in
the same offline Chromium (a request off 127.0.0.1 is aborted, and fails this script).

Usage::

    python benchmarks/notebook_screenshot.py [--out docs/notebook-widget.png]
"""

import argparse
import sys
from pathlib import Path

from widgets import KERNEL_IDLE, jupyter_lab, offline_browser

CELL = 'import normlab.widgets\n\nnormlab.widgets.Experiment("bn-lr", lr=2.0)'
WIDGET = '.normlab-widget[data-experiment="bn-lr"]'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    out_default = Path(__file__).resolve().parents[1] / "docs" / "notebook-widget.png"
    parser.add_argument("--out", type=Path, default=out_default, help="the PNG to write")
    args = parser.parse_args(argv)
    with offline_browser() as (new_page, foreign), jupyter_lab([CELL]) as url:
        page = new_page(height=1700)  # the whole cell in view: controls, figure, table
        page.goto(url, wait_until="load")
        page.wait_for_function(KERNEL_IDLE)
        page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
        page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
        page.wait_for_selector(f"{WIDGET}[data-state='ready'] .nl-table table")
        page.mouse.move(0, 0)  # no hover label over the figure
        page.locator(".jp-Notebook .jp-Cell").first.screenshot(path=str(args.out))
    if foreign:
        print(f"requests that left 127.0.0.1 (aborted): {foreign}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
