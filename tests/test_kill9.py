"""Crash test: a random workload killed with SIGKILL at random moments, restarted on the
same data directory, must come back holding every acknowledged write and nothing of an
unacknowledged transaction, with every view equal to its query recomputed by DuckDB.

The cycles run through `kill_loop` (a forking server, the child's report file, the kill
at a random moment). The child (`child`) recovers the directory, reports what it holds,
then runs units of work (one statement, or BEGIN ... COMMIT around several), reporting
each unit before it runs and again once it returned. The parent keeps the acknowledged
units in a DuckDB model: the recovered state must equal the model, or the model plus
the one unit that was in flight at the kill.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
from kill_loop import Say, forking_server, kill_cycles, run_child

KILLS = 110
#: Small, so that checkpoints (and kills during them) happen every few cycles.
CHECKPOINT_BYTES = 24_000
MAX_TABLES = 4
MAX_VIEWS = 6

#: Imports and caches built once in the server, before the forks (no DuckDB yet).
PRELOAD = """
import duckdb, pandas, pyarrow, dsql.api, dsql.durable, dsql.runtime.kernel.local
from dsql import grammar
grammar.parse("SELECT 1")
dsql.api.compile("SELECT k % 4, sum(v) FROM t GROUP BY 1", {"t": {"k": "int", "v": "int"}})
"""

State = dict[str, dict[str, list[list[Any]]]]


def _sorted(rows: list[Any]) -> list[list[Any]]:
    return sorted(
        ([*r] for r in rows), key=lambda r: [(x is None, x if x is not None else 0) for x in r]
    )


def dump(con: Any) -> State:
    """Every table's and view's rows in a dsql connection."""
    tables = [r[0] for r in con.execute("SHOW TABLES").fetchall()]
    views = [r[0] for r in con.execute("SHOW VIEWS").fetchall()]
    return {
        "tables": {t: _sorted(con.execute(f"SELECT * FROM {t}").fetchall()) for t in tables},
        "views": {v: _sorted(con.execute(f"SELECT * FROM {v}").fetchall()) for v in views},
    }


def model_state(model: duckdb.DuckDBPyConnection) -> State:
    """Every table's and view's rows in the DuckDB model."""
    found = model.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall()
    state: State = {"tables": {}, "views": {}}
    for name, kind in found:
        rows = _sorted(model.execute(f"SELECT * FROM {name}").fetchall())
        state["views" if kind == "VIEW" else "tables"][name] = rows
    return state


# --- the child's workload ----------------------------------------------------------------


def _rows(rng: random.Random) -> str:
    values = []
    for _ in range(rng.randint(1, 5)):
        v = "NULL" if rng.random() < 0.1 else str(rng.randint(-5, 50))
        values.append(f"({rng.randint(0, 30)}, {v})")
    return ", ".join(values)


def _dml(rng: random.Random, table: str) -> str:
    match rng.choice(["insert", "insert", "update", "delete"]):
        case "insert":
            return f"INSERT INTO {table} VALUES {_rows(rng)}"
        case "update":
            return (
                f"UPDATE {table} SET v = v + {rng.randint(1, 3)} WHERE k % 3 = {rng.randint(0, 2)}"
            )
    return f"DELETE FROM {table} WHERE k % 5 = {rng.randint(0, 4)} AND v > {rng.randint(0, 30)}"


def _view_query(rng: random.Random, tables: list[str]) -> tuple[str, list[str]]:
    t = rng.choice(tables)
    match rng.choice(["agg", "join", "filter", "distinct"]):
        case "agg":
            return f"SELECT k % 4 AS g, count(*) AS c, sum(v) AS s FROM {t} GROUP BY k % 4", [t]
        case "join":
            u = rng.choice(tables)
            query = f"SELECT a.k, a.v AS av, b.v AS bv FROM {t} a JOIN {u} b ON a.k = b.k"
            return query, sorted({t, u})
        case "filter":
            return f"SELECT k, v FROM {t} WHERE v > {rng.randint(0, 40)}", [t]
    return f"SELECT DISTINCT v FROM {t}", [t]


def next_unit(rng: random.Random, tables: list[str], views: dict[str, list[str]]) -> dict[str, Any]:
    """A random unit of work: the statements dsql runs (`txn`: inside BEGIN/COMMIT) and
    the ones that do the same to the DuckDB model."""
    n = rng.getrandbits(40)
    roll = rng.random()
    if not tables or (roll < 0.06 and len(tables) < MAX_TABLES):
        sql = f"CREATE TABLE t{n} (k int, v int)"
        return {"sql": [sql], "model": [sql], "txn": False}
    if roll < 0.08 and len(tables) < MAX_TABLES:
        sql = f"CREATE TABLE t{n} AS SELECT k, v FROM {rng.choice(tables)} WHERE v > 2"
        return {"sql": [sql], "model": [sql], "txn": False}
    if roll < 0.12:
        t = rng.choice(tables)
        dependents = [v for v, deps in views.items() if t in deps]
        model = [f"DROP VIEW {v}" for v in dependents] + [f"DROP TABLE {t}"]
        return {"sql": [f"DROP TABLE {t} CASCADE"], "model": model, "txn": False}
    if roll < 0.20 and len(views) < MAX_VIEWS:
        query, deps = _view_query(rng, tables)
        name = f"v{n}_" + "_".join(deps)
        kind = "MATERIALIZED VIEW" if rng.random() < 0.7 else "VIEW"
        return {
            "sql": [f"CREATE {kind} {name} AS {query}"],
            "model": [f"CREATE VIEW {name} AS {query}"],
            "txn": False,
        }
    if roll < 0.25 and views:
        v = rng.choice(sorted(views))
        return {"sql": [f"DROP VIEW {v}"], "model": [f"DROP VIEW {v}"], "txn": False}
    if roll < 0.27:
        return {
            "sql": [f"CREATE INDEX i{n} ON {rng.choice(tables)} (k)"],
            "model": [],
            "txn": False,
        }
    if roll < 0.40:
        statements = [_dml(rng, rng.choice(tables)) for _ in range(rng.randint(2, 4))]
        return {"sql": statements, "model": statements, "txn": True}
    sql = _dml(rng, rng.choice(tables))
    return {"sql": [sql], "model": [sql], "txn": False}


def _catalog_after(unit: dict[str, Any], tables: list[str], views: dict[str, list[str]]) -> None:
    for sql in unit["sql"]:
        words = sql.split()
        if words[:2] == ["CREATE", "TABLE"]:
            tables.append(words[2])
        elif words[:2] == ["DROP", "TABLE"]:
            tables.remove(words[2])
            for v in [v for v, deps in views.items() if words[2] in deps]:
                del views[v]
        elif words[0] == "CREATE" and "VIEW" in words[:3]:
            name = words[words.index("VIEW") + 1]
            views[name] = name.split("_")[1:]
        elif words[:2] == ["DROP", "VIEW"]:
            del views[words[2]]


def child(out: str, data_dir: str, seed: str) -> None:
    """Recover `data_dir`, report its state, then run units until killed (never returns)."""

    def work(say: Say) -> None:
        import dsql

        con = dsql.connect(kernel="local", data_dir=data_dir, checkpoint_bytes=CHECKPOINT_BYTES)
        state = dump(con)
        say({"state": state})
        say({"ready": True})
        tables = sorted(state["tables"])
        views = {v: v.split("_")[1:] for v in state["views"]}
        rng = random.Random(int(seed))
        while True:
            unit = next_unit(rng, tables, views)
            say({"try": unit})
            if unit["txn"]:
                con.execute("BEGIN")
            for sql in unit["sql"]:
                con.execute(sql)
            if unit["txn"]:
                con.execute("COMMIT")
            say({"ack": True})
            _catalog_after(unit, tables, views)

    run_child(out, work)


# --- the parent ---------------------------------------------------------------------------


def _check(state: State, model: duckdb.DuckDBPyConnection, inflight: dict[str, Any] | None) -> bool:
    """The recovered `state` is the model's, or the model's with the in-flight unit
    applied (then it is kept in the model: it was durable; returns True)."""
    expected = model_state(model)
    if state == expected:
        return False
    assert inflight is not None, _diff(state, expected)
    model.execute("BEGIN")
    for sql in inflight["model"]:
        model.execute(sql)
    with_unit = model_state(model)
    if state == with_unit:
        model.execute("COMMIT")
        return True
    model.execute("ROLLBACK")
    raise AssertionError(
        f"recovered state is neither before nor after {inflight['sql']}:\n"
        f"{_diff(state, expected)}\n--- against the state after it:\n{_diff(state, with_unit)}"
    )


def _diff(state: State, expected: State) -> str:
    lines = []
    for kind in ("tables", "views"):
        for name in sorted(set(state[kind]) | set(expected[kind])):
            got, want = state[kind].get(name), expected[kind].get(name)
            if got != want:
                lines.append(f"{kind} {name}: recovered {got} expected {want}")
    return "\n".join(lines)


def test_kill9_random_workload_recovers_every_acknowledged_write(tmp_path: Path) -> None:
    rng = random.Random(39)
    data_dir = tmp_path / "data"
    model = duckdb.connect(config={"threads": 1})
    inflight: dict[str, Any] | None = None
    acked = verified = kept = 0
    with forking_server("test_kill9", PRELOAD) as server:
        cycles = kill_cycles(
            server,
            tmp_path,
            rng,
            KILLS,
            lambda: [str(data_dir), str(rng.getrandbits(32))],
            delay=(0.005, 0.25),
            early=0.1,  # a kill during recovery
        )
        for messages in cycles:
            if not any("ready" in m for m in messages):
                continue  # killed before it had recovered: nothing new happened
            kept += _check(messages[0]["state"], model, inflight)
            verified += 1
            inflight = None
            for m in messages[2:]:
                if "try" in m:
                    inflight = m["try"]
                elif "ack" in m:
                    assert inflight is not None
                    for sql in inflight["model"]:
                        model.execute(sql)
                    inflight = None
                    acked += 1

    import dsql

    con = dsql.connect(kernel="local", data_dir=str(data_dir))
    _check(dump(con), model, inflight)
    con.close()
    checkpoints = len(list(data_dir.glob("checkpoint-*")))
    print(
        f"{KILLS} kills, {verified} recoveries checked, {acked} units acknowledged, "
        f"{kept} in-flight units found durable, checkpoint kept: {checkpoints}"
    )
    assert verified >= KILLS * 0.8 and acked > KILLS, (verified, acked)
