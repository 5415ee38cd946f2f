"""Append-only Parquet tables whose rows are the stage result models.

Layout: <root>/tables/<table>/run_id=<run>/part-<time>-<uuid>.parquet, written to a temporary name and
renamed, so a crash never leaves a half-written part. Nested models are flattened with `parent_child`
column names; dict and list fields are stored as JSON text. The Arrow schema comes from the model's types,
so every part of a table agrees (docs/ARTIFACTS.md lists the columns).
"""

from __future__ import annotations

import json
import math
import os
import time
import types
import typing
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

_SCALARS = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
M = TypeVar("M", bound=BaseModel)


def _unwrap(annotation: Any) -> Any:
    """X | None -> X."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return annotation


def columns(model: type[BaseModel]) -> dict[str, Any]:
    """The model's fields that are table columns: all but those marked json_schema_extra={"column": False}."""
    return {name: field for name, field in model.model_fields.items()
            if not (isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("column") is False)}


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, pa.DataType]]:
    out = []
    for name, field in columns(model).items():
        ann = _unwrap(field.annotation)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _fields(ann, f"{prefix}{name}_")
        elif get_origin(ann) is Literal:
            out.append((prefix + name, pa.string()))
        else:
            out.append((prefix + name, _SCALARS.get(ann, pa.string())))  # dict/list -> JSON text
    return out


def schema(model: type[BaseModel]) -> pa.Schema:
    return pa.schema(_fields(model))


def row(instance: BaseModel, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in columns(type(instance)):
        value = getattr(instance, name)
        if isinstance(value, BaseModel):
            out.update(row(value, f"{prefix}{name}_"))
        elif isinstance(value, (dict, list)):
            out[prefix + name] = json.dumps(
                [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
                if isinstance(value, list) else value, sort_keys=True, default=str)
        else:
            out[prefix + name] = value
    return out


def append(root: str | Path, table: str, run_id: str, rows: Sequence[BaseModel]) -> Path | None:
    if not rows:
        return None
    part_dir = Path(root) / "tables" / table / f"run_id={run_id}"
    part_dir.mkdir(parents=True, exist_ok=True)
    arrow = pa.Table.from_pylist([row(r) for r in rows], schema=schema(type(rows[0])))
    name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = part_dir / f".tmp-{name}"
    pq.write_table(arrow, tmp)
    os.replace(tmp, part_dir / name)
    return part_dir / name


def read(root: str | Path, table: str, run_id: str | None = None) -> pd.DataFrame:
    """A table as pandas, parts in write order within each run, the run_id partition as a column; an empty frame
    if nothing was written. Parts are read one by one and concatenated, so parts written by different code
    versions keep all their columns (a column a part lacks reads as missing): reading the directory as one
    dataset would take one part's schema and silently drop the columns a newer model added. The parts are joined
    as Arrow tables and converted to pandas once, not per part; parts whose types Arrow cannot reconcile (a field
    whose type changed) are joined by pandas instead."""
    path = Path(root) / "tables" / table
    runs = [path / f"run_id={run_id}"] if run_id is not None else sorted(path.glob("run_id=*"))
    parts = [read_part(part, run.name.removeprefix("run_id="))
             for run in runs for part in sorted(run.glob("part-*.parquet"))]
    if not parts:
        return pd.DataFrame()
    try:
        return pa.concat_tables(parts, promote_options="permissive").to_pandas()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pd.concat([part.to_pandas() for part in parts], ignore_index=True)


def read_part(path: Path, run_id: str) -> pa.Table:
    """One part with its run_id column (ParquetFile reads one file without pq.read_table's dataset machinery)."""
    with pq.ParquetFile(path) as f:
        part = f.read()
    return part.append_column("run_id", pa.array([run_id] * part.num_rows, pa.string()))


def partitions(root: str | Path, table: str) -> list[str]:
    """The table's partition names (its `run_id` values), sorted; no part is read. A partition without a part (a crash
    between its mkdir and its first part's rename) is not one, as `read` would not see it."""
    path = Path(root) / "tables" / table
    return sorted(d.name.removeprefix("run_id=") for d in path.glob("run_id=*") if any(d.glob("part-*.parquet")))


def model_of(model: type[M], record: dict[str, Any], prefix: str = "") -> M:
    """The inverse of `row`: a model from its flattened row (nested models by prefix, dict/list fields from JSON;
    missing and NaN values left to the model's defaults)."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        ann = _unwrap(field.annotation)
        key = prefix + name
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            if any(k.startswith(key + "_") and _present(v) for k, v in record.items()):
                values[name] = model_of(ann, record, key + "_")
        elif key in record and _present(record[key]):
            value = record[key]
            is_json = get_origin(ann) in (dict, list) or ann in (dict, list)
            values[name] = json.loads(value) if is_json and isinstance(value, str) else value
    return model.model_validate(values)


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))
