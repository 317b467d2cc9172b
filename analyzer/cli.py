"""The mcp-sse-audit command: a thin click layer over analyzer.pipeline."""
from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

import click

from analyzer import __version__, document, limits, pipeline, report
from analyzer.decode import tls
from analyzer.document import build as findings, ci, records
from analyzer.ingest import inputs
from analyzer.anomalies import occurrences
from analyzer.errors import AuditError
from analyzer.tables import keep_pandas_out
from analyzer import window as window_mod

class Failure(click.ClickException):
    """A library error shown as one line; exit 2, never 1 (1 means findings)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(_safe(message))  # it names files, and file names may hold terminal escapes


EXIT_INTERNAL = 3  # a bug or an unexpected condition: neither findings (1) nor a usage error (2)
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT; not 1, which means findings


EXAMPLES = """
\b
Examples:
  mcp-sse-audit analyze sample_logs/
  mcp-sse-audit analyze capture.har proxy.jsonl.gz --json findings.json --html report.html
  mcp-sse-audit analyze server-host.pcapng --port 8000 --fail-on critical
  SSLKEYLOGFILE=keys.log my-mcp-client ...   # then:
  mcp-sse-audit analyze https-traffic.pcap --tls-keylog keys.log --html report.html
  mcp-sse-audit analyze /archive/2026-11/ --json - --fail-on critical | jq .summary
  mcp-sse-audit analyze logs/ --since 24h --baseline accepted.json --json tonight.json
  mcp-sse-audit analyze captures/ --junit audit.xml --github-annotations   # in CI
\b
Exit codes (for scheduled jobs):
  0 clean: no finding at or above --fail-on (with --baseline: no new one),
    no input damaged
  1 findings at or above --fail-on; with --fail-on error or warning also an
    input that was missing, unreadable, cut short or lost records
  2 usage error, no input readable (the outputs are written and say so),
    nothing to judge because every connection was TLS without a key log,
    or standard output closed before the output was complete
  3 internal error: one line names it; rerun with --debug for the traceback
\b
Reproducible output: the same inputs, given in any order, give the same
JSON and HTML except the generation time. Set SOURCE_DATE_EPOCH (seconds
since 1970-01-01 UTC, as reproducible builds do) to fix that time too and
get byte-identical files that audit jobs can diff:
  SOURCE_DATE_EPOCH=$(date -d 2026-12-01 +%s) mcp-sse-audit analyze logs/ --json a.json
"""


def _limit_options(fn):
    """--max-line-mb, --max-har-mb, --max-gunzip-ratio (analyzer/limits.py): the command runs within them."""

    @functools.wraps(fn)
    def run(*args, max_line_mb, max_har_mb, max_gunzip_ratio, **kwargs):
        with limits.using(limits.Limits(max_line_mb << 20, max_har_mb << 20, max_gunzip_ratio)):
            return fn(*args, **kwargs)

    d = limits.Limits()
    for opt in (
        click.option("--max-line-mb", type=click.IntRange(1, 1 << 20), default=d.line_bytes >> 20, show_default=True, metavar="MB",
                     help="Limit: a JSONL line longer than this is rejected unread (jsonl_line_too_long)."),
        click.option("--max-har-mb", type=click.IntRange(1, 1 << 30), default=d.document_bytes >> 20, show_default=True, metavar="MB",
                     help="Limit: a HAR entry larger than this is refused (HARs are read entry by entry; a HAR that is not "
                     "well-formed JSON is read whole, and then the whole file is held to this limit)."),
        click.option("--max-gunzip-ratio", type=click.IntRange(1, 1 << 30), default=d.gunzip_ratio, show_default=True, metavar="N",
                     help=f"Limit: a .gz stops past N times its size (and past {limits.GUNZIP_FLOOR >> 20} MiB): decompression bombs."),
    ):
        run = opt(run)
    return run


def _tls_options(fn):
    """--tls-keylog FILE (repeatable): the NSS key logs captures are decrypted with (analyzer/decode/tls.py)."""

    def size(n: int) -> str:
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if n >= 1 << shift:
                return f"{n >> shift} {unit}" if not n % (1 << shift) else f"{n / (1 << shift):.1f} {unit}"
        return f"{n} bytes"

    def wanted(paths) -> tuple[set[bytes], list[str]]:
        """The client randoms of the ClientHellos in the captures (a pre-pass over their bytes, so that only the key
        log lines they need are kept), and why the pre-pass cannot tell them all (a capture on standard input or a
        pipe is read once, by the reader)."""
        import zlib

        randoms: set[bytes] = set()
        why = []
        for path in inputs.collect(list(paths)).files:
            if inputs.is_stream(path):
                why.append("a capture comes from " + ("standard input" if path in inputs.STDIN_NAMES else f"the pipe {path}"))
                continue
            try:
                with inputs.open_input(path) as fh:
                    if fh.read(4) in inputs.PCAP_MAGIC:
                        tls.client_randoms(fh, into=randoms)
            except (AuditError, OSError, EOFError, ValueError, zlib.error):
                continue  # the reader names what is wrong with it
            if len(randoms) >= tls.PREPASS_LIMIT:
                why.append(f"the captures hold more than {tls.PREPASS_LIMIT} TLS ClientHellos")
                break
        return randoms, why

    @functools.wraps(fn)
    def run(*args, tls_keylogs, **kwargs):
        keys = tls.KeyLog()
        randoms, why = wanted(kwargs.get("paths") or ()) if tls_keylogs else (set(), [])
        # without a full pre-pass (a capture on standard input), the newest _MAX_KEYLOG bytes of other lines are kept too
        bound = _MAX_KEYLOG if why else 0
        for path in tls_keylogs:
            try:
                dropped = keys.read_file(path, frozenset(randoms), bound)
            except OSError as exc:
                raise Failure(f"--tls-keylog {path}: cannot read it ({exc.strerror or exc}); give the file SSLKEYLOGFILE named") from None
            if dropped:
                click.echo(_safe(f"warning: --tls-keylog {path}: cut to its newest {size(bound)}, the most kept when {' and '.join(why)} "
                                 f"(no pre-pass can tell which keys it needs): the oldest {size(dropped)} of key log lines were not "
                                 "kept, and connections whose keys only they hold get tls_no_key. To avoid it, name the capture file "
                                 "instead: then only the keys the captures need are kept, whatever the key log's size"), err=True)
        if tls_keylogs and not len(keys):
            click.echo(_safe(f"warning: --tls-keylog {', '.join(tls_keylogs)}: no TLS secret in it (expected lines like "
                             "'CLIENT_RANDOM <hex> <hex>' written by SSLKEYLOGFILE); TLS connections stay encrypted"), err=True)
        elif keys.malformed:
            click.echo(_safe(f"warning: --tls-keylog: {keys.malformed} line(s) are not 'LABEL CLIENT_RANDOM SECRET' in hex and were skipped"), err=True)
        with tls.using_keys(keys):
            return fn(*args, **kwargs)

    return click.option(
        "--tls-keylog", "tls_keylogs", multiple=True, metavar="FILE", type=click.Path(exists=True, dir_okay=False),
        help="pcap only: decrypt TLS with this NSS key log (the file SSLKEYLOGFILE names; repeatable). TLS 1.2 and 1.3, "
        "AES-GCM and ChaCha20-Poly1305; HTTP/1.1 and HTTP/2 inside. pcapng decryption secrets blocks "
        "(editcap --inject-secrets) are used without it. A key log of any size is read line by line, keeping only the "
        "keys of the named captures' connections. Secrets never reach any output.",
    )(run)


# key log text kept, besides the lines of the named captures' client randoms, when a capture comes from standard
# input or a pipe (no pre-pass tells which lines it needs): the newest lines, and a warning says what was left out
_MAX_KEYLOG = 1 << 28


def _phases():
    """Progress on a terminal: each phase on its own line, with the time since the run began (the reading has
    its own status line, TerminalMeter)."""
    t0 = time.monotonic()
    return lambda msg: click.echo(_safe(f"[{time.monotonic() - t0:6.1f} s] {msg}"), err=True)


def _set_debug(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.meta["mcp_sse_audit.debug"] = True


def _debug_option() -> click.Option:
    return click.Option(["--debug"], is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                        help="On an internal error (exit 3), print the Python traceback too.")


class _Main(click.Group):
    """The command group: every command gets ``--debug``; an exception no command expected is exit 3.

    Click's own exits (usage errors, --help, sys.exit with a code) pass through; a library AuditError is
    a one-line usage error (2); anything else is a bug or an unexpected condition (a store fault, an
    unreadable stream): one line on stderr naming it, exit 3, so it never reads as "findings" (1)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params.append(_debug_option())
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except AuditError as exc:
            raise Failure(str(exc)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except Exception as exc:  # noqa: BLE001 -- the last line of defence: named, never swallowed
            if ctx.meta.get("mcp_sse_audit.debug"):
                click.echo(traceback.format_exc().rstrip("\n"), err=True)
            click.echo(_safe(_internal_error(ctx, exc)), err=True)
            ctx.exit(EXIT_INTERNAL)


def _internal_error(ctx: click.Context, exc: BaseException) -> str:
    """One line: the command, the exception, where it was raised, and what to do."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    text = " ".join(str(exc).split())[:300]
    command = ctx.invoked_subcommand or ctx.info_name
    return (f"error: internal error in `{command}`: {type(exc).__name__}: {text}{where}; "
            "rerun with --debug for the traceback (and please report it)")


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
              help="On an internal error (exit 3), print the Python traceback too.")
@click.version_option(__version__, "-V", "--version", prog_name="mcp-sse-audit")
def main() -> None:
    """Find MCP Streamable HTTP sessions whose SSE stream "resumed" but silently diverged."""


@main.command(epilog=EXAMPLES)
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True))
@click.option("--store", "store_dir", metavar="DIR|URI", help="Analyze the Parquet store made by `mcp-sse-audit ingest` (instead of, or before, PATHs: new PATHs are ingested into it first). "
              "A folder, file:///abs/dir, s3://bucket/prefix (endpoint from AWS_ENDPOINT_URL or ?endpoint_override=host:port&scheme=http; "
              "credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or gs://bucket/prefix. Example: --store s3://audit/store")
@click.option("--since", type=window_mod.WhenParam(), metavar="TIME|DATE|DURATION",
              help="Only the sessions with an exchange open at or after this time (it ended then or later: a stream opened before "
              "that delivered into the window counts), each kept whole (its earlier exchanges too, so a resume keeps the history it names). RFC 3339 as the outputs print it (2026-11-13T09:00:03.000000Z, "
              "2026-11-13T10:00:03+01:00; no offset: UTC), a date (2026-11-13: 00:00 UTC), or a duration counted back from the newest "
              "exchange's start in the inputs or the store, not from the clock (30s, 90m, 24h, 7d). Example: --since 24h")
@click.option("--until", type=window_mod.WhenParam(), metavar="TIME|DATE|DURATION",
              help="Only the sessions with an exchange that started before this time (same forms; the window is [--since, --until), "
              "so --until 2026-11-14 ends with the 13th), each kept whole. Example: --since 2026-11-13 --until 2026-11-14")
@click.option("--session", "sessions", multiple=True, metavar="ID", help="With --store: only this Mcp-Session-Id (repeatable).")
@click.option(
    "--partitions", type=click.IntRange(1, 100_000), default=1, show_default=True, metavar="N",
    help="With --store: analyze in N partitions, one after another, so memory holds one partition, not the "
    "archive. A partition never splits an input or a session (inputs sharing a session id stay together); "
    "the findings are the same as with 1. Without --html the JSON (compact) and JSON Lines are written "
    "partition by partition too; --html needs the whole document in memory.",
)
@click.option(
    "--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
    help="spark: run the per-session-group analysis on Apache Spark (groupBy + applyInArrow) over the store; "
    "PATHs without --store go through a temporary store. Same findings as local. Needs: pip install 'mcp-sse-audit[spark]' and Java 17+.",
)
@click.option("--spark-master", default="local[2]", show_default=True, metavar="URL", help="With --engine spark: the Spark master.")
@click.option("--json", "json_out", metavar="FILE|-", help="Write the findings JSON here ('-' = stdout).")
@click.option("--json-lines", "jsonl_out", metavar="FILE|-", help="Write the findings as NDJSON: a summary line, then one line per input, session, exchange, boundary, finding, anomaly.")
@click.option("--html", "html_out", metavar="FILE|-", type=click.Path(dir_okay=False, writable=True, allow_dash=True), help="Write the HTML incident report here ('-' = stdout).")
@click.option(
    "--fail-on",
    type=click.Choice(pipeline.FAIL_LEVELS),
    default="error",
    show_default=True,
    help="Exit 1 when a finding of this severity or worse exists; at error or warning also when an input "
    "was unreadable, cut short or lost records (an error-severity anomaly).",
)
@click.option(
    "--baseline", "baseline_path", metavar="FILE", type=click.Path(dir_okay=False),
    help="The findings JSON (or JSON Lines) of an earlier run: findings whose fingerprint it has are 'known', the rest 'new'; "
    "only new findings count for --fail-on and the exit code; the summary, JSON and report say how many are new, known and gone. "
    "For nightly jobs: keep the last accepted run's JSON as the baseline.",
)
@click.option("--junit", "junit_out", metavar="FILE|-", help="Write JUnit XML for CI test reports: one test case per reconnect (and per finding "
              "not tied to one), failed by its findings at or above --fail-on (known findings of --baseline are skipped, never failed); "
              "at --fail-on error or warning also one case per input, an error when the input was damaged.")
@click.option("--github-annotations", "github", is_flag=True, help="Print GitHub Actions annotations (::error file=...::...) on standard "
              "output, one per finding at or above --fail-on (new ones only with --baseline); the summary then goes to stderr.")
@click.option(
    "--format", "fmt", type=click.Choice(["auto", "jsonl", "har", "pcap"]), default="auto", show_default=True,
    help="Input format; auto recognises each file by its content (pcap covers pcapng).",
)
@click.option(
    "--port", "ports", type=click.IntRange(1, 65535), multiple=True, metavar="PORT",
    help="pcap only: analyze HTTP on these server ports (repeatable); default: any flow that looks like MCP.",
)
@click.option("--no-redact", is_flag=True, help="Keep secrets in the outputs. Redacted by default: values of headers, URL parameters and JSON keys whose names contain token, secret, key, auth, password, signature, cookie, credential, session, jwt (or are the words pass, pwd, pw, sig, otp), URL userinfo, and secrets by shape wherever they stand (JWTs, AWS keys, GitHub/Slack/Google/OpenAI/Anthropic tokens, private keys, Bearer credentials, ;jsessionid=). Mcp-Session-Id, Last-Event-ID and progressToken are never redacted.")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no summary; only errors.")
@_limit_options
@_tls_options
def analyze(paths, store_dir, since, until, sessions, partitions, engine, spark_master, json_out, jsonl_out, html_out, fail_on, baseline_path,
            junit_out, github, fmt, ports, no_redact, quiet):
    """Analyze captured MCP traffic (HAR, proxy JSONL, pcap/pcapng; directories are walked, .gz is read).

    Rebuilds every session, stream and reconnect, judges each reconnect
    (continuous, gap, replay_reset, epoch_change, session_invalid,
    unverifiable, ...), prints a summary and writes the findings JSON and the
    HTML report.
    """
    progress, meter = None, None
    if not quiet and sys.stderr.isatty():
        progress = _phases()
        meter = TerminalMeter()
    if engine == "local":
        keep_pandas_out()  # (the Spark engine hands pandas objects to pyarrow; a store's pyarrow.dataset imports it anyway)
    if not paths and not store_dir:
        raise click.UsageError("give PATHs to analyze, or --store DIR")
    if engine == "spark" and partitions > 1:
        raise click.UsageError("--partitions is for --engine local; Spark makes one group per set of inputs sharing session ids")
    if sessions and not store_dir:
        raise click.UsageError("--session narrows a store: add --store DIR (--since and --until work on PATHs too)")
    window_mod.check(since, until)  # two times in the wrong order: an empty window
    if partitions > 1 and not store_dir:
        raise click.UsageError("--partitions splits a store: ingest first (mcp-sse-audit ingest PATH... --store DIR), or add --store DIR")
    if (store_dir or engine == "spark") and any(inputs.is_stream(p) for p in paths):
        raise click.UsageError("standard input or a pipe cannot go into a store (it knows inputs by the sha256 of a file): "
                               "save it to a file and name the file")
    to_stdout = [name for name, out in (("--json", json_out), ("--json-lines", jsonl_out), ("--html", html_out), ("--junit", junit_out),
                                        ("--github-annotations", "-" if github else None)) if out == "-"]
    if len(to_stdout) > 1:
        raise click.UsageError(f"{' and '.join(to_stdout)} both write to standard output ('-'): send all but one to a file")
    base = None
    if baseline_path:
        from analyzer.document import baseline as baseline_mod

        try:  # read first: a baseline that cannot be used fails the run before the analysis, not after it
            base = baseline_mod.load(baseline_path)
        except AuditError as exc:
            raise Failure(str(exc)) from None
    lost_input = False
    try:
        with inputs.metering(meter):  # the status line while inputs are read (a terminal only)
            document.generated_at()  # a malformed SOURCE_DATE_EPOCH fails now, not after the whole analysis
            if engine == "spark":
                result = _analyze_spark(paths, store_dir, since, until, sessions, spark_master, fmt, no_redact, ports, progress)
            elif store_dir:
                from analyzer.scale import store as store_mod

                if paths:
                    rep = store_mod.ingest(list(paths), store_dir, fmt, not no_redact, frozenset(ports) or None, progress)
                    # a PATH that could not be read is lost input: it fails --fail-on error like an unreadable input
                    for path in rep.unreadable:
                        click.echo(_safe(f"error: {path}: could not be read into the store (analyze it without --store for the reason)"), err=True)
                    lost_input = bool(rep.unreadable) and fail_on in ("error", "warning")
                with store_mod.reading(store_dir) as notes:  # one manifest snapshot, every part checked first
                    for note in notes:
                        click.echo(f"warning: {note}", err=True)
                    if partitions > 1 and not (html_out or junit_out or github):
                        # bounded memory: the outputs are written partition by partition, never held whole
                        from analyzer.scale import spill

                        written = spill.write(store_dir, partitions, jsonl_out, json_out, since, until, tuple(sessions), progress,
                                              baseline=base)
                        _nothing_matched(written.summary, since, until, sessions, "the store")
                        if not quiet:
                            outs = tuple(o for o in (json_out, jsonl_out) if o)
                            click.echo(_safe(summary_text({"summary": written.summary, "findings": [], "anomalies": []}, outs)), err=bool(to_stdout))
                        _exit(*pipeline.exit_code(written.summary, written.encrypted, fail_on, lost_input))
                    if partitions > 1:  # the HTML report, JUnit and the annotations need the whole document in memory
                        from analyzer.scale import partitions as partitions_mod

                        result = partitions_mod.analyze(store_dir, partitions, since, until, tuple(sessions), progress)
                    else:
                        win = store_mod.window(store_dir, since, until)  # a duration: back from the store's newest start
                        tables, rows = store_mod.load(store_dir, win.since, win.until, tuple(sessions))
                        # a filter that kept no input read the store all the same: that is "nothing matched", not "unreadable"
                        readable = len(rows) or (store_mod.manifest(store_dir).height if (win.bounded or sessions) else 0)
                        # handed over: the events are let go once the frames exist, and their hex digests sooner
                        result = pipeline.analyze_tables(tables, rows, [], [], readable, consume=True, columnar=True)
                        window_mod.stamp(result.document, win)  # summary.window: the bounds applied
                        del tables
            else:
                result = pipeline.run(
                    list(paths), fmt=fmt, redact_secrets=not no_redact, progress=progress, ports=frozenset(ports) or None, columnar=True,
                    window=window_mod.of(since, until),
                )
    except AuditError as exc:
        raise Failure(str(exc)) from None
    nothing = result.readable == 0
    doc = result.document if result.document.get("summary") else None
    # one input, unreadable (a missing path, a file of another kind): one line says it all, below
    alone = nothing and len(result.errors) == 1 and doc is not None and doc["summary"]["inputs"] == 1
    for exc in result.errors if not alone else ():
        click.echo(_safe(f"error: {exc}"), err=True)
    if not quiet:
        for path, why in sorted(result.skip_reasons.items()):
            rule = "" if why.startswith(pipeline.NOT_A_CAPTURE) else " (read: regular files, standard input, and pipes named on the command line)"
            click.echo(_safe(f"skipped: {path}: {why}{rule}"), err=True)
    # (a Spark run over an empty temporary store has no document to write)
    written = []
    if doc is not None:
        if base is not None:
            baseline_mod.apply(doc, base)
        # with nothing readable the outputs are still written: a scheduled job's report says so (exit 2)
        for out, what, render in ((json_out, "findings JSON", lambda: document_json(doc)),
                                  (jsonl_out, "JSON Lines", lambda: "".join(line + "\n" for line in findings.json_lines(records.plain(doc)))),
                                  (html_out, "report", lambda: report.render(records.plain(doc))),
                                  (junit_out, "JUnit XML", lambda: ci.junit_xml(records.plain(doc), fail_on)),
                                  ("-" if github else None, "", lambda: ci.github_annotations(records.plain(doc), fail_on))):
            if out:
                if progress and what:
                    progress(f"writing the {what}")
                _emit(out, render())
                if out in (json_out, jsonl_out, html_out):  # the outputs the summary points to for the rest
                    written.append(out)
    if nothing:
        names = ", ".join(w for w in written if w != "-")
        said = _safe(f"error: {result.errors[0]}; nothing to analyze") if alone else \
            "error: no input was readable; nothing to analyze (give HAR, proxy JSONL or pcap files, or directories)"
        click.echo(said + (_safe(f"; the outputs written say so: {names}") if names else ""), err=True)
        sys.exit(2)
    _nothing_matched(doc["summary"], since, until, sessions, "the store" if store_dir else "the inputs")
    if ports and doc["summary"]["exchanges"] == 0:
        click.echo(f"warning: no HTTP exchange on port {', '.join(map(str, sorted(ports)))}: the captures hold no MCP traffic to or "
                   "from it (drop --port to analyze every flow that looks like MCP)", err=True)
    if not quiet:
        click.echo(summary_text(doc, tuple(written), _width()), err=bool(to_stdout))
    # every connection that could be MCP encrypted is "cannot tell", never a clean run: the one decision, pipeline.exit_code
    _exit(*pipeline.exit_code(doc["summary"], occurrences(doc["anomalies"], "tls_not_decrypted"), fail_on, lost_input))


def _exit(code: int, why: str | None) -> None:
    if why:
        click.echo(why, err=True)
    sys.exit(code)


@main.command(epilog="""
\b
Examples:
  mcp-sse-audit ingest /archive/2026-11/ --store /var/lib/mcp-audit/store
  mcp-sse-audit analyze --store /var/lib/mcp-audit/store --since 2026-11-30 --json -
  mcp-sse-audit analyze --store /var/lib/mcp-audit/store --partitions 16 --json-lines out.ndjson
  AWS_ENDPOINT_URL=http://127.0.0.1:9000 mcp-sse-audit ingest /archive/ --store s3://audit/store
\b
A file already in the store (same bytes, whatever its name) is not parsed again,
so a nightly run over a growing archive parses only the new files.
\b
Exit codes: 0 stored (or already there); 1 the readable inputs were stored, but
some input could not be read (a file, a folder that cannot be listed: named on
stderr); 2 usage error, another ingest holds the lock, nothing readable, a write
failed (full disk) or a damaged input could not be repaired; 3 internal error
(--debug shows the traceback).
""")
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--store", "store_dir", required=True, metavar="DIR|URI",
              help="The store: a folder (created if missing), file:///abs/dir, or s3://bucket/prefix (the bucket must exist; endpoint "
              "from AWS_ENDPOINT_URL or ?endpoint_override=host:port&scheme=http; credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; "
              "gs:// is read-only). Example: --store s3://audit/store")
@click.option("--format", "fmt", type=click.Choice(["auto", "jsonl", "har", "pcap"]), default="auto", show_default=True)
@click.option("--port", "ports", type=click.IntRange(1, 65535), multiple=True, metavar="PORT", help="pcap only: these server ports.")
@click.option("--no-redact", is_flag=True, help="Keep secrets in the stored tables.")
@click.option("--lock-timeout", type=click.FloatRange(0), default=0, show_default=True, metavar="SECONDS",
              help="Another ingest holds the store's lock: wait this long for it, then exit 2 (0: exit 2 at once).")
@click.option("--drop-unrepairable", is_flag=True,
              help="Remove damaged inputs whose files are gone or changed (rows and parts), so the rest can be analyzed.")
@click.option("-q", "--quiet", is_flag=True)
@_limit_options
@_tls_options
def ingest(paths, store_dir, fmt, ports, no_redact, lock_timeout, drop_unrepairable, quiet):
    """Parse captures into a Parquet store of canonical tables, skipping inputs it already holds.

    Each input is committed atomically; a killed ingest leaves nothing half-written that analyze
    would read.  The next ingest removes what it left, and re-reads damaged inputs from their files."""
    from analyzer.scale import store as store_mod

    progress = (lambda msg: click.echo(_safe(msg), err=True)) if (not quiet and sys.stderr.isatty()) else None  # noqa: E731
    try:
        with inputs.metering(TerminalMeter() if progress else None):
            rep = store_mod.ingest(list(paths), store_dir, fmt, not no_redact, frozenset(ports) or None, progress, lock_timeout, drop_unrepairable)
    except AuditError as exc:
        raise Failure(str(exc)) from None
    code = _report_ingest(rep, store_dir, quiet)
    if rep.reread and not quiet:
        # stored before with TLS it could not decrypt; this key log decrypts more (analyzer/scale/store_commit.py)
        click.echo(_safe(f"re-read {len(rep.reread)} stored input(s) with --tls-keylog: it decrypts TLS connections their "
                         "stored copy could not; their copy was replaced"), err=True)
    if not quiet:
        repaired = f", {len(rep.repaired)} damaged one(s) repaired" if rep.repaired else ""
        click.echo(_safe(f"stored {len(rep.added)} new input(s), {len(rep.already)} already in {store_dir}, {len(rep.unreadable)} unreadable{repaired}"))
    # an input that could not be read (a file, a folder that cannot be listed) is lost input, as analyze's exit 1 says
    sys.exit(2 if code or (rep.unreadable and not rep.added and not rep.already) else 1 if rep.unreadable else 0)


def _report_ingest(rep, store_dir, quiet: bool) -> int:
    """The store's housekeeping and damage, on stderr; 2 when a damaged input could not be repaired."""
    for path in rep.unreadable:
        why = "does not exist" if not os.path.lexists(path) else "could not be read (run analyze on it for the reason)"
        click.echo(_safe(f"error: {path}: {why}"), err=True)
    for msg in rep.unrepairable:
        click.echo(_safe(f"error: {msg}"), err=True)
    if not quiet:
        if rep.cleaned:
            click.echo(f"note: removed {len(rep.cleaned)} leftover(s) of an ingest that died while writing (none was committed)", err=True)
        if rep.orphans:
            click.echo(f"note: removed {len(rep.orphans)} orphaned part file(s) that no manifest row lists: " + ", ".join(rep.orphans[:5]), err=True)
        for msg in rep.dropped:
            click.echo(_safe(f"note: dropped the damaged input {msg}"), err=True)
        if rep.migrated or rep.duplicates:
            click.echo(f"note: upgraded {store_dir}'s manifest: checksums for {rep.migrated} input(s), {rep.duplicates} duplicate row(s) dropped", err=True)
        for path in rep.repaired:
            click.echo(_safe(f"note: repaired {path}: its damaged parts were written again from the file"), err=True)
    return 2 if rep.unrepairable else 0


PRETTY_UP_TO = 20_000  # exchanges; past that the JSON is written compact (the indenting encoder is pure Python)


def _analyze_spark(paths, store_dir, since, until, sessions, master, fmt, no_redact, ports, progress) -> pipeline.Result:
    """--engine spark: ingest PATHs into the store (a temporary one without --store), then Spark."""
    import tempfile

    from analyzer.scale import engine_spark, store as store_mod

    engine_spark.check()  # no pyspark or no Java: say so before ingesting anything
    with tempfile.TemporaryDirectory(prefix="mcp-sse-audit-store-") as tmp:
        where = store_dir or tmp
        if paths:
            rep = store_mod.ingest(list(paths), where, fmt, not no_redact, frozenset(ports) or None, progress)
            for path in rep.unreadable:
                click.echo(f"error: {path}: could not be read (run analyze without --engine spark on it for the reason)", err=True)
            if not store_mod.manifest(where).height:
                return pipeline.Result({"summary": {}}, 0)  # nothing readable: the caller says so, exit 2
        # Spark lists a local store's folders itself: check every part first; over an object store its
        # tasks read the parts the manifest lists, and check each one where they read it
        with store_mod.reading(where, check_parts=not store_mod.locate(where).remote) as notes:
            for note in notes:
                click.echo(f"warning: {note}", err=True)
            return engine_spark.analyze(where, master, since, until, tuple(sessions), progress)


def document_json(doc: dict) -> bytes:
    """What ``--json`` writes, in UTF-8: indented for a person when small; compact for archive runs, its large
    arrays written by Polars (:mod:`analyzer.document.records`: the same text as the C encoder's, without a
    dict per record)."""
    if doc["summary"]["exchanges"] <= PRETTY_UP_TO:
        return (json.dumps(records.plain(doc), indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    return records.document_json(doc, end=b"\n")


class TerminalMeter(inputs.Meter):
    """One status line on a terminal, redrawn in place while inputs are read: which input, how far
    into it, the rate and the time left; then one line for the whole read.  Off a terminal: nothing."""

    EVERY = 0.2  # seconds between redraws
    SHOWN_FROM = 1 << 20  # bytes: smaller inputs show no percentage

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.bytes_done = 0  # of the inputs finished
        self.inputs = 0
        self.records = 0  # of the inputs finished
        self.current = ("", 0, 0, 0)  # path, size, n, total
        self.file_t0 = self.t0
        self.last = 0.0
        self.drawn = 0  # characters of the line on screen
        self.passed_over = 0  # inputs begun, then skipped as no capture: not inputs of the summary

    def begin(self, n: int, total: int, path: str, size: int) -> None:
        if self.inputs:
            self.bytes_done += self.current[1]
        self.inputs = n
        self.current = (path, size, n, total)
        self.file_t0 = time.monotonic()
        self.last = 0.0
        self.at(0)

    def at(self, position: int) -> None:
        now = time.monotonic()
        if now - self.last < self.EVERY and position:
            return
        self.last = now
        path, size, n, total = self.current
        rate = position / max(now - self.file_t0, 1e-3) / 1e6
        parts = [f"reading [{n}/{total}]" + (f", {self.records:,} records so far" if self.records else "")]
        # how far into this input: only for one large enough to take a while (no "0% of 0.0 MB" for small files)
        if size >= self.SHOWN_FROM and position:
            left = (size - position) / 1e6 / rate if rate > 0 else None
            parts.append(f"{min(position * 100 // size, 100)}% of {size / 1e6:.1f} MB, {rate:.1f} MB/s"
                         + (f", ETA {left:.0f} s" if left is not None else ""))
        elif not size and position:
            parts.append(f"{position / 1e6:.1f} MB, {rate:.1f} MB/s")
        head = "  ".join(parts)
        width = shutil.get_terminal_size((100, 20)).columns - 1
        room = max(width - len(head) - 2, 10)
        name = _safe(path)
        name = name if len(name) <= room else "…" + name[-(room - 1):]
        self._draw((name + "  " + head)[:width])

    def _draw(self, line: str, end: str = "") -> None:
        """``line`` over the previous one: spaces, not a terminal escape, blank what it does not cover."""
        self.stream.write("\r" + line + " " * max(self.drawn - len(line), 0) + end)
        self.stream.flush()
        self.drawn = 0 if end else len(line)

    def done(self, records: int) -> None:
        self.records += records

    def skipped(self) -> None:
        self.passed_over += 1

    def end(self) -> None:
        path, size, _n, _total = self.current
        total_bytes = self.bytes_done + size
        secs = max(time.monotonic() - self.t0, 1e-3)
        skipped = f" ({self.passed_over} skipped: not a capture)" if self.passed_over else ""
        self._draw(f"read {self.inputs - self.passed_over} input(s){skipped}, {self.records:,} records, {total_bytes / 1e6:.1f} MB in {secs:.1f} s "
                   f"({total_bytes / 1e6 / secs:.1f} MB/s)", "\n")


def _nothing_matched(summary: dict, since, until, sessions, where: str = "the store") -> None:
    """A window or a store filter that selected no exchange says so (else an empty result reads as a clean one)."""
    if (since is not None or until is not None or sessions) and not summary.get("exchanges"):
        resolved = summary.get("window") or {}  # a duration, as it resolved
        used = [f"--{name} {window_mod.describe(given, resolved.get(name))}" for name, given in (("since", since), ("until", until))
                if given is not None] + [f"--session {s}" for s in sessions]
        click.echo(_safe(f"warning: no exchange in {where} matches {' '.join(used)}"), err=True)


def _emit(out: str, text: str | bytes) -> None:
    """``text`` (or its UTF-8 bytes) to the file ``out``, or to standard output for ``-``."""
    if out != "-":
        _write(out, text)
        return
    try:
        data = text if isinstance(text, bytes) else text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
        sys.stdout.flush()
        out, view = sys.stdout.buffer, memoryview(data)
        # With PYTHONUNBUFFERED=1 (many container images) the buffer is the raw file, whose write() may take only
        # part of the bytes (a pipe's 64 KiB): the rest must be written again, or a reader that stops early
        # leaves the output cut with exit 0 and no word.  (A buffered writer takes all or raises.)
        while view:
            n = out.write(view)
            view = view[len(view) if n is None else n :]
        out.flush()
    except BrokenPipeError:
        # the reader went away (``| head``): say the output is cut, and keep Python from failing at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise Failure("standard output was closed before the output was complete (broken pipe)") from None


def _write(path: str, text: str | bytes) -> None:
    """Whole or not at all: a temp file beside ``path``, renamed over it (a full disk leaves no truncated file)."""
    from analyzer.scale.store_commit import describe, write_file_atomically

    try:
        write_file_atomically(path, text if isinstance(text, bytes) else text.encode("utf-8"))
    except OSError as exc:
        raise Failure(f"cannot write {path}: {describe(exc)}; the file was left as it was") from None


def session_name(rec: dict) -> str:
    """A session as the JSON (``session``, ``session_id``) and the HTML name it: ``S3 3c7c1b9a6589…``."""
    sid = rec.get("session_id")
    short = "no Mcp-Session-Id" if not sid else sid if len(sid) <= 12 else sid[:12] + "…"
    return f"session {rec.get('session') or '?'} {short}" if sid else f"session {rec.get('session') or '?'}, {short}"


SHOWN_FINDINGS = 10  # finding lines in the terminal summary; the rest are counted and pointed to


def _width() -> int | None:
    """Finding lines are cut to this many characters: $COLUMNS, else the terminal's width when stderr is one;
    off a terminal (cron mail, CI logs) lines are whole."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) >= 40:
        return int(cols)
    return shutil.get_terminal_size((100, 20)).columns if sys.stderr.isatty() else None


def _fit(line: str, width: int | None) -> str:
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


def _span(lo: str, hi: str) -> str:
    """``lo`` to ``hi`` (the document's RFC 3339 times) as one short range: the day once when it is one day."""
    a, b = lo[:19].replace("T", " "), hi[:19].replace("T", " ")
    return f"{a} to {b[11:] if a[:10] == b[:10] else b} UTC"


def summary_text(doc: dict, outputs: tuple[str, ...] = (), width: int | None = None) -> str:
    """The terminal summary; ``outputs``: the files written (``-``: standard output), which it points to;
    ``width``: finding lines are cut to it (None: whole)."""
    s = doc["summary"]
    base = s.get("baseline")
    named = [o if o != "-" else "standard output" for o in outputs]
    pointer = ("in " + " and ".join(named)) if named else "with --json FILE or --html FILE"
    lines = [
        f"inputs: {s['inputs']} ({s['records']} records, {s['rejected']} rejected, {s['inputs_unreadable']} unreadable)",
        f"sessions: {s['sessions']}  exchanges: {s['exchanges']}  events: {s['events']}  reconnects: {s['boundaries']}",
    ]
    if s["boundaries"]:
        lines.append("reconnect verdicts: " + ", ".join(f"{v} {n}" for v, n in s["verdicts"].items() if n))
    sev = s["findings_by_severity"]
    lines.append("findings: " + ", ".join(f"{n} {k}" for k, n in sev.items()))
    shown = doc["findings"]
    if base is not None:
        split = ", ".join(f"{n} {k}" for k, n in base["new_by_severity"].items() if n)
        lines.append(f"baseline {base['source']}: {base['new']} new" + (f" ({split})" if split else "")
                     + f", {base['known']} known, {base['gone']} gone; only the new count for --fail-on")
        shown = [f for f in shown if f.get("baseline") == "new"]
    for f in shown[:SHOWN_FINDINGS]:
        where = f["evidence"][0]
        seen = f" (seen in {len(f['seen_in'])} captures)" if f.get("seen_in") else ""
        lines.append(_fit(_safe(f"  [{f['severity']}] {f['rule']}, {session_name(f)}, at {where['source']} {where['location']}{seen}"), width))
        lines.append(_fit(_safe(f"      {f['message']}"), width))
    if len(shown) > SHOWN_FINDINGS:
        lines.append(f"  … {len(shown) - SHOWN_FINDINGS} more{' new' if base is not None else ''} {pointer}")
    if s["anomalies"]:
        by = s.get("anomalies_by_severity") or {}
        split = ", ".join(f"{n} {k}" for k, n in by.items())
        lines.append(f"input anomalies: {s['anomalies']}" + (f" ({split})" if split else "") + f" (listed {pointer})")
        if by.get("error"):
            lines.append("  error anomalies mean lost or unreadable input: they fail --fail-on error and warning")
    firsts = [x["first_seen"] for x in doc.get("sessions", ()) if x.get("first_seen")]
    lasts = [x["last_seen"] for x in doc.get("sessions", ()) if x.get("last_seen")]
    if firsts and lasts:  # the incident's window, as the report's "When?" gives it
        times = sorted(f["time"] for f in doc["findings"] if f.get("time"))
        asked = s.get("window")  # --since/--until: the sessions kept, whole, may reach past them
        lines.append(f"incident window: {_span(min(firsts), max(lasts))}" + (f"; findings {_span(times[0], times[-1])}" if times else "")
                     + (f" (--since {asked['since'] or '-'} --until {asked['until'] or '-'} kept the sessions open then, whole)" if asked else ""))
    if shown:  # one next step: the worst finding's, where to read about it
        f = shown[0]
        html = next((o for o in outputs if o != "-" and o.endswith((".html", ".htm"))), None)
        where = f"open {html} at {f['session'] or f['id']}" if html else f"see {f['id']} {pointer}"
        lines.append(_fit(_safe(f"next: {where} ({f['rule']}); {f.get('next_step') or ''}"), width))
    return "\n".join(_safe(line) for line in lines)


def _safe(text: str) -> str:
    """Log content is hostile: no terminal control characters reach the user's terminal."""
    return "".join(ch if ch.isprintable() or ch == " " else f"\\x{ord(ch):02x}" for ch in text)
