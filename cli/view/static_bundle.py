"""The static bundle: the same pages written as flat HTML files that open
from disk with no server. Filtering on the index and search within a run
are done by small inline scripts; without them every row is shown."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from cli.view.jinja_pages import Links
from cli.view.site import Site
from orchestrator.errors import ConfigError
from store import Store
from store.read.browse import RunFilter
from store.write import batches as bstore

EXPORT_LIMIT = 10_000


def bundle_runs(store: Store, refs: list[str]) -> list[str]:
    """The full ids of the runs asked for, or of every run (newest first)."""
    if refs:
        return [store.resolve(ref) for ref in refs]
    found = store.browse(RunFilter(per_page=EXPORT_LIMIT))
    return [s.run.id for s in found.runs]


def export_bundle(
    store: Store, dest: Path, refs: list[str],
    progress: Callable[[int, int, str], None] = lambda done, total, name: None,
) -> list[Path]:
    """Write index.html, a page and a chain page per run, a compare page for
    each run whose parent is in the bundle, and batches.html with a page per
    batch that any bundled run belongs to. Returns the files written."""
    run_ids = bundle_runs(store, refs)
    batch_ids = bstore.batches_of_runs(store, run_ids) if refs else bstore.list_batches(store, per_page=EXPORT_LIMIT)[0]
    site = Site(store, Links(static=True))
    site.bundled = set(run_ids)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {dest}: {exc.strerror or exc}", path=str(dest)) from None
    links = site.render.links
    pages: list[tuple[str, Callable[[], str]]] = [(links.runs(), lambda: site.static_runs_page(run_ids))]
    wanted = set(run_ids)
    for run_id in run_ids:
        pages.append((links.run(run_id), partial(site.run_page, run_id)))
        pages.append((links.chain(run_id), partial(site.chain_page, run_id)))
        parent = store.run(run_id).parent_run_id
        if parent is not None and parent in wanted:
            pages.append((links.compare(parent, run_id), partial(site.compare_page, parent, run_id)))
    pages.append((links.batches(), lambda: site.batches_page(ids=batch_ids)))
    for batch_id in batch_ids:
        pages.append((links.batch(batch_id), partial(site.batch_page, batch_id)))
    written = []
    for done, (name, render) in enumerate(pages, start=1):
        path = dest / name
        try:
            path.write_text(render(), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from None
        progress(done, len(pages), name)
        written.append(path)
    return written
