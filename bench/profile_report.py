"""Where a first ``rooflens report --json`` of one trace spends its time: cProfile over the whole command, the
functions by their own time and by their time with callees (a tool for the device tool's GPU traces, which do not
come back to the machine that reads them).

    python bench/profile_report.py TRACE [N]
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import sys

os.environ["ROOFLENS_NO_CACHE"] = "1"
trace, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
sys.argv = ["rooflens", "report", trace, "--json", "--no-calibrate"]
from rooflens.cli import main  # noqa: E402

prof = cProfile.Profile()
prof.enable()
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main()
prof.disable()
for order in ("tottime", "cumulative"):
    pstats.Stats(prof, stream=sys.stdout).sort_stats(order).print_stats(top)
