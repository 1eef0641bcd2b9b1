"""Plain Nsight Systems: SQLite exports (``nsys export --type sqlite``), read a table at a time into numpy
(:mod:`.db`: a large export's big tables from the file's own pages, :mod:`.pages`; a small one through the ADBC
driver into Arrow; sqlite3 where neither), the NVTX ranges open at each launch (:mod:`.nest`), and the per-host
columns (:mod:`.reader`);
raw ``.nsys-rep`` reports through ``nsys export`` when Nsight Systems is installed.

Two rows of the formats registry: the export, and the raw report (a report and its export side by
side are one host: the export is read, not exported again)."""

from rooflens.trace.formats.registry import TraceFormat, reader


def _probe(path: str) -> bool:
    from rooflens.trace.formats.nsys_sqlite.db import is_nsys_export

    return is_nsys_export(path)


FORMAT = TraceFormat("nsys-sqlite", (".sqlite",), reader("rooflens.trace.formats.nsys_sqlite.reader",
                                                         "read_nsys_sqlite"), preference=0, probe=_probe)
REPORT = TraceFormat("nsys-rep", (".nsys-rep",), reader("rooflens.trace.formats.nsys_sqlite.reader",
                                                        "read_nsys_report"), preference=1)
