"""One run for every engine: :func:`run` takes :class:`~analyzer.options.Options` and returns the exit code.

The engines differ in where the document comes from -- the single pass over PATHs
(:func:`analyzer.pipeline.run`), a store read whole, a store's partitions merged in memory or written
one by one (:mod:`analyzer.scale.partitions`, :mod:`analyzer.scale.spill`), Spark -- and in nothing
else: the baseline is applied, the outputs written, the summary shown and the exit code decided
(:func:`analyzer.exits.analyze`) once, here.  ``echo(text, err=True)`` is how the run talks to the
user (the command line passes click's); every line of log content is made safe for a terminal first.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from typing import Callable

import polars as pl

from analyzer import document, exits, pipeline, terminal
from analyzer import window as windows
from analyzer.ingest.reading import Reading
from analyzer.options import Options
from analyzer.outputs import Run, write_all
from analyzer.result import Audit
from analyzer.tables import keep_pandas_out

Echo = Callable[..., None]  # echo(text, err=True)


def run(options: Options, echo: Echo) -> int:
    """Analyze as ``options`` say and write the outputs; the exit code (0 clean, 1 findings or lost input at
    ``--fail-on``, 2 nothing readable or nothing to judge).  Usage errors are :meth:`Options.problem`'s, found
    before; a failure of the library (an unusable baseline, a damaged store, an output that cannot be
    written) is an :class:`~analyzer.errors.AuditError`."""
    o = options
    started = time.time()  # (the metrics' run duration and end time)
    if o.engine == "local":
        keep_pandas_out()  # (the Spark engine hands pandas objects to pyarrow; a store's pyarrow.dataset imports it anyway)
    base = None
    if o.baseline:  # read first: a baseline that cannot be used fails the run before the analysis, not after it
        from analyzer.document import baseline as baselines

        base = baselines.load(o.baseline)
        if base.missing:  # the first night of a scheduled audit: the normal case, said, never an error
            tonight = o.outputs.json if o.outputs.json not in (None, "-") else "FINDINGS.json"
            echo(terminal.safe(f"note: --baseline {o.baseline} does not exist yet (a first run?): every finding is new. Once "
                               f"they are understood, accept them: mcp-sse-audit accept {tonight} --baseline {o.baseline}"))
    document.generated_at()  # a malformed SOURCE_DATE_EPOCH fails now, not after the whole analysis
    # a duration counts back from --now or the clock, once, before anything is read: every engine gets these times
    win = o.window()
    given, o = o, dataclasses.replace(o, since=win.since, until=win.until)
    if o.store and o.engine == "local" and (o.audit or (o.partitions > 1 and not o.outputs.whole_document())):
        # the engines that write as they go (spill) or record what they judged (an audit)
        unreadable, skipped = _ingest_store(o, echo)
        store = _pinned(o.store, echo)  # one manifest snapshot for the whole analysis, every part checked first
        if o.audit:
            return _audit(o, given, store, base, exits.lost_input(unreadable, o.fail_on), echo, started, skipped)
        return _spill(o, given, store, base, exits.lost_input(unreadable, o.fail_on), echo, skipped)
    result, unreadable = analyze(o, echo)
    return _finish(o, given, result, base, exits.lost_input(unreadable, o.fail_on), echo, started)


def analyze(o: Options, echo: Echo) -> tuple[pipeline.Result, list[str]]:
    """The whole document in memory, from the engine ``o`` names: the single pass over PATHs, a store read whole or its
    partitions merged (new PATHs ingested into it first), or Spark; and the PATHs that could not go into the store
    (lost input, as an unreadable input is).  ``o``'s window is absolute (:meth:`Options.window`, resolved once).
    :func:`analyzer.audit` and :func:`run` both come here."""
    if o.engine == "spark":
        return _spark(o, echo)
    if o.store:
        unreadable, skipped = _ingest_store(o, echo)
        result = _store(o, _pinned(o.store, echo))  # one manifest snapshot for the whole analysis, every part checked first
        document.passed_over(result.document, skipped)
        return result, unreadable
    return pipeline.run(list(o.paths), o.reading, o.progress, columnar=True, window=windows.of(o.since, o.until),
                        analysis=o.analysis), []


def _ingest_store(o: Options, echo: Echo) -> tuple[list[str], list[str]]:
    """PATHs given with --store go into it first: the ones that could not, and the files passed over as no capture
    (the document's ``skipped``, as a run over files has them)."""
    if not o.paths:
        return [], []
    return _ingest_paths(o, o.store, echo, "read into the store (analyze it without --store for the reason)")


def _store(o: Options, store) -> pipeline.Result:
    """A store's document in memory (``store``: pinned, see :func:`analyzer.scale.store.reading`): read whole, or
    its partitions merged (the report, JUnit and the annotations need the whole document)."""
    from analyzer.scale import store as stores

    if o.partitions > 1:
        from analyzer.scale import partitions

        return partitions.analyze(store, o.partitions, o.since, o.until, o.sessions, o.progress, o.analysis)
    win = stores.window(store, o.since, o.until)  # (absolute: resolved by run)
    tables, rows = stores.load(store, win.since, win.until, o.sessions)
    # a filter that kept no input read the store all the same: that is "nothing matched", not "unreadable"
    readable = sum(1 for r in rows if not r["error"]) or (stores.manifest(store).height if (win.bounded or o.sessions) else 0)
    # handed over: the events are let go once the frames exist, and their hex digests sooner
    result = pipeline.analyze_tables(tables, rows, [], [], readable, consume=True, columnar=True, analysis=o.analysis)
    windows.stamp(result.document, win)  # summary.window: the bounds applied
    return result


def _audit(o: Options, given: Options, store, base, lost_input: bool, echo: Echo, started: float, skipped: list[str]) -> int:
    """``--audit NAME``: the sessions the inputs new to the audit touch, judged whole; the outputs written; then the
    inputs recorded as judged, or held when they hold a new finding that fails the run (analyzer/scale/audits.py)."""
    from analyzer.scale import audits, store as stores

    audits.writable(store)
    ledger = audits.read(store, o.audit)
    snap = stores.manifest(store)
    shas = snap["sha256"].to_list()
    accepted = None if base is None else set(base.old)
    pending, released = ledger.pending(shas, accepted)
    touched = stores.load_touched(store, pending)
    # the store itself was readable: nothing new is 0 judged (exit 0), never "no input was readable" (exit 2)
    result = pipeline.analyze_tables(touched.tables, touched.rows, [], [], len(shas), consume=True, columnar=True,
                                     analysis=o.analysis)
    doc = result.document
    document.passed_over(doc, skipped)
    # what holds an input back: a finding that fails this run (at or above --fail-on, not in the baseline)
    failing = [f for f in _plain(doc, "findings") if exits.at_or_above(f["severity"], o.fail_on) and (accepted is None or f["fingerprint"] not in accepted)]
    path_sha = dict(zip(snap["path"].to_list(), shas))
    by_session: dict[str, set[str]] = {}
    for f in failing:
        if f.get("session_id"):
            by_session.setdefault(f["session_id"], set()).add(f["fingerprint"])
    held: dict[str, set[str]] = {}
    for sha, sid in touched.pairs.filter(pl.col("session_id").is_in(sorted(by_session))).iter_rows():
        if sha in pending:
            held.setdefault(sha, set()).update(by_session[sid])
    for f in failing:  # a sessionless finding holds the inputs its evidence is in
        if not f.get("session_id"):
            for e in f.get("evidence") or ():
                if path_sha.get(e.get("source")) in pending:
                    held.setdefault(path_sha[e["source"]], set()).add(f["fingerprint"])
    doc["summary"]["audit"] = {"name": o.audit, "inputs_new": len(pending), "inputs_judged_before": len(shas) - len(pending),
                               "sessions": len(doc["sessions"]), "inputs_held": len(held), "inputs_released": len(released)}
    # the outputs are written (or it raised: nothing recorded); the trend over the audit's history, this run's last
    history = [{"reconnect": name, **row} for name, row in ledger.reconnects.items()]
    code = _finish(o, given, result, base, lost_input, echo, started, history)
    at = audits.now()
    judged = {sha: at for sha in (*pending, *released) if sha not in held}
    from analyzer.document import trend

    rows = [r | {"audited_at": at} for r in trend.per_reconnect(doc)]
    audits.commit(store, o.audit, judged, {sha: frozenset(fps) for sha, fps in held.items()}, rows)
    if not o.quiet:
        from analyzer.document.facts import plural

        echo(terminal.safe(f"audit {o.audit}: {plural(len(judged), 'input')} recorded as judged"
                           + (f" ({len(released)} of them held before, their findings accepted since)" if released else "")
                           + (f"; {len(held)} held for new findings at or above --fail-on {o.fail_on}: judged again each run "
                              "until accepted (mcp-sse-audit accept)" if held else "")), err=bool(o.outputs.to_stdout()))
    return code


def _plain(doc: dict, key: str) -> list[dict]:
    """A document list as dicts (the single pass keeps exchanges and boundaries as frames: document/records.py)."""
    from analyzer.document.records import Records

    items = doc.get(key) or []
    return items.rows() if isinstance(items, Records) else items


def _spill(o: Options, given: Options, store, base, lost_input: bool, echo: Echo, skipped: list[str]) -> int:
    """Bounded memory: the JSON and JSON Lines written partition by partition, never held whole."""
    from analyzer.scale import spill

    written = spill.write(store, o.partitions, o.outputs.json_lines, o.outputs.json, o.since, o.until, o.sessions, o.progress,
                          baseline=base, trend=True, skipped=skipped, analysis=o.analysis)
    _nothing_matched(written.summary, given, echo)
    if not o.quiet:
        outs = tuple(out for out in (o.outputs.json, o.outputs.json_lines) if out)
        echo(terminal.safe(terminal.summary_text({"summary": written.summary, "findings": [], "anomalies": []}, outs)),
             err=bool(o.outputs.to_stdout()))
    return _exit(exits.analyze(written.summary, o.fail_on, written.encrypted, lost_input), echo)


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
        result = engine_spark.analyze(store, o.spark_master, o.since, o.until, o.sessions, o.progress, analysis=o.analysis)
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


def _finish(o: Options, given: Options, result: pipeline.Result, base, lost_input: bool, echo: Echo, started: float,
            history: list[dict] | None = None) -> int:
    """What every in-memory engine does with its document: errors, outputs, summary, exit code (``started``: when the
    run began, for the metrics; ``history``: an audit's earlier reconnect rows, for the store's trend)."""
    nothing = result.readable == 0
    doc = result.document if result.document.get("summary") else None
    audit = Audit(result.document, result.readable, lost=lost_input, store=bool(o.store))
    # captures that hold no record at all (an empty file: a proxy that wrote nothing) are no clean night either
    hollow = not nothing and not o.store and doc is not None and doc["summary"]["records"] == 0
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
    if doc is not None and base is not None:
        from analyzer.document import baseline as baselines

        baselines.apply(doc, base)
    # nothing readable, no record at all, every connection encrypted: "cannot tell", never a clean run; the one decision,
    # exits.analyze, decided before the outputs are written (the metrics carry it), said after them
    decision = audit.decision(o.fail_on)
    if doc is not None:  # (a Spark run over an empty temporary store has no document to write)
        if o.reads_store():  # the store's reconnects per day and host (the report draws them)
            from analyzer.document import trend

            doc["trend"] = trend.per_day(_with_history(history or [], trend.per_reconnect(doc)))
        # with nothing readable the outputs are still written: a scheduled job's report says so (exit 2)
        written = write_all(doc, o.outputs, o.fail_on, o.progress, Run(started, decision[0]))
    if nothing:
        names = ", ".join(w for w in written if w != "-")
        said = f"{errors[0]}; nothing to analyze" if alone else \
            "error: no input was readable; nothing to analyze (give HAR, proxy JSONL or pcap files, or directories)"
        echo(said + (terminal.safe(f"; the outputs written say so: {names}") if names else ""))
        return decision[0]
    if hollow:
        names = ", ".join(w for w in written if w != "-")
        echo("error: the inputs hold no record at all (empty captures); nothing to analyze: check that the capture is being written"
             + (terminal.safe(f"; the outputs written say so: {names}") if names else ""))
        return decision[0]
    _nothing_matched(doc["summary"], given, echo)
    _untimed(doc, o, echo)
    ports = o.reading.ports
    if ports and doc["summary"]["exchanges"] == 0:
        echo(f"warning: no HTTP exchange on port {', '.join(map(str, sorted(ports)))}: the captures hold no MCP traffic to or "
             "from it (drop --port to analyze every flow that looks like MCP)")
    if not o.quiet:
        echo(terminal.summary_text(doc, tuple(written), terminal.width()), err=bool(o.outputs.to_stdout()))
    return _exit(decision, echo)


def _with_history(history: list[dict], current: list[dict]) -> list[dict]:
    """An audit's earlier reconnect rows and this run's, a reconnect judged again counted once (this run's row)."""
    now = {r["reconnect"] for r in current}
    return [r for r in history if r["reconnect"] not in now] + current


def _exit(decision: tuple[int, str | None], echo: Echo) -> int:
    code, why = decision
    if why:
        echo(why)
    return code


def _untimed(doc: dict, o: Options, echo: Echo) -> None:
    """A window keeps the exchanges whose time could not be read (analyzer/window.py): say how many, so a window
    that judged them is not taken for one that placed them."""
    if o.since is None and o.until is None:
        return
    xs = doc.get("exchanges") or []
    started = xs.column("started") if hasattr(xs, "column") else [x.get("started") for x in xs]
    n = sum(1 for t in started if t is None)
    if n:
        echo(f"warning: {n} exchange(s) have no time that could be read (see the *_bad_timestamp anomalies): kept in the window, "
             "since nothing places them outside it")


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
    return exits.ingest(len(rep.unreadable), len(rep.added) + len(rep.already), code)


def _report_ingest(rep, store, quiet: bool, echo: Echo) -> int:
    """The store's housekeeping and damage, on stderr; how many damaged inputs could not be repaired."""
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
        if rep.unkeyed and rep.added:
            echo(terminal.safe(f"note: {store} was made before its event digests were keyed, so it keeps them unkeyed: whoever can "
                               "read the store could test guesses of short secrets in redacted events against them; ingest the "
                               "captures into a new store to key them (mixing keyed and unkeyed digests would hide repeats)"))
        if rep.migrated or rep.duplicates:
            echo(f"note: upgraded {store}'s manifest: checksums for {rep.migrated} input(s), {rep.duplicates} duplicate row(s) dropped")
        for path in rep.repaired:
            echo(terminal.safe(f"note: repaired {path}: its damaged parts were written again from the file"))
    return len(rep.unrepairable)
