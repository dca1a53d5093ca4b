"""Where the Spark kernel's stored batches live, and the proof that they got there.

A `StateStore` is a storage root every executor and the driver reach (any
Hadoop-compatible URI: `file:///shared/dir`, `hdfs://...`, `s3a://...`), under which
each kernel writes its batches in a directory of its own (`dsql-<hex>`). The root is
`state_uri` when given, else `$DSQL_STATE_URI`, else, under a local master only, a
private temp directory of the driver's (executors are threads of the driver there). A
non-local master without a root is refused (`EnvironmentSetupError`): a temp directory
of the driver's is not one the executors write to, and their output would be lost.

Invariants:

- A stored batch is never taken for empty because its files went missing: a write
  counts its rows as they are written (`counted`, an observed metric of the write's own
  job) and `check_written` compares that with the rows committed, from the files'
  footers or a count of the read-back. The batch remembers its rows, and a later read
  that finds fewer (the driver's, from the footers; Spark's, a file gone) is `lost`,
  an error.
- The driver reads stored files itself (footers, key probes) only after a check showed
  that it does see what executors write there (`driver_sees`): one job in which
  executors copy a marker the driver wrote, read back by the driver. Not decided by the
  master's name: a cluster whose workers share the root passes, a local master whose
  root pyarrow cannot open does not.
- Files go away through the URI's filesystem (`pyarrow.fs.FileSystem.from_uri`: local
  files, HDFS where libhdfs is installed, S3 for `s3a://` as `s3://` with pyarrow's own
  credentials). Where pyarrow cannot open the root, nothing is deleted by the driver:
  the root's own retention (an object store's lifecycle rule, a cluster's cleanup)
  applies, and `deletes` says so.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import uuid
from typing import TYPE_CHECKING, Any

from dsql.errors import EnvironmentSetupError, ExecutionError, StateLostError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession

#: The environment variable naming the storage root when `state_uri` is not given.
STATE_URI_VARIABLE = "DSQL_STATE_URI"

_HINT = (
    "set a storage root every executor and the driver reach: "
    "dsql.connect(..., state_uri='hdfs:///user/me/dsql') or "
    "state_uri='file:///shared/dsql' (a directory mounted on every node), "
    f"--state-uri on the command line, or ${STATE_URI_VARIABLE}"
)


def is_local_master(master: str) -> bool:
    """Whether `master` runs the executors inside the driver (`local`, `local[N]`, ...)."""
    return master.strip().startswith("local")


def configured_root(state_uri: str | None) -> str | None:
    """The storage root asked for: `state_uri`, else `$DSQL_STATE_URI`, else None."""
    return state_uri or os.environ.get(STATE_URI_VARIABLE) or None


def require_root(master: str | None, state_uri: str | None) -> None:
    """Refuse a non-local `master` without a storage root (see the module docstring).

    >>> require_root("local[2]", None)
    >>> require_root("spark://10.0.0.1:7077", "hdfs:///dsql")
    """
    if master and not is_local_master(master) and configured_root(state_uri) is None:
        raise EnvironmentSetupError(
            f"Spark master {master} needs a storage root for dsql's state", hint=_HINT
        )


def _as_uri(root: str) -> str:
    """`root` with a scheme: a bare path is a local directory (`file://`), not whatever
    Hadoop's default filesystem is."""
    if "://" in root or root.startswith("file:"):
        return root.rstrip("/")
    return "file://" + os.path.abspath(root)


def _pyarrow_filesystem(uri: str) -> tuple[Any, str] | None:
    """The pyarrow filesystem and path of `uri`; None where pyarrow cannot open it."""
    from pyarrow import fs

    scheme = uri.split("://", 1)[0]
    opened = "s3" + uri[len("s3a") :] if scheme == "s3a" else uri
    try:
        filesystem, path = fs.FileSystem.from_uri(opened)
    except Exception:  # noqa: BLE001 - no libhdfs, unknown scheme, no credentials
        return None
    return filesystem, path


class StateStore:
    """The storage root of one kernel's stored batches (see the module docstring)."""

    def __init__(self, state_uri: str | None = None) -> None:
        #: The root asked for (None: decided with the session's master).
        self.requested = configured_root(state_uri)
        self._directory: str | None = None
        self._filesystem: tuple[Any, str] | None = None
        self._sees: bool | None = None

    def directory(self, spark: SparkSession) -> str:
        """This kernel's directory under the root (as a URI), chosen on first use."""
        if self._directory is None:
            if self.requested is None:
                master = spark.conf.get("spark.master", "") or ""
                require_root(master or "unknown", None)  # refuses unless local
                self._directory = "file://" + tempfile.mkdtemp(prefix="dsql-state-")
            else:
                self._directory = f"{_as_uri(self.requested)}/dsql-{uuid.uuid4().hex}"
            self._filesystem = _pyarrow_filesystem(self._directory)
            if self._filesystem is not None:
                try:
                    filesystem, path = self._filesystem
                    filesystem.create_dir(path)
                except OSError:
                    self._filesystem = None
            atexit.register(self.delete, self._directory)
        return self._directory

    def new_path(self, spark: SparkSession) -> str:
        """A fresh URI under this kernel's directory."""
        return f"{self.directory(spark)}/{uuid.uuid4().hex}"

    @property
    def deletes(self) -> bool:
        """Whether the driver deletes released batches (pyarrow opens the root)."""
        return self._filesystem is not None

    def local(self, uri: str) -> tuple[Any, str]:
        """The pyarrow filesystem and its path for `uri`, a path under the directory;
        only where `driver_sees` (or `deletes`) holds."""
        assert self._filesystem is not None and self._directory is not None
        filesystem, base = self._filesystem
        return filesystem, base + uri[len(self._directory) :]

    def delete(self, uri: str) -> None:
        """Delete the files under `uri` (nothing where the driver cannot open the root)."""
        if self._filesystem is None or self._directory is None:
            return
        filesystem, path = self.local(uri)
        try:
            filesystem.delete_dir(path)
        except OSError:  # gone already, or never written
            pass

    def driver_sees(self, spark: SparkSession) -> bool:
        """Whether the driver and the executors see each other's files under the root:
        the driver writes a marker, one job's executors copy it beside, the driver reads
        the copy. Asked once per kernel."""
        if self._sees is None:
            self._sees = self._check(spark)
        return self._sees

    def _check(self, spark: SparkSession) -> bool:
        marker = self.new_path(spark)
        if self._filesystem is None:
            return False
        filesystem, path = self.local(marker)
        token = uuid.uuid4().hex
        try:
            filesystem.create_dir(path)
            with filesystem.open_output_stream(f"{path}/marker.txt") as out:
                out.write(token.encode())
            spark.read.text(f"{marker}/marker.txt").write.text(f"{marker}/copy")
            from pyarrow.fs import FileSelector

            copies = filesystem.get_file_info(FileSelector(f"{path}/copy"))
            seen = any(
                token.encode() in filesystem.open_input_stream(f.path).read()
                for f in copies
                if f.is_file and not f.base_name.startswith(("_", "."))
            )
        except Exception:  # noqa: BLE001 - an executor missing the marker fails its job
            seen = False
        self.delete(marker)
        return seen


def counted(frame: DataFrame) -> tuple[DataFrame, Observation]:
    """`frame` with its rows counted as an action computes it (an observed metric: no
    job of its own), and the observation to read the count from afterwards."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import count, lit

    observation = Observation(f"dsql_written_{uuid.uuid4().hex}")
    return frame.observe(observation, count(lit(1)).alias("rows")), observation


def written_rows(observation: Observation) -> int:
    """The rows the write counted (`counted`), once its job has run."""
    return int(observation.get["rows"])


_SHARED_HINT = (
    "the executors and the driver must share the storage root: "
    "set state_uri (or $DSQL_STATE_URI) to a directory every node reaches"
)


def check_written(uri: str, written: int, committed: int) -> None:
    """Raise unless the `committed` rows found at `uri` are the `written` ones."""
    if written != committed:
        raise ExecutionError(
            f"Spark wrote {written} rows at {uri} but {committed} are there", hint=_SHARED_HINT
        )


#: The hint of stored state that is gone (`lost`, `frames._engine_error`).
LOST_HINT = (
    "the storage root (state_uri) must be reachable from every executor and the driver, "
    "and dsql's state under it must not be deleted while a session runs"
)


def lost(uri: str, stored: int, found: int | str) -> StateLostError:
    """The error of a read of the batch stored at `uri` (`stored` rows) that finds fewer
    (`found`: a count, or what went wrong): its files went away or were never seen."""
    return StateLostError(
        f"the batch of {stored} rows stored at {uri} reads as {found}: its files were "
        "deleted, or written where this node does not see them",
        path=uri,
        hint=LOST_HINT,
    )
