"""XSpace (``*.xplane.pb``), the JAX profiler's own format: a compiled walk over its protobuf wire
format (:mod:`.wire`, :mod:`.decode`), the per-host reader (:mod:`.reader`) and the programs' HLO from
its metadata plane (:mod:`.hlo_protos`)."""

from rooflens.trace.formats.registry import TraceFormat, reader

FORMAT = TraceFormat("xspace", (".xplane.pb",), reader("rooflens.trace.formats.xspace.reader", "read_xspace"),
                     preference=0)
