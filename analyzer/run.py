"""One run for every engine: :func:`run` takes :class:`~analyzer.options.Options` and returns the exit code.

The engines differ in where the document comes from -- the single pass over PATHs
(:func:`analyzer.pipeline.run`), a store read whole, a store's partitions merged in memory or written
one by one (:mod:`analyzer.scale.partitions`, :mod:`analyzer.scale.spill`), Spark -- and in nothing
else: the baseline is applied, the outputs written, the summary shown and the exit code decided
(:func:`analyzer.pipeline.exit_code`) once, here.  ``echo(text, err=True)`` is how the run talks to the
user (the command line passes click's); every line of log content is made safe for a terminal first.
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable

from analyzer import document, pipeline, terminal
from analyzer import window as windows
from analyzer.anomalies import occurrences
from analyzer.ingest.reading import Reading
from analyzer.options import Options
from analyzer.outputs import write_all
from analyzer.tables import keep_pandas_out

Echo = Callable[..., None]  # echo(text, err=True)


def run(options: Options, echo: Echo) -> int:
    """Analyze as ``options`` say and write the outputs; the exit code (0 clean, 1 findings or lost input at
    ``--fail-on``, 2 nothing readable or nothing to judge).  Usage errors are :meth:`Options.problem`'s, found
    before; a failure of the library (an unusable baseline, a damaged store, an output that cannot be
    written) is an :class:`~analyzer.errors.AuditError`."""
    o = options
    if o.engine == "local":
        keep_pandas_out()  # (the Spark engine hands pandas objects to pyarrow; a store's pyarrow.dataset imports it anyway)
    base = None
    if o.baseline:  # read first: a baseline that cannot be used fails the run before the analysis, not after it
        from analyzer.document import baseline as baselines

        base = baselines.load(o.baseline)
    document.generated_at()  # a malformed SOURCE_DATE_EPOCH fails now, not after the whole analysis
    unreadable: list[str] = []  # PATHs that could not go into a store: lost input, as an unreadable input is
    if o.engine == "spark":
        result, unreadable = _spark(o, echo)
    elif o.store:
        skipped: list[str] = []  # the files of the PATHs passed over: the document's, as a run over files has them
        if o.paths:
            unreadable, skipped = _ingest_paths(o, o.store, echo, "read into the store (analyze it without --store for the reason)")
        store = _pinned(o.store, echo)  # one manifest snapshot for the whole analysis, every part checked first
        if o.partitions > 1 and not (o.outputs.html or o.outputs.junit or o.outputs.github):
            return _spill(o, store, base, _lost(o, unreadable), echo, skipped)
        result = _store(o, store)
        document.passed_over(result.document, skipped)
    else:
        result = pipeline.run(list(o.paths), o.reading, o.progress, columnar=True, window=windows.of(o.since, o.until))
    return _finish(o, result, base, _lost(o, unreadable), echo)


def _lost(o: Options, unreadable: list[str]) -> bool:
    """A PATH that could not go into the store fails ``--fail-on error`` (and ``warning``) like an unreadable input."""
    return bool(unreadable) and o.fail_on in ("error", "warning")


def _store(o: Options, store) -> pipeline.Result:
    """A store's document in memory (``store``: pinned, see :func:`analyzer.scale.store.reading`): read whole, or
    its partitions merged (the report, JUnit and the annotations need the whole document)."""
    from analyzer.scale import store as stores

    if o.partitions > 1:
        from analyzer.scale import partitions

        return partitions.analyze(store, o.partitions, o.since, o.until, o.sessions, o.progress)
    win = stores.window(store, o.since, o.until)  # a duration: back from the store's newest start
    tables, rows = stores.load(store, win.since, win.until, o.sessions)
    # a filter that kept no input read the store all the same: that is "nothing matched", not "unreadable"
    readable = sum(1 for r in rows if not r["error"]) or (stores.manifest(store).height if (win.bounded or o.sessions) else 0)
    # handed over: the events are let go once the frames exist, and their hex digests sooner
    result = pipeline.analyze_tables(tables, rows, [], [], readable, consume=True, columnar=True)
    windows.stamp(result.document, win)  # summary.window: the bounds applied
    return result


def _spill(o: Options, store, base, lost_input: bool, echo: Echo, skipped: list[str]) -> int:
    """Bounded memory: the JSON and JSON Lines written partition by partition, never held whole."""
    from analyzer.scale import spill

    written = spill.write(store, o.partitions, o.outputs.json_lines, o.outputs.json, o.since, o.until, o.sessions, o.progress,
                          baseline=base, skipped=skipped)
    _nothing_matched(written.summary, o, echo)
    if not o.quiet:
        outs = tuple(out for out in (o.outputs.json, o.outputs.json_lines) if out)
        echo(terminal.safe(terminal.summary_text({"summary": written.summary, "findings": [], "anomalies": []}, outs)),
             err=bool(o.outputs.to_stdout()))
    return _exit(pipeline.exit_code(written.summary, written.encrypted, o.fail_on, lost_input), echo)


def _spark(o: Options, echo: Echo) -> tuple[pipeline.Result, list[str]]:
    """--engine spark: ingest PATHs into the store (a temporary one without --store), then Spark; and the PATHs
    that could not be read into it."""
    from analyzer.scale import engine_spark, store as stores

    engine_spark.check()  # no pyspark or no Java: say so before ingesting anything
    with tempfile.TemporaryDirectory(prefix="mcp-sse-audit-store-") as tmp:
        where = o.store or tmp
        unreadable, skipped = [], []
        if o.paths:
            unreadable, skipped = _ingest_paths(o, where, echo, "read (run analyze without --engine spark on it for the reason)")
            if not stores.manifest(where).height:
                return pipeline.Result({"summary": {}}, 0), unreadable  # nothing readable: the caller says so, exit 2
        # Spark lists a local store's folders itself: check every part first; over an object store its
        # tasks read the parts the manifest lists, and check each one where they read it
        store = _pinned(where, echo, check_parts=not stores.locate(where).remote)
        result = engine_spark.analyze(store, o.spark_master, o.since, o.until, o.sessions, o.progress)
        document.passed_over(result.document, skipped)
        return result, unreadable


def _ingest_paths(o: Options, where, echo: Echo, why: str) -> tuple[list[str], list[str]]:
    """The PATHs ingested into the store ``where`` first; the ones that could not be, each named (``why``: what
    could not be done, and where the reason is); and the files passed over as no capture."""
    from analyzer.scale import store as stores

    rep = stores.ingest(list(o.paths), where, o.reading, o.progress)
    for path in rep.unreadable:
        echo(terminal.safe(f"error: {path}: could not be {why}"))
    return rep.unreadable, rep.skipped


def _pinned(where, echo: Echo, check_parts: bool = True):
    """The store pinned to one manifest snapshot for the whole analysis (:func:`analyzer.scale.store.reading`),
    its warnings said."""
    from analyzer.scale import store as stores

    pinned = stores.reading(where, check_parts)
    for note in pinned.notes:
        echo(f"warning: {note}")
    return pinned.store


def _finish(o: Options, result: pipeline.Result, base, lost_input: bool, echo: Echo) -> int:
    """What every in-memory engine does with its document: errors, outputs, summary, exit code."""
    nothing = result.readable == 0
    doc = result.document if result.document.get("summary") else None
    # every input nothing could be read from, with why (the rows of the document, which counts them: facts.unread)
    errors, empty = terminal.input_problems(doc) if doc is not None else ([terminal.safe(f"error: {exc}") for exc in result.errors], [])
    # one input, unreadable (a missing path, a file of another kind): one line says it all, below
    alone = nothing and len(errors) == 1 and doc is not None and doc["summary"]["inputs"] == 1
    for line in errors if not alone else ():
        echo(line)
    if not o.quiet:
        for line in empty:
            echo(line)
        for path, why in sorted(result.skip_reasons.items()):
            rule = "" if why.startswith(pipeline.NOT_A_CAPTURE) else " (read: regular files, standard input, and pipes named on the command line)"
            echo(terminal.safe(f"skipped: {path}: {why}{rule}"))
    written = []
    if doc is not None:  # (a Spark run over an empty temporary store has no document to write)
        if base is not None:
            from analyzer.document import baseline as baselines

            baselines.apply(doc, base)
        # with nothing readable the outputs are still written: a scheduled job's report says so (exit 2)
        written = write_all(doc, o.outputs, o.fail_on, o.progress)
    if nothing:
        names = ", ".join(w for w in written if w != "-")
        said = f"{errors[0]}; nothing to analyze" if alone else \
            "error: no input was readable; nothing to analyze (give HAR, proxy JSONL or pcap files, or directories)"
        echo(said + (terminal.safe(f"; the outputs written say so: {names}") if names else ""))
        return 2
    _nothing_matched(doc["summary"], o, echo)
    ports = o.reading.ports
    if ports and doc["summary"]["exchanges"] == 0:
        echo(f"warning: no HTTP exchange on port {', '.join(map(str, sorted(ports)))}: the captures hold no MCP traffic to or "
             "from it (drop --port to analyze every flow that looks like MCP)")
    if not o.quiet:
        echo(terminal.summary_text(doc, tuple(written), terminal.width()), err=bool(o.outputs.to_stdout()))
    # every connection that could be MCP encrypted is "cannot tell", never a clean run: the one decision, pipeline.exit_code
    return _exit(pipeline.exit_code(doc["summary"], occurrences(doc["anomalies"], "tls_not_decrypted"), o.fail_on, lost_input), echo)


def _exit(decision: tuple[int, str | None], echo: Echo) -> int:
    code, why = decision
    if why:
        echo(why)
    return code


def _nothing_matched(summary: dict, o: Options, echo: Echo) -> None:
    """A window or a store filter that selected no exchange says so (else an empty result reads as a clean one)."""
    if (o.since is not None or o.until is not None or o.sessions) and not summary.get("exchanges"):
        resolved = summary.get("window") or {}  # a duration, as it resolved
        used = [f"--{name} {windows.describe(given, resolved.get(name))}" for name, given in (("since", o.since), ("until", o.until))
                if given is not None] + [f"--session {s}" for s in o.sessions]
        echo(terminal.safe(f"warning: no exchange in {'the store' if o.store else 'the inputs'} matches {' '.join(used)}"))


def ingest(paths: tuple[str, ...], store: str, reading: Reading, progress, lock_timeout: float, drop_unrepairable: bool,
           quiet: bool, echo: Echo) -> int:
    """``mcp-sse-audit ingest``: the inputs into the store; the exit code (0 stored, 1 some input unreadable, 2 none
    readable or a damaged input that could not be repaired)."""
    from analyzer.scale import store as stores

    rep = stores.ingest(list(paths), store, reading, progress, lock_timeout, drop_unrepairable)
    code = _report_ingest(rep, store, quiet, echo)
    if rep.reread and not quiet:
        # stored before with TLS it could not decrypt; this key log decrypts more (analyzer/scale/store_commit.py)
        echo(terminal.safe(f"re-read {len(rep.reread)} stored input(s) with --tls-keylog: it decrypts TLS connections their "
                           "stored copy could not; their copy was replaced"))
    if not quiet:
        repaired = f", {len(rep.repaired)} damaged one(s) repaired" if rep.repaired else ""
        echo(terminal.safe(f"stored {len(rep.added)} new input(s), {len(rep.already)} already in {store}, {len(rep.unreadable)} unreadable{repaired}"),
             err=False)
    # an input that could not be read (a file, a folder that cannot be listed) is lost input, as analyze's exit 1 says
    return 2 if code or (rep.unreadable and not rep.added and not rep.already) else 1 if rep.unreadable else 0


def _report_ingest(rep, store, quiet: bool, echo: Echo) -> int:
    """The store's housekeeping and damage, on stderr; 2 when a damaged input could not be repaired."""
    for path in rep.unreadable:
        why = "does not exist" if not os.path.lexists(path) else "could not be read (run analyze on it for the reason)"
        echo(terminal.safe(f"error: {path}: {why}"))
    for msg in rep.unrepairable:
        echo(terminal.safe(f"error: {msg}"))
    if not quiet:
        if rep.cleaned:
            echo(f"note: removed {len(rep.cleaned)} leftover(s) of an ingest that died while writing (none was committed)")
        if rep.orphans:
            echo(f"note: removed {len(rep.orphans)} orphaned part file(s) that no manifest row lists: " + ", ".join(rep.orphans[:5]))
        for msg in rep.dropped:
            echo(terminal.safe(f"note: dropped the damaged input {msg}"))
        if rep.migrated or rep.duplicates:
            echo(f"note: upgraded {store}'s manifest: checksums for {rep.migrated} input(s), {rep.duplicates} duplicate row(s) dropped")
        for path in rep.repaired:
            echo(terminal.safe(f"note: repaired {path}: its damaged parts were written again from the file"))
    return 2 if rep.unrepairable else 0
