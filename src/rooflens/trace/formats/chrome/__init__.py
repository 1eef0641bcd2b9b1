"""Chrome trace JSON (``*.trace.json.gz``, as ``jax.profiler`` and rooflens's Perfetto export write it):
streamed through a compiled scan (:mod:`.events`, :mod:`.scan`) into the same columns (:mod:`.reader`)."""

from rooflens.trace.formats.registry import TraceFormat, reader

FORMAT = TraceFormat("chrome", (".trace.json.gz", ".trace.json"),
                     reader("rooflens.trace.formats.chrome.reader", "read_chrome"), preference=1,
                     named_suffixes=(".json.gz", ".json"))
