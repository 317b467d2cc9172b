"""The mcp-sse-audit command: the click layer. It turns the command line into one
:class:`~analyzer.options.Options` value and hands it to :func:`analyzer.run.run` (``ingest``: to
:func:`analyzer.run.ingest`); it decides nothing the library decides, and maps its errors to exit codes."""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
import traceback
from datetime import datetime
from pathlib import Path

import click

from analyzer import __version__, exits, limits, options, run as runs, terminal
from analyzer import window as window_mod
from analyzer.errors import AuditError
from analyzer.ingest.reading import Reading
from analyzer.rules import storm
from analyzer.rules.registry import Analysis
from analyzer.terminal import TerminalMeter, safe


class Failure(click.ClickException):
    """A library error shown as one line; exit 2, never 1 (1 means findings)."""

    exit_code = exits.CANNOT

    def __init__(self, message: str) -> None:
        super().__init__(safe(message))  # it names files, and file names may hold terminal escapes


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
  mcp-sse-audit analyze --store st/ --since 24h --metrics /var/lib/node_exporter/textfile/mcp_sse_audit.prom
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


def _echo(text: str, err: bool = True) -> None:
    try:
        click.echo(terminal.inert(text), err=err)  # every line: no capture content as a CI workflow command
    except BrokenPipeError:
        raise
    except OSError as exc:  # the summary to a full disk (> /dev/full): the output is incomplete, exit 2, not a traceback
        if err:
            raise
        from analyzer.atomic import describe

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise AuditError(f"cannot write to standard output: {describe(exc)}; the output is incomplete") from None


def _read_options(fn):
    """How inputs are read, for analyze and ingest: --format, --port, --no-redact, the limits (analyzer/limits.py)
    and --tls-keylog become one :class:`Reading` value, ``reading``, its keys read by :func:`_with_keys` once the
    command has checked its usage (a usage error reads no key log)."""

    @functools.wraps(fn)
    def command(*args, fmt, ports, no_redact, max_line_mb, max_har_mb, max_gunzip_ratio, quiet, **kwargs):
        shown = not quiet and sys.stderr.isatty()  # progress on a terminal only
        bounds = limits.Limits(max_line_mb << 20, max_har_mb << 20, max_gunzip_ratio)
        reading = Reading(fmt, not no_redact, frozenset(ports) or None, bounds, meter=TerminalMeter() if shown else None)
        return fn(*args, reading=reading, quiet=quiet, progress=terminal.phases(_echo) if shown else None, **kwargs)

    command = click.option(
        "--tls-keylog", "tls_keylogs", multiple=True, metavar="FILE", type=click.Path(exists=True, dir_okay=False),
        help="pcap only: decrypt TLS with this NSS key log (the file SSLKEYLOGFILE names; repeatable). TLS 1.2 and 1.3, "
        "AES-GCM and ChaCha20-Poly1305; HTTP/1.1 and HTTP/2 inside. pcapng decryption secrets blocks "
        "(editcap --inject-secrets) are used without it. A key log of any size is read line by line, keeping only the "
        "keys of the named captures' connections. Secrets never reach any output.",
    )(command)
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
        command = opt(command)
    return command


# The tunable rules' options: each names its destination RULE__FIELD, and :func:`_analysis_options` makes one
# :class:`~analyzer.rules.registry.Analysis` of those given (a rule not given keeps its defaults, said in its own file).
TUNING: tuple = (
    click.option("--reconnect-storm", "reconnect_storm__reconnects", type=click.IntRange(1), metavar="N", help=f"A warning (reconnect_storm) for a stream reconnected more than N times within a minute (default {storm.Storm.reconnects})."),
)


def _analysis_options(fn):
    """The rules' thresholds (the options of :data:`TUNING`) become one :class:`Analysis` value, ``analysis``."""
    names = [opt(lambda: None).__click_params__[0].name for opt in TUNING]

    @functools.wraps(fn)
    def command(*args, **kwargs):
        given: dict[str, dict] = {}
        for name in names:
            value = kwargs.pop(name)
            if value is not None:
                rule, field = name.split("__")
                given.setdefault(rule, {})[field] = value
        return fn(*args, analysis=Analysis(**given), **kwargs)

    for opt in TUNING:
        command = opt(command)
    return command


def _with_keys(reading: Reading, tls_keylogs: tuple[str, ...], paths) -> Reading:
    """``--tls-keylog`` read into ``reading``, keeping the lines the captures among ``paths`` need (a pre-pass over
    them: :func:`analyzer.options.key_log`)."""
    if not tls_keylogs:
        return reading
    keys = options.key_log(tls_keylogs, tuple(paths), lambda line: _echo(safe(line)), limits=reading.limits)
    return dataclasses.replace(reading, keys=keys)


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
            ctx.exit(exits.INTERRUPTED)
        except Exception as exc:  # noqa: BLE001 -- the last line of defence: named, never swallowed
            self._internal(ctx, exc)
        except BaseException as exc:
            # a panic in compiled code (Polars', PyArrow's or our core's: pyo3 raises it as PanicException, which is
            # no Exception) is an internal error too: before, it left a traceback and exit 1, which reads as findings
            if not _is_panic(exc):
                raise
            self._internal(ctx, exc)

    @staticmethod
    def _internal(ctx: click.Context, exc: BaseException) -> None:
        if ctx.meta.get("mcp_sse_audit.debug"):
            click.echo(traceback.format_exc().rstrip("\n"), err=True)
        click.echo(safe(_internal_error(ctx, exc)), err=True)
        ctx.exit(exits.INTERNAL)


def _is_panic(exc: BaseException) -> bool:
    """A Rust panic raised into Python by a pyo3 module (each module has its own ``pyo3_runtime.PanicException``)."""
    return type(exc).__name__ == "PanicException" and not isinstance(exc, (SystemExit, KeyboardInterrupt, GeneratorExit))


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
              "2026-11-13T10:00:03+01:00; no offset: UTC; or as the terminal prints it: '2026-11-13 09:00:03 UTC'), a date (2026-11-13: "
              "00:00 UTC), or a duration counted back from now, as journalctl does (30s, 90m, 24h, 7d; now: the clock, or --now). "
              "Example: --since 24h")
@click.option("--until", type=window_mod.WhenParam(), metavar="TIME|DATE|DURATION",
              help="Only the sessions with an exchange that started before this time (same forms; the window is [--since, --until), "
              "so --until 2026-11-14 ends with the 13th), each kept whole. Example: --since 2026-11-13 --until 2026-11-14")
@click.option("--now", type=window_mod.WhenParam(), metavar="TIME",
              help="What a duration of --since/--until counts back from, instead of the clock: re-run a past night as it ran. "
              "Example: --since 24h --now 2026-12-05T03:00:00Z")
@click.option("--audit", "audit", metavar="NAME",
              help="With --store: an incremental audit. Judge every session that stored inputs new to the audit NAME touch, each "
              "whole, whatever their times (late captures too); after the outputs are written, record those inputs as judged in "
              "the store, except inputs holding a new finding at or above --fail-on, judged again each run until accepted "
              "(mcp-sse-audit accept). A run killed before that judges them again. Example: --store DIR --audit nightly")
@click.option("--session", "sessions", multiple=True, metavar="ID", help="With --store: only this Mcp-Session-Id (repeatable).")
@click.option(
    "--partitions", type=click.IntRange(1, 100_000), default=1, show_default=True, metavar="N",
    help="With --store: analyze in N partitions, one after another, so memory holds one partition, not the "
    "archive. A partition never splits an input or a session (inputs sharing a session id stay together); "
    "the findings are the same as with 1. Without --html the JSON (compact) and JSON Lines are written "
    "partition by partition too; --html, --junit, --github-annotations and --metrics need the whole document in memory.",
)
@click.option(
    "--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
    help="spark: run the per-session-group analysis on Apache Spark (groupBy + applyInArrow) over the store; "
    "PATHs without --store go through a temporary store. Same findings as local. Needs: pip install 'mcp-sse-audit[spark]' and Java 17+.",
)
@click.option("--spark-master", default="local[2]", show_default=True, metavar="URL", help="With --engine spark: the Spark master.")
@click.option("--json", "json_out", metavar="FILE|-", help="Write the findings JSON here ('-' = stdout).")
@click.option("--json-lines", "jsonl_out", metavar="FILE|DIR/|-", help="Write the findings as NDJSON: a summary line, then one line per input, session, exchange, boundary, finding, anomaly. "
              "A folder (DIR/): one file per kind (summary, inputs, sessions, exchanges, boundaries, findings, anomalies .ndjson), each read by one pl.read_ndjson.")
@click.option("--html", "html_out", metavar="FILE|-", type=click.Path(dir_okay=False, writable=True, allow_dash=True), help="Write the HTML incident report here ('-' = stdout).")
@click.option(
    "--fail-on",
    type=click.Choice(exits.FAIL_LEVELS),
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
@click.option("--metrics", "metrics_out", metavar="FILE|-", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write OpenMetrics text for Prometheus (node_exporter's textfile collector; written atomically): "
              "reconnects by verdict and host, findings by rule, severity and host, new findings against --baseline, "
              "inputs read or damaged, events lost and delivered twice, the run's end time, duration and exit code; "
              "every family on every run, zero when none. Example: --metrics /var/lib/node_exporter/textfile/mcp_sse_audit.prom")
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
@_read_options
@_analysis_options
def analyze(paths, store_dir, since, until, now, audit, sessions, partitions, engine, spark_master, json_out, jsonl_out, html_out, fail_on, baseline_path,
            junit_out, github, metrics_out, reading, tls_keylogs, quiet, progress, analysis):
    """Analyze captured MCP traffic (HAR, proxy JSONL, pcap/pcapng; directories are walked, .gz is read).

    Rebuilds every session, stream and reconnect, judges each reconnect
    (continuous, gap, replay_reset, epoch_change, session_invalid,
    unverifiable, ...), prints a summary and writes the findings JSON and the
    HTML report.
    """
    opts = options.Options(
        tuple(paths), store_dir, since, until, tuple(sessions), partitions, engine, spark_master,
        options.Outputs(json_out, jsonl_out, html_out, junit_out, github, metrics_out), fail_on, baseline_path, reading, quiet, progress,
        now=_absolute(now), audit=audit, analysis=analysis)
    problem = opts.problem()
    if problem:
        raise click.UsageError(problem)
    opts = dataclasses.replace(opts, reading=_with_keys(reading, tls_keylogs, paths))
    sys.exit(runs.run(opts, _echo))


@main.command(epilog="""
\b
Examples (a nightly job; exit 1 means new findings):
  mcp-sse-audit analyze --store STORE --audit nightly --baseline accepted.json --json tonight.json
  mcp-sse-audit accept tonight.json --baseline accepted.json
\b
Exit codes: 0 accepted; 2 FINDINGS or the baseline cannot be read, or the
baseline cannot be written (it is left as it was); 3 internal error.
""")
@click.argument("findings", metavar="FINDINGS", type=click.Path(dir_okay=False))
@click.option("--baseline", "baseline_path", required=True, metavar="FILE", type=click.Path(dir_okay=False),
              help="The baseline to update (created when missing): the file later runs give to analyze --baseline.")
@click.option("-q", "--quiet", is_flag=True)
def accept(findings, baseline_path, quiet):
    """Accept a run's findings into the baseline, so the next run calls them known.

    FINDINGS is what `analyze --json` (or --json-lines) wrote. A run that judged all its inputs replaces
    the baseline; a run that judged only some sessions (--since/--until, --audit) replaces the findings of
    those sessions and keeps the others. The file is written whole or not at all."""
    from analyzer import document, outputs
    from analyzer.document import baseline as baselines

    done = baselines.accept(findings, baseline_path, document.generated_at(), outputs.write)
    if not quiet:
        _echo(safe(f"{'created' if done.created else 'updated'} {baseline_path}: {done.taken} finding(s) of {findings} accepted"
                   + (f", {done.kept} kept from sessions that run did not judge" if done.kept else "")
                   + (f", {done.dropped} no longer found dropped" if done.dropped else "")), err=False)
    sys.exit(0)


def _absolute(now):
    """--now is a time (a duration has nothing to count back from)."""
    if now is not None and not isinstance(now, datetime):
        raise click.BadParameter("give a time (2026-12-05T03:00:00Z), not a duration", param_hint="'--now'")
    return now


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
@_read_options
def ingest(paths, store_dir, lock_timeout, drop_unrepairable, reading, tls_keylogs, quiet, progress):
    """Parse captures into a Parquet store of canonical tables, skipping inputs it already holds.

    Each input is committed atomically; a killed ingest leaves nothing half-written that analyze
    would read.  The next ingest removes what it left, and re-reads damaged inputs from their files."""
    reading = _with_keys(reading, tls_keylogs, paths)
    sys.exit(runs.ingest(tuple(paths), store_dir, reading, progress, lock_timeout, drop_unrepairable, quiet, _echo))
