"""How long does the HTML report of a large trace take to build and to render in a browser?

    python bench/html_render.py [--trace FILE.xplane.pb]

Uses the trace bench/ingest.py makes (a 335k-event, 8-device CPU transformer run; made if
missing) or the one you give. It times ``rl.load`` + ``rl.analyze`` + the HTML build, then
headless Chromium loading the page until its script has drawn everything (``--dump-dom``
returns after the load event and the script). It prints both times, the page size, and the
browser time as a ratio of a blank page's load measured in the same run. The goal is under 5 s
in the browser.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def browser_seconds(exe: str, url: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url], capture_output=True,
                       text=True, timeout=300)
    return time.perf_counter() - t0, r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    args = ap.parse_args()
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        print("no chromium here: install Debian's chromium package")
        return 1
    trace = args.trace
    if trace is None:
        cache = Path(__file__).resolve().parent / ".cache"
        found = sorted(cache.rglob("*.xplane.pb"))
        if not found:
            subprocess.run([sys.executable, str(Path(__file__).parent / "ingest.py"), "--repeat", "1"], check=True)
            found = sorted(cache.rglob("*.xplane.pb"))
        trace = found[-1]
    import rooflens as rl
    from rooflens.report.html import write_html

    t0 = time.perf_counter()
    prof = rl.load(trace)
    rep = rl.analyze(prof, chip="h100-sxm")  # any chip: the page is the same size
    out = Path(tempfile.mkdtemp()) / "report.html"
    write_html(rep, out)
    build = time.perf_counter() - t0
    blank = out.with_name("blank.html")
    blank.write_text("<!doctype html><title>blank</title><p>blank</p>")
    base, _ = browser_seconds(exe, blank.as_uri())
    seconds, dom = browser_seconds(exe, out.as_uri())
    ok = 'data-rendered="yes"' in dom
    print(f"{trace} ({len(prof.table):,} op events)")
    print(f"load + analyze + HTML: {build:.2f} s; page {out.stat().st_size / 1e6:.2f} MB")
    print(f"browser: {seconds:.2f} s to load and draw ({'drawn' if ok else 'NOT drawn'}); a blank page: {base:.2f} s "
          f"→ the report costs {seconds - base:.2f} s, {seconds / base:.1f}× a blank page")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
