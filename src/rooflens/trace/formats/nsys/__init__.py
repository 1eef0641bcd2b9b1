"""nsys-jax archives (NVIDIA JAX-Toolbox): Nsight Systems captures of JAX, post-processed into a zip of
Parquet tables and HLO protos (:mod:`.archive`), read into the same columns (:mod:`.reader`)."""

from rooflens.trace.formats.registry import TraceFormat, reader


def _probe(path: str) -> bool:
    from rooflens.trace.formats.nsys.archive import is_nsys_archive

    return is_nsys_archive(path)


FORMAT = TraceFormat("nsys-jax", (".zip",), reader("rooflens.trace.formats.nsys.reader", "read_nsys"),
                     preference=0, probe=_probe, directory=True)
