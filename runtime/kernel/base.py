"""The kernel interface: the narrow relational engine every runtime operator is written against.

A kernel evaluates relational steps over *frames*: engine-specific handles to a
relation (a Spark DataFrame, an Arrow table for the in-process kernel). The
runtime never looks inside a frame; it hands the kernel sqlglot ASTs and frames,
and gets frames back. The steps themselves (projection, filter, explode, join on
keys, group and aggregate, union, consolidate, running aggregates) are built once,
as sqlglot queries, in `dsql.runtime.relational`, so that every kernel evaluates
the same query and results never depend on which kernel ran a step.

What a kernel must provide:

- `from_arrow` / `to_arrow`: data in and out of the driver;
- `query(select, inputs)`: evaluate a sqlglot query whose tables are the names
  of `inputs` (lazily where the engine allows);
- `prepare(select)`: render a query once (a `Prepared`), so an operator that runs
  the same query every round pays for SQL generation only when it is built;
- `run_pipeline(pipeline, inputs)`: evaluate named intermediate queries and a final
  one (a `Pipeline`): stage by stage where storing intermediates pays (Spark), as one
  statement where a round trip costs more than the work (DuckDB);
- `materialize` / `release`: evaluate a frame now and cut its lineage, so later
  steps read stored rows; release the storage when no reader remains;
- `nbytes`, `schema`: sizes and column types (`materialize` gives exact row counts);
- `fanout(branches)`: the engine's spelling of "one input row becomes these rows"
  (Spark: `inline(array(struct...))`; DuckDB: `unnest([{...}], recursive := true)`);
- `placement(frame)` and `owns(frame)`: where a frame lives (a `Placement`), and whether
  it is one of this kernel's own frames; no caller looks at a frame's type for that.

What a kernel may provide besides is a `Capability`: an optional step it implements
itself, declared in its `capabilities`. Without it the base method declines (None or
False) and the caller runs the general query; a kernel that routes steps to others (the
auto kernel) asks the kernel holding the frames (`can`) before it hands a step on.

Invariant: a kernel never changes the multiset a query denotes; `materialize`
returns a frame with the same rows as its argument.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from dsql.errors import UnsupportedError
from dsql.runtime.kernel import numeric_division, precedence
from dsql.runtime.lattice import Antichain

if TYPE_CHECKING:
    import numpy as np

    from dsql.runtime.kernel.driver import JoinShape, Selection
    from dsql.runtime.kernel.driver_reduce import ReduceRows
    from dsql.runtime.kernel.key_index import KeyDirectory, KeyIndex

Frame = Any
"""An engine-specific relation handle (Spark DataFrame, Arrow table, ...)."""


class Placement(StrEnum):
    """Where a frame's rows live: what `Kernel.placement` answers (equal to its name).

    >>> Placement.LOCAL == "local"
    True
    """

    #: An Arrow table in the driver's memory, queried by DuckDB in-process.
    LOCAL = "local"
    #: A Spark DataFrame, evaluated by Spark's executors.
    SPARK = "spark"


class Capability(Enum):
    """An optional step a kernel implements itself (`Kernel.capabilities`).

    A capability's value names the method that provides it. A kernel without one gives
    the base method's answer (None or False: "not here, run the general query"), or
    has no such method at all for the last group (steps of Spark's kernels only).
    """

    # Steps over frames in the driver, without a query (`kernel.driver`, `key_index`).
    CONSOLIDATE_SMALL = "consolidate_small"
    JOIN_SMALL = "join_small"
    PROJECT_SMALL = "project_small"
    REDUCE_SMALL = "reduce_small"
    SHIFT_TIME = "shift_time"
    RUN_MANY = "run_many"  # with `prepare_many`
    ROWS_WITH_KEYS = "rows_with_keys"
    KEY_UNION = "key_union"
    KEY_INDEX = "key_index"
    KEY_DIRECTORY = "key_directory"
    KEY_SUMS = "key_sums"
    KEY_MATCHES = "key_matches"
    CONCATENATE = "concatenate"
    # Facts about a frame known without an action.
    BOUNDS = "bounds"
    NULL_FREE = "null_free"
    JOIN_APART = "join_apart"
    # Stored batches made natively.
    MERGE = "merge"
    STORE_CONSOLIDATED = "store_consolidated"
    # Steps of Spark's kernels only: methods other kernels do not have.
    ROWS_WITH_KEY = "rows_with_key"  # a stored batch's rows of a few keys, into the driver
    STORE_ARROW = "store_arrow"  # a big Arrow table written as a stored batch by the driver
    LOAD_FRAME = "stamped"  # a Spark DataFrame as a batch, read by the executors
    STORAGE = "store"  # files executors write and verify: `store`, `read`, `driver_can_read`
    SPARK_SESSION = "spark"  # the Spark session steps run on


@dataclass(frozen=True, slots=True)
class Prepared:
    """A query rendered once in a kernel's dialect, run many times over different frames.

    `text` is what the engine reads; `tables` maps each input name the query reads to
    the name the engine binds the frame under (the same name unless the kernel renames).
    Invariant: running it over frames gives the rows of the query it was prepared from.
    """

    text: str
    tables: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Stage:
    """A named intermediate result of a `Pipeline`; `store`: worth materializing once."""

    name: str
    query: exp.Query
    store: bool = True


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Named stages, each reading the inputs and earlier stages, then a final query.

    The meaning is the final query with every stage bound as a table: a kernel may
    store the stages one by one or send the whole as one `WITH` statement.

    >>> from sqlglot import parse_one
    >>> p = Pipeline((Stage("a", parse_one("SELECT x FROM t")),), parse_one("SELECT x FROM a"))
    >>> [s.name for s in p.stages]
    ['a']
    """

    stages: tuple[Stage, ...]
    final: exp.Query


@dataclass(frozen=True, slots=True)
class Stored:
    """A materialized frame: no lineage behind it, its exact row count, and, when it is
    small enough to hold in the driver, its rows as an Arrow table."""

    frame: Frame
    rows: int
    table: pa.Table | None = None


class Kernel(ABC):
    """A relational engine that evaluates the runtime's steps (see module docstring)."""

    #: sqlglot dialect in which this kernel reads SQL.
    dialect: str = ""
    #: A short name for EXPLAIN and SHOW ARRANGEMENTS ("spark", "local").
    name: str = ""
    #: The optional steps this kernel implements itself (`Capability`).
    capabilities: frozenset[Capability] = frozenset()

    def can(self, capability: Capability) -> bool:
        """Whether this kernel implements `capability` itself."""
        return capability in self.capabilities

    def takes(self, capability: Capability, frames: Sequence[Frame]) -> bool:
        """Whether this kernel does optional step `capability` itself over `frames`: it
        declares the step and every frame is one it holds for it (by default: its own).

        The runtime asks this before it takes a step's cheap road (an index probe, a
        driver join, a postponed merge), instead of asking where the frames live; a
        kernel that routes steps to others (the auto kernel) answers for the kernel
        holding the frames.
        """
        return self.can(capability) and all(self.owns(f) for f in frames)

    @abstractmethod
    def owns(self, frame: Frame) -> bool:
        """Whether `frame` is one of this kernel's own frames (the kind it makes)."""

    @abstractmethod
    def placement(self, frame: Frame | None = None) -> Placement:
        """Where `frame` lives; with no frame, where new data goes."""

    @abstractmethod
    def from_arrow(self, table: pa.Table) -> Frame:
        """A frame holding the rows of an Arrow table."""

    @abstractmethod
    def to_arrow(self, frame: Frame) -> pa.Table:
        """The rows of a frame as an Arrow table (an action: it evaluates the frame)."""

    def query(self, select: exp.Query | Prepared, inputs: Mapping[str, Frame]) -> Frame:
        """Evaluate `select` (or a `Prepared` query); its table names are keys of `inputs`."""
        prepared = select if isinstance(select, Prepared) else self.prepare(select)
        return self.run(prepared, inputs)

    @abstractmethod
    def prepare(self, select: exp.Query) -> Prepared:
        """`select` rendered once in this kernel's dialect."""

    @abstractmethod
    def run(self, prepared: Prepared, inputs: Mapping[str, Frame]) -> Frame:
        """Evaluate a prepared query over `inputs` (extra inputs are ignored)."""

    def set_deadline(self, deadline: float | None) -> None:
        """Interrupt queries still running at `deadline` (`time.monotonic()` seconds; None:
        never), where the engine can; the worker sets it while a statement's own nodes
        step, so a single long query cannot outlast `statement_timeout`."""
        return None

    def set_memory_limit(self, limit: int) -> None:
        """Stop a query whose state outgrows `limit` bytes (`runtime.memory`), where the
        engine lets the driver bound it (Spark's executors manage their own memory)."""
        return None

    def set_owner(self, owner: int | None) -> None:
        """Attribute the batches stored from now on to dataflow node `owner` (None: to
        none), so that state found lost later names whose it was (`owner_of`); the
        worker sets it while a node steps and finishes."""
        return None

    def owner_of(self, path: str | None) -> int | None:
        """The node (`set_owner`) that stored the batch at URI `path`, or that a file at
        `path` belongs to; None when unknown or the kernel stores nothing off the driver."""
        return None

    def set_state_uri(self, uri: str) -> None:
        """Store the batches that live on Spark under `uri` (`kernel/spark/state.py`);
        kernels that keep everything in-process ignore it."""
        return None

    def cached(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """`build()`, computed once per `key` for this kernel (prepared queries, schemas).

        Keys must determine the value exactly (names and SQL text, never sqlglot
        nodes: their equality ignores case). The cache keeps the most recent entries.
        """
        cache: OrderedDict[Hashable, Any] = self.__dict__.setdefault("_cache", OrderedDict())
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        value = build()
        cache[key] = value
        if len(cache) > self.cache_entries:
            cache.popitem(last=False)
        return value

    #: How many prepared queries and schemas `cached` keeps.
    cache_entries: int = 4096

    def rows(self, frame: Frame) -> int | None:
        """The frame's exact row count when it is known without an action, else None."""
        return None

    def consolidate_small(
        self,
        frames: Sequence[Frame],
        columns: Sequence[str],
        depth: int,
        frontier: Antichain | None = None,
        signs: Sequence[int] | None = None,
    ) -> Frame | None:
        """The union of `frames` (diffs times `signs[i]` when given), times advanced to
        `frontier` (when given) and consolidated,
        computed in the driver without a query when the kernel can do that exactly (small
        in-process frames of plain types, `kernel.driver`); None: run the query."""
        return None

    def join_small(self, left: Frame, right: Frame, shape: JoinShape) -> Frame | None:
        """`relational.join_on_keys` of `left` and `right` without a query, when the kernel
        can do it exactly (small in-process frames of plain types, `kernel.driver`); else
        None."""
        return None

    def rows_with_keys(
        self, frame: Frame, keys: Sequence[str], probe: Frame, by: Sequence[str] | None = None
    ) -> Frame | None:
        """The rows of `frame` whose `keys` equal the `by` columns (default: `keys`) of
        some row of `probe` (NULL equals NULL), when the kernel can pick them exactly
        without a query over the whole frame (an index; a key-filtered read of a stored
        batch); None: it cannot."""
        return None

    def key_union(self, frames: Sequence[Frame], keys: Sequence[str]) -> Frame | None:
        """The `keys` columns of all `frames` as one frame (repeats allowed), for probing
        with `rows_with_keys`; None when the kernel cannot build it without a query."""
        return None

    def shift_time(self, frame: Frame, name: str, by: int, at_most: int | None) -> Frame | None:
        """`frame` with `by` added to time column `name`, rows beyond `at_most` (when
        given) dropped, without a query; None when the kernel cannot do it so."""
        return None

    def reduce_small(
        self, rows: ReduceRows, logic: Callable[[Frame], Frame]
    ) -> tuple[Frame, Frame] | None:
        """A general reduce step's output and pending candidates, computed in the driver
        when its rows are few (`kernel.driver_reduce`) or its times form one chain per
        key (`kernel.chain_reduce`); None: run the step's query."""
        return None

    def key_index(
        self, frame: Frame, keys: Sequence[str], parts: Sequence[KeyIndex] = ()
    ) -> KeyIndex | None:
        """An index of a stored trace batch by `keys` (`kernel.key_index`), for lookups
        that cost what they return; None when the kernel keeps none for this frame.
        `parts`: the indexes of frames whose union, in order, is `frame` (merged rather
        than built again)."""
        return None

    def key_directory(self, frames: Sequence[Frame], keys: Sequence[str]) -> KeyDirectory | None:
        """Each key's sum of diffs over `frames` (a trace's batches) in a dense directory
        that follows the trace (`kernel.key_index.KeyDirectory`); None when the kernel
        keeps none for these frames or keys."""
        return None

    def key_sums(
        self,
        frame: Frame,
        keys: Sequence[str],
        index: KeyIndex | None,
        probe: Frame,
        by: Sequence[str],
    ) -> np.ndarray | None:
        """Per row of `probe`, the sum of the diffs of `frame`'s rows whose `keys` equal
        its `by` columns, whatever their times, through `index` (the frame's
        `key_index`, None: none kept); None when the kernel cannot say without a query."""
        return None

    def key_matches(
        self,
        frame: Frame,
        keys: Sequence[str],
        index: KeyIndex | None,
        probe: Frame,
        by: Sequence[str],
        names: Sequence[str],
    ) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """The rows of `frame` whose `keys` equal the `by` columns of some row of `probe`,
        through `index` (the frame's `key_index`, None: none kept): per row, the position
        of a probe row with its key, and its integer columns `names` as int64 arrays; in
        no particular order. None when the kernel cannot say without a query."""
        return None

    def prepare_many(self, branches: Sequence[Any], depth: int) -> Any:
        """One query evaluating many single map/filter branches (`linear.Branch`: columns
        and a condition, no time or diff factor) over one batch relation `src`, for
        `run_many`; None when the kernel has no such query."""
        return None

    def run_many(self, prepared: Any, frame: Frame) -> list[Frame] | None:
        """Each branch of `prepare_many`'s query over `frame`: per branch the rows its own
        query would give (data columns, times, diff); None: run them one by one."""
        return None

    def project_small(self, frame: Frame, selection: Selection) -> Frame | None:
        """The rows of `frame` a `Selection` keeps, its columns renamed, without a query,
        when the kernel can do that exactly (`kernel.driver`); None: run the query."""
        return None

    def bounds(self, frame: Frame, column: str) -> tuple[Any, Any] | None:
        """The least and greatest value of a column when known without an action, else None."""
        return None

    def join_apart(self, history: Sequence[Frame], delta: Frame) -> bool:
        """Whether a join of `delta` with the batches `history` runs faster as one join
        per batch, its outputs concatenated, than as one join with their union."""
        return False

    def null_free(self, frame: Frame, columns: Sequence[str]) -> bool:
        """Whether `columns` are known, without an action, to hold no NULL in `frame`.
        A join whose keys are NULL-free on both sides matches them with `=` rather
        than NULL-safe equality, which Spark evaluates through expressions of the keys
        (so a side partitioned by its keys is shuffled again); False where that gains
        nothing or is not known."""
        return False

    def prepare_pipeline(self, pipeline: Pipeline) -> Any:
        """`pipeline` rendered once, for `run_pipeline` (by default stage by stage)."""
        stages = tuple((s.name, self.prepare(s.query), s.store) for s in pipeline.stages)
        return stages, self.prepare(pipeline.final)

    def run_pipeline(
        self, prepared: Any, inputs: Mapping[str, Frame], keys: Sequence[str] = ()
    ) -> tuple[Frame, list[Frame]]:
        """The final query's frame, and the stored intermediates to `release` once the
        result is materialized. By default each `store` stage is materialized in turn."""
        stages, final = prepared
        frames = dict(inputs)
        stored: list[Frame] = []
        for name, query, store in stages:
            frame = self.run(query, frames)
            if store:
                frame = self.materialize(frame, keys).frame
                stored.append(frame)
            frames[name] = frame
        return self.run(final, frames), stored

    #: Results with at most this many rows are held in the driver as Arrow tables.
    small_rows: int = 50_000

    @property
    def probe_by_keys(self) -> bool:
        """Whether a join should first filter stored rows to a small batch's keys (a literal
        `IN` list lets Spark skip row groups; DuckDB's hash join gains nothing from it)."""
        return True

    @abstractmethod
    def materialize(
        self, frame: Frame, keys: Sequence[str] = (), estimate: int | None = None
    ) -> Stored:
        """Evaluate `frame` now and store its rows; the result has no lineage.

        `keys` are the columns readers will look rows up by (stored sorted by them
        where the engine can use that); `estimate` is a hint at the row count.
        """

    def merge(
        self,
        frames: Sequence[Frame],
        columns: Sequence[str],
        keys: Sequence[str],
        depth: int,
        frontier: Antichain | None,
        estimate: int | None = None,
        uniform: bool = False,
    ) -> Stored | None:
        """Trace batches merged into one stored batch: their union, times advanced to
        `frontier` (when given) and consolidated (`relational.advance`), stored as
        `materialize(..., keys, estimate)` stores it; done natively where the kernel can do
        it more cheaply than that query then `materialize` (None: run those). `uniform`:
        every time advances to the frontier's one element (`relational.advance`)."""
        return None

    def store_consolidated(
        self, frame: Frame, columns: Sequence[str], depth: int, keys: Sequence[str]
    ) -> Stored | None:
        """`frame` consolidated (`relational.consolidate`) and stored as `materialize(...,
        keys)` stores it, in one step where the kernel does that more cheaply than
        consolidating first (a big batch in the driver bound for Spark, consolidated
        bucket by bucket as it is written); None: consolidate, then `materialize`."""
        return None

    @abstractmethod
    def release(self, frame: Frame) -> None:
        """Free storage held by a frame returned from `materialize`."""

    @abstractmethod
    def nbytes(self, frame: Frame) -> int:
        """An estimate of the bytes a materialized frame holds."""

    @abstractmethod
    def schema(self, frame: Frame) -> pa.Schema:
        """The column names and types of a frame, as an Arrow schema (no action)."""

    @abstractmethod
    def fanout(self, branches: Sequence[Sequence[tuple[str, exp.Expr]]]) -> exp.Expression:
        """A select-list expression turning each input row into one row per branch.

        Every branch names the same output columns, in the same order.
        """

    @abstractmethod
    def map_arrow(
        self, frame: Frame, function: Callable[[pa.Table], pa.Table], schema: pa.Schema
    ) -> Frame:
        """Apply a Python function to the frame's rows, one Arrow batch at a time.

        `function` gets the batch (every column) and returns a table of `schema`.
        The slow path: Spark runs it in Python workers (tens of ms per action).
        """

    def concatenate(
        self, frames: Sequence[Frame], keys: Sequence[str], estimate: int | None = None
    ) -> Stored | None:
        """Stored frames end to end as one stored frame, sharing their rows rather than
        copying them (a trace merge with nothing to consolidate); None when the kernel
        stores a union only as `materialize` does. A reader that takes rows by position
        may first want the result `materialize`d whole."""
        return None

    def union(self, frames: Sequence[Frame]) -> Frame:
        """The multiset sum of frames with the same columns (by name)."""
        from dsql.runtime import relational

        names = {f"__u{i}": frame for i, frame in enumerate(frames)}
        columns = self.schema(frames[0]).names
        return self.query(relational.union_all(list(names), columns), names)

    def append_time(self, frame: Frame, name: str, value: int) -> Frame:
        """The frame with one more time column `name` (placed before `__diff__`) set to `value`.

        How a collection enters a loop: its times gain a round coordinate. Lazy where
        the engine allows, and without copying the other columns where it can.
        """
        names = [n for n in self.schema(frame).names if n != "__diff__"]
        columns = ", ".join(f"`{n}`" for n in names)
        query = sqlglot.parse_one(
            f"SELECT {columns}, {int(value)} AS `{name}`, `__diff__` FROM f", read="spark"
        )  # not a hot path: only kernels without a cheaper way get here
        assert isinstance(query, exp.Query)
        return self.query(query, {"f": frame})

    def set_time(self, frame: Frame, name: str, value: int) -> Frame:
        """The frame with time column `name` set to `value` in every row (a replay at one
        time). Lazy where the engine allows, without copying the other columns where it can."""
        names = self.schema(frame).names
        columns = ", ".join(f"{int(value)} AS `{n}`" if n == name else f"`{n}`" for n in names)
        query = sqlglot.parse_one(f"SELECT {columns} FROM f", read="spark")
        assert isinstance(query, exp.Query)
        return self.query(query, {"f": frame})

    def sql(self, select: exp.Expr) -> str:
        """The text of `select` in this kernel's dialect: each `PER_KERNEL` call as its
        spelling for this kernel (`per_kernel`), numeric quotients written out as exact
        division (`numeric_division.py`), operators nested in operators parenthesized
        (`precedence.py`)."""
        tree = numeric_division.expand(per_kernel(select, self.dialect), self.dialect)
        tree = precedence.parenthesized(tree)
        return tree.sql(dialect=self.dialect, comments=False)  # comments are user text


#: A call `DSQL_PER_KERNEL(duckdb, spark)`: a value no one tree spells alike on every
#: kernel, given as the in-process kernel's spelling and Spark's (the planner's function
#: registry builds them: `planner/functions.py`).
PER_KERNEL = "DSQL_PER_KERNEL"
#: A kernel's spelling `DSQL_UNSUPPORTED(message, hint)`: this kernel cannot evaluate the
#: call (a regular expression RE2 cannot run); rendering it raises an `UnsupportedError`.
UNSUPPORTED = "DSQL_UNSUPPORTED"
_SPELLING = {"duckdb": 0, "spark": 1}


def per_kernel(select: exp.Expr, dialect: str) -> exp.Expr:
    """`select` with each `PER_KERNEL` call replaced by its spelling for `dialect`
    (`select` itself when it has none).

    >>> e = sqlglot.parse_one("SELECT DSQL_PER_KERNEL(GCD(a, b), a) FROM t")
    >>> per_kernel(e, "duckdb").sql()
    'SELECT GCD(a, b) FROM t'
    """
    if not any(_is_per_kernel(n) for n in select.find_all(exp.Anonymous)):
        return select

    def spell(node: exp.Expression) -> exp.Expression:
        if _is_per_kernel(node):  # its spelling may hold further calls
            spelled = per_kernel(node.expressions[_SPELLING[dialect]], dialect)
            assert isinstance(spelled, exp.Expression)
            if isinstance(spelled, exp.Anonymous) and spelled.name.upper() == UNSUPPORTED:
                message, hint = (e.name for e in spelled.expressions)
                raise UnsupportedError(message, hint=hint or None)
            return spelled
        return node

    return select.transform(spell)


def _is_per_kernel(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == PER_KERNEL


#: How the engines spell a value's internal column (`_c3`), and the phrases that carry one.
_INTERNAL_NAME = re.compile(r'"?\b_c\d+\b"?')
_INTERNAL_PHRASES = (
    re.compile(r" when casting from source column \S+"),  # DuckDB's casts
    re.compile(r" in expression \(.*\)\.?$"),  # DuckDB's division by zero
)


def engine_message(message: str, text: str | None) -> tuple[str, bool]:
    """An engine's error message as the user reads it, and whether it is a message the
    plan raised itself (`RAISE_ERROR('...')` in the statement `text`: PostgreSQL's own
    words, to be shown as they are). Internal column names (`_c3`) never reach the
    user: the phrases naming one are dropped, any other name reads "a column".

    >>> engine_message("Conversion Error: no INT32 when casting from source column _c1", "")
    ('Conversion Error: no INT32', False)
    >>> engine_message("Invalid Input Error: too many", "SELECT RAISE_ERROR('too many')")
    ('too many', True)
    """
    for raised in re.findall(r"RAISE_ERROR\('((?:[^']|'')*)'\)", text or "", re.IGNORECASE):
        said = raised.replace("''", "'")
        if said in message:
            return said, True
    for phrase in _INTERNAL_PHRASES:
        message = phrase.sub("", message)
    return _INTERNAL_NAME.sub("a column", message), False
