"""Error paths of the runtime: each refusal is a `DsqlError` that says what is wrong,
and the worker stays usable afterwards (a new operator runs a round correctly).
"""

from __future__ import annotations

from typing import Any

import pytest
from oracle import accumulate, updates_from_arrow

from dsql.errors import DsqlError, ParseError, SchemaError, TimeError
from dsql.runtime.dataflow import Worker
from dsql.runtime.kernel.base import Kernel


def _setup(kernel: Kernel) -> tuple[Worker, Any]:
    worker = Worker(kernel)
    return worker, worker.new_input({"k": "int", "v": "int"})


def _still_usable(worker: Worker, source: Any) -> None:
    """A new operator on `source` runs a round and shows every row inserted so far."""
    doubled = source.to_collection().map("k", "v * 2 AS w").capture()
    source.insert((7, 1))
    source.advance_to(source.time + 1)
    source.flush()
    worker.step()
    rows = accumulate(updates_from_arrow(doubled.poll()), source.time)
    assert rows[(7, 2)] >= 1


def test_unknown_column_in_map(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    with pytest.raises(SchemaError, match="nope") as info:
        source.to_collection().map("k", "nope + 1 AS x")
    assert isinstance(info.value, DsqlError)
    _still_usable(worker, source)


def test_unknown_column_in_filter(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    with pytest.raises(SchemaError, match="nope"):
        source.to_collection().filter("nope > 1")
    _still_usable(worker, source)


def test_unparseable_expression_has_position(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    with pytest.raises(ParseError) as info:
        source.to_collection().map("k + AS x")
    error = info.value
    assert error.statement == "k + AS x"
    assert error.position is not None and error.position[0] == 1
    assert "^" in str(error), "the rendering points at the position"
    with pytest.raises(ParseError):
        source.to_collection().filter("k >>> 1 )")
    _still_usable(worker, source)


def test_join_key_type_mismatch(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    names = worker.new_input({"k": "string", "name": "string"})
    with pytest.raises(SchemaError) as info:
        source.to_collection().join(names.to_collection(), on=["k"])
    message = str(info.value)
    assert "int64" in message and "string" in message and "k" in message
    assert info.value.hint, "the error says how to fix it"
    # Both inputs keep working, including the one whose join was refused (with a key
    # that is no number, so nothing may still be comparing it with an int).
    names.insert(("seven", "7"))
    names.advance_to(1)
    names.flush()
    _still_usable(worker, source)


def test_concat_schema_mismatch(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    other = worker.new_input({"k": "int", "w": "int"})
    with pytest.raises(SchemaError, match=r"\(k, v\).*\(k, w\)"):
        source.to_collection().concat(other.to_collection())
    other.advance_to(1)
    other.flush()
    _still_usable(worker, source)


def test_update_before_the_input_time(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    source.advance_to(5)
    with pytest.raises(TimeError, match="before"):
        source.update_at((1, 1), 3, 1)
    _still_usable(worker, source)


def test_advance_backwards(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    source.advance_to(5)
    with pytest.raises(TimeError, match="5"):
        source.advance_to(2)
    assert source.time == 5
    _still_usable(worker, source)


def test_row_with_wrong_number_of_values(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    with pytest.raises(SchemaError, match="3 values"):
        source.insert((1, 2, 3))
    with pytest.raises(SchemaError, match="1 values|columns"):
        source.insert((1,))
    _still_usable(worker, source)


def test_wrong_value_type_at_flush_loses_no_flushed_data(kernel: Kernel) -> None:
    worker, source = _setup(kernel)
    capture = source.to_collection().capture()
    got: list[tuple] = []
    source.insert((1, 10))
    source.advance_to(1)
    source.flush()
    worker.step()
    got += updates_from_arrow(capture.poll())

    source.insert(("one", 20))
    with pytest.raises(SchemaError, match="one") as info:
        source.flush()
    assert "k int64" in str(info.value), "the hint names the column types"

    source.insert((2, 20))
    source.advance_to(2)
    source.flush()
    worker.step()
    got += updates_from_arrow(capture.poll())
    assert accumulate(got, 1) == {(1, 10): 1, (2, 20): 1}
    _still_usable(worker, source)
