"""Import and OTLP export throughput on generated trajectories.

For each source format, 1,000 trajectory files are generated from Escrow's own
fixtures in tests/data/interop (each a copy with its task text made unique,
so every file has its own sha256), then timed side by side in one run:

- parse only (bytes -> typed records, pure), and full import (parse plus the
  store write) two ways: one file a call (``import_file``: one transaction
  and one run-totals pass per file) and batched (``import_files``, as
  ``escrow import`` does: up to 100 parsed files a transaction, their rows
  in one statement per table, their totals in one pass), in trajectories per
  second, with the SQL statements each way sent per file;
- the OTLP export of every imported run: building the spans with the
  OpenTelemetry SDK, and building plus encoding them as OTLP JSON, in spans
  per second (and sending them, with --otlp-endpoint URL).

Usage: .venv/bin/python bench/bench_interop.py [--n 1000] [--otlp-endpoint URL]
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, event

from orchestrator.interop import read_trajectories
from store import Store
from store.read.reports import otel_export
from store.write.importer import ImportOutcome, import_file, import_files

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "interop"
SOURCES = {
    "swe-agent": "swe-agent/slugify_v1.traj",
    "mini-swe-agent": "mini-swe-agent/slugify_v1.json",
    "openhands": "openhands/hello_events.json",
    "inspect": "inspect/arith.eval",
    "atif": "atif/terminal_v1_6.json",
}


def variant_json(data: bytes, i: int) -> bytes:
    """The same document with a unique marker in its first user text."""
    marker = f" [bench copy {i}]"
    doc = json.loads(data)
    text = json.dumps(doc)
    for key in ('"role": "user", "content": "', '"source": "user", "message": "', '"message": "'):
        at = text.find(key)
        if at != -1:
            at += len(key)
            return (text[:at] + marker + text[at:]).encode()
    raise ValueError("no user text to mark")


def variant_eval(data: bytes, i: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as old, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            body = old.read(info.filename)
            if info.filename.startswith("samples/"):
                sample = json.loads(body)
                sample["id"] = f"{sample['id']}-bench-{i}"
                body = json.dumps(sample).encode()
            new.writestr(info.filename, body)
    return out.getvalue()


def fixture_bytes(relative: str) -> bytes:
    """A fixture's bytes; an Inspect log is zipped from its ``.eval.d`` folder."""
    if not relative.endswith(".eval"):
        return (FIXTURES / relative).read_bytes()
    folder, out = FIXTURES / f"{relative}.d", io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            archive.writestr(path.relative_to(folder).as_posix(), path.read_bytes())
    return out.getvalue()


def generate(root: Path, n: int) -> dict[str, list[Path]]:
    files: dict[str, list[Path]] = {}
    for fmt, relative in SOURCES.items():
        data = fixture_bytes(relative)
        folder = root / fmt
        folder.mkdir(parents=True)
        make = variant_eval if fmt == "inspect" else variant_json
        files[fmt] = []
        for i in range(n):
            path = folder / f"{i}{Path(relative).suffix}"
            path.write_bytes(make(data, i))
            files[fmt].append(path)
    return files


T = TypeVar("T")


def timed(work: Callable[[list[Path]], T], files: list[Path]) -> tuple[T, float, int]:
    """What ``work`` returns for ``files``, its seconds and the SQL statements it sent."""
    sent = [0]

    def count(*_: Any) -> None:
        sent[0] += 1

    event.listen(Engine, "before_cursor_execute", count)
    try:
        started = time.perf_counter()
        result = work(files)
        return result, time.perf_counter() - started, sent[0]
    finally:
        event.remove(Engine, "before_cursor_execute", count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="trajectory files per format")
    parser.add_argument("--otlp-endpoint", help="also send the spans to this OTLP/HTTP traces URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="escrow-bench-interop-") as tmp:
        root = Path(tmp)
        print(f"generating {args.n} files per format ...", flush=True)
        files = generate(root, args.n)
        store = Store.open(f"sqlite:///{root / 'bench.db'}", synchronous="NORMAL")
        print(f"{'':<28}{' trajectories/s ':-^31}{' SQL per file ':-^17}")
        print(f"{'format':<15}{'files':>6}{'calls':>7}{'parse':>7}{'per file':>9}{'batched':>8}{'ratio':>7}"
              f"{'per file':>9}{'batched':>8}")
        run_ids: list[str] = []
        all_s = {"per file": 0.0, "batched": 0.0}
        all_n = {"per file": 0, "batched": 0}
        for fmt, paths in files.items():
            started = time.perf_counter()
            trajectories = sum(len(read_trajectories(p.read_bytes(), str(p))) for p in paths)
            parse_s = time.perf_counter() - started
            # Two halves of the same files, so that both ways write to a store of the same size.
            half = len(paths) // 2
            single, single_s, single_sql = timed(lambda some: [import_file(store, p) for p in some], paths[:half])
            batched, batched_s, batched_sql = timed(
                lambda some: [o for o in import_files(store, some) if isinstance(o, ImportOutcome)], paths[half:]
            )
            outcomes = single + batched
            assert len(outcomes) == len(paths) and all(not o.skipped for o in outcomes), "every generated file is new"
            run_ids += [r for o in outcomes for r in o.run_ids]
            calls = sum(o.calls for o in outcomes)
            per_file = sum(len(o.run_ids) for o in single) / single_s
            in_batches = sum(len(o.run_ids) for o in batched) / batched_s
            all_s["per file"] += single_s
            all_s["batched"] += batched_s
            all_n["per file"] += sum(len(o.run_ids) for o in single)
            all_n["batched"] += sum(len(o.run_ids) for o in batched)
            print(
                f"{fmt:<15}{len(paths):>6}{calls:>7}{trajectories / parse_s:>7.0f}{per_file:>9.1f}{in_batches:>8.1f}"
                f"{in_batches / per_file:>6.2f}x{single_sql / len(single):>9.2f}{batched_sql / len(batched):>8.2f}",
                flush=True,
            )
        print(f"all formats: per file {all_n['per file'] / all_s['per file']:.1f} traj/s, batched "
              f"{all_n['batched'] / all_s['batched']:.1f} traj/s (goal: 50)")
        recorded = [store.trajectory(r) for r in run_ids]
        started = time.perf_counter()
        spans = otel_export.collect(recorded, "bench")
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        encoded = json.dumps(otel_export.otlp_json(otel_export.collect(recorded, "bench")))
        encode_s = time.perf_counter() - started
        print(f"OTLP export of {len(run_ids)} runs, {len(spans)} spans ({len(encoded) / 1e6:.1f} MB of OTLP JSON):")
        print(f"  SDK spans built     {len(spans) / build_s:>10.0f} spans/s")
        print(
            f"  built + OTLP JSON   {len(spans) / encode_s:>10.0f} spans/s  ({build_s / encode_s:.2f}x of build only)"
        )
        if args.otlp_endpoint:
            started = time.perf_counter()
            otel_export.send(otel_export.collect(recorded, "bench"), args.otlp_endpoint)
            send_s = time.perf_counter() - started
            print(
                f"  built + sent        {len(spans) / send_s:>10.0f} spans/s  ({build_s / send_s:.2f}x of build only)"
            )
        store.close()


if __name__ == "__main__":
    main()
