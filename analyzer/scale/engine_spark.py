"""The same analysis on Apache Spark: ``groupBy(component).applyInArrow(partitions.analyze_group)``.

What is grouped.  The unit of analysis is not one session but one *component* of the graph "input --
session id" (see :mod:`analyzer.scale.partitions`): the cross-capture rules tie a session id across inputs,
and the cross-session rules compare the sessions of one input with each other, so a group must hold
whole inputs and every input that shares a session id with them.  The group key is the component's
label (the least sha256 in it), computed on the driver with Polars from the store's ``exchanges``
(session ids only) and broadcast as a small ``input -> group`` table.  A session's rows from every
capture and every input format therefore meet in one group, and no rule ever needs two groups.

Data flow::

    store Parquet (4 tables) --spark.read--> narrowed like store.load (--session pushed down on exchanges;
    a window's whole sessions chosen by analyzer.window's Polars rule on the driver and kept by their
    (source, xid); semi-join of events/messages, anomalies of the inputs that remain) --> one wide DataFrame with a
    ``table`` discriminator, the group label, and the stored order (input, row in its file)
    --groupBy("group").applyInArrow--> partitions.analyze_group (the function the local engine calls)
    --toArrow--> driver: partitions.partials_from_rows --> partitions.merge --> the document

A store on an object store (``s3://``) is not read by ``spark.read`` (that needs Hadoop's S3 connector,
``s3a://`` and its jars): the driver sends each group its inputs' manifest rows and the task reads and
checks their parts through pyarrow.fs (``_run_remote``), narrowed as ``store.load`` narrows.

The document is byte-identical to the local engine's (tests/test_spark.py, tests/test_store_s3.py).  Spark is optional:
``pip install 'mcp-sse-audit[spark]'`` and a Java 17+ runtime.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

import pyarrow as pa

from analyzer.scale import partitions, store as store_mod
from analyzer import pipeline
from analyzer.window import Window
from analyzer.errors import AuditError

INSTALL_SPARK = "pip install 'mcp-sse-audit[spark]'"
INSTALL_JAVA = "apt-get install -y default-jre-headless (or set JAVA_HOME to a Java 17+ runtime)"
OUT_SCHEMA = "group string, kind string, seq long, json string"  # = partitions.GROUP_SCHEMA
# Root at "warn", Spark's default for a shell: at any other root level Spark prints "Setting default log
# level" on start (so Spark's own start-up warnings stay, then setLogLevel("ERROR") cuts them); Hadoop's and
# Parquet's chatter (the native-hadoop warning...) is cut to errors from the start.
QUIET_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""


def check() -> None:
    """Fail with one line saying what to install when pyspark or Java is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise AuditError(f"--engine spark needs pyspark (>= 4.0): {INSTALL_SPARK}") from None
    major = int(pyspark.__version__.split(".")[0])
    if major < 4:
        raise AuditError(f"--engine spark needs pyspark >= 4.0, found {pyspark.__version__}: {INSTALL_SPARK}")
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        raise AuditError(f"--engine spark needs Java: {INSTALL_JAVA}")


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_int64(t):
        return "bigint"
    if pa.types.is_int32(t):
        return "int"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_timestamp(t):
        return "timestamp"
    raise TypeError(f"no Spark type for {t}")  # a new column type in analyzer/tables.py: add it here


def ddl(schema: pa.Schema) -> str:
    """The Spark DDL of a canonical table as stored (plus its Hive partition column ``input``)."""
    return ", ".join([f"`{f.name}` {_spark_type(f.type)}" for f in schema] + ["`input` string"])


def session(master: str = "local[2]", conf: dict[str, str] | None = None, app: str = "mcp-sse-audit"):
    """A SparkSession; local masters are pinned to loopback, with no UI and quiet logs.

    ``conf``: more Spark settings (``spark.driver.memory``...), applied last."""
    check()
    # the Python workers must be this interpreter (its virtualenv has pyarrow, polars and analyzer)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds analyzer/
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else the driver binds the external interface
    if "SPARK_CONF_DIR" not in os.environ:  # a user's own Spark configuration wins; else errors only
        conf_dir = Path(tempfile.mkdtemp(prefix="mcp-sse-audit-spark-conf-"))
        (conf_dir / "log4j2.properties").write_text(QUIET_LOG4J)
        os.environ["SPARK_CONF_DIR"] = str(conf_dir)  # read when the JVM starts; one small file per process
    # PySpark checks for pandas even for Arrow UDFs and warns on pandas 3; it is not used here
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")  # input=<sha> stays a string
        .config("spark.sql.adaptive.enabled", "true")
    )
    if local:
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        # local mode: the executors live in the driver's JVM; its 1 GiB default fills up with the
        # shuffled rows of one 125k-event group (bench/SPARK.md)
        b = b.config("spark.driver.memory", os.environ.get("MCP_SSE_AUDIT_SPARK_DRIVER_MEMORY", "2g"))
    for key, value in (conf or {}).items():
        b = b.config(key, value)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _group_rows(analysis, table: pa.Table) -> pa.Table:
    """Runs on the executors: one group's wide rows → the four canonical tables → analyze_group (``analysis``: the
    rules' thresholds, pickled with the function as the driver was given them)."""
    import pyarrow.compute as pc

    from analyzer.scale import partitions as parts, store as st

    group = table.column("group")[0].as_py()
    tables = {}
    for name, schema in st.TABLES.items():
        rows = table.filter(pc.equal(table.column("table"), name))
        tables[name] = rows.select([*schema.names, *parts.ORDER_COLUMNS])
    return parts.analyze_group(group, tables, analysis)


def analyze(
    store: str | Path,
    master: str = "local[2]",
    since: datetime | timedelta | None = None,
    until: datetime | timedelta | None = None,
    sessions: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
    spark=None,
    conf: dict[str, str] | None = None,
    analysis=None,
) -> pipeline.Result:
    """The findings document of the store, computed by Spark; the same as ``partitions.analyze``.

    ``spark``: a running SparkSession to use (it is left running); else one is started on ``master``
    (with ``conf``) and stopped at the end.  ``since``/``until``: as :func:`analyzer.scale.store.load`.  ``analysis``: the
    rules' thresholds (:class:`analyzer.rules.registry.Analysis`), sent to every worker with its function."""
    check()
    store = store_mod.locate(store)
    store_mod.input_rows(store)  # no store here: fail before starting a JVM
    win = store_mod.window(store, since, until)  # a duration: from the store's newest start, on the driver
    since, until = win.since, win.until
    comps = partitions.components(store)
    groups = comps["label"].n_unique()
    if progress:
        progress(f"{groups} group(s) (components of input -- session id) over {comps.height} input(s); starting Spark {master}")
    if spark is not None:
        return _run(spark, store, comps, since, until, sessions, progress, analysis)
    from pyspark.sql import SparkSession

    mine = SparkSession.getActiveSession() is None  # never stop a session the caller runs
    spark = session(master, conf)
    try:
        return _run(spark, store, comps, since, until, sessions, progress, analysis)
    finally:
        if mine:
            spark.stop()


def _run(spark, store, comps, since, until, sessions, progress, analysis=None) -> pipeline.Result:
    from pyspark.sql import functions as F

    groups = comps["label"].n_unique()
    spark.conf.set("spark.sql.shuffle.partitions", str(max(1, min(groups, 200))))
    if store.remote:
        return _run_remote(spark, store, comps, since, until, sessions, progress, analysis)
    win = Window(since, until)
    if win.bounded:
        # the window keeps whole sessions (analyzer.window): Polars decides which exchanges on the driver, from
        # the store's exchanges, as store.load does; Spark keeps those (source, xid), so the engines cannot differ
        keys = store_mod.narrowed(store_mod.scan(store, "exchanges"), since, until, tuple(sessions)).select("source", "xid").collect()
        chosen_keys = spark.createDataFrame(keys.rows(), "source string, xid bigint")
    store = store.root
    mapping = spark.createDataFrame(comps.select("input", group="label").rows(), "input string, group string")

    def read(name: str):
        return (
            spark.read.schema(ddl(store_mod.TABLES[name]))
            .option("pathGlobFilter", "*.parquet")  # never a half-written part-0.parquet.tmp
            .parquet(str(store / name))
            .select("*", F.col("_metadata.row_index").alias("row"))
        )

    x = read("exchanges")
    if sessions:
        x = x.filter(F.col("req_session_id").isin(list(sessions)) | F.col("resp_session_id").isin(list(sessions)))
    if win.bounded:
        x = x.join(chosen_keys, on=["source", "xid"], how="left_semi")
    narrowed = win.bounded or bool(sessions)
    chosen = x.select("source", "xid")
    frames = {"exchanges": x}
    for name in ("events", "messages"):
        frames[name] = read(name).join(chosen, on=["source", "xid"], how="left_semi") if narrowed else read(name)
    anomalies = read("anomalies")
    if narrowed:  # the anomalies of the inputs that still contribute
        anomalies = anomalies.join(chosen.select("source").distinct(), on="source", how="left_semi")
    frames["anomalies"] = anomalies
    wide = None
    for name, df in frames.items():
        df = df.withColumn("table", F.lit(name))
        wide = df if wide is None else wide.unionByName(df, allowMissingColumns=True)
    wide = wide.join(F.broadcast(mapping), on="input")
    def group_fn(table: pa.Table) -> pa.Table:  # runs on the executors
        return _group_rows(analysis, table)

    out = wide.groupBy("group").applyInArrow(group_fn, OUT_SCHEMA)
    rows = out.toArrow()
    if progress:
        progress(f"Spark returned {rows.num_rows} rows from {len(set(rows.column('group').to_pylist()))} group(s); merging")
    partials = partitions.partials_from_rows(rows)
    # narrowed: the inputs whose exchanges remain (each group's order keys name every exchange's source)
    used = {src for pt in partials for src in pt.keys["source"].to_list()} if narrowed else None
    return partitions.document_of(partials, store, used, win)


# --- a store on an object store: the tasks read their parts through pyarrow.fs ------------------------
#
# Spark's own reader would need ``s3a://`` and the hadoop-aws jars (from Maven), and it lists folders,
# where the store must be read through its manifest.  So the driver sends each group its inputs'
# manifest rows (a few hundred bytes each), and the task opens the group's parts with the same code as
# the local engine (store._load over a Snapshot of those rows): every part is checked against its size,
# sha256 and row count where it is read, and narrowed there.  The task reaches the object store with
# the store's URI (its ?endpoint_override=...) and the credentials of its own environment: on a cluster,
# give the executors AWS_* (spark.executorEnv.*) or an instance role.

ERROR = "error"  # a group's task could not read its parts: the rows carry the message, the driver raises it


def _run_remote(spark, where, comps, since, until, sessions, progress, analysis=None) -> pipeline.Result:
    import json

    snap = store_mod._snapshot(where)  # the snapshot ``where`` is pinned to (store.reading), or a fresh one
    group_of = dict(comps.select("input", "label").iter_rows())
    rows = [(group_of[r["sha256"]], json.dumps(r)) for r in sorted(snap.rows, key=lambda r: r["sha256"])]
    uri = where.uri

    def group_fn(table: pa.Table) -> pa.Table:  # runs on the executors
        return _remote_group(uri, since, until, sessions, table, analysis)

    df = spark.createDataFrame(rows, "group string, row string")
    out = df.groupBy("group").applyInArrow(group_fn, OUT_SCHEMA).toArrow()
    import pyarrow.compute as pc

    failed = out.filter(pc.equal(out.column("kind"), ERROR))
    if failed.num_rows:
        messages = sorted(set(failed.column("json").to_pylist()))
        more = f" (and {len(messages) - 1} more group(s) with damage)" if len(messages) > 1 else ""
        from analyzer.errors import StoreError

        raise StoreError(messages[0] + more)
    if progress:
        progress(f"Spark returned {out.num_rows} rows from {len(set(out.column('group').to_pylist()))} group(s); merging")
    partials = partitions.partials_from_rows(out)
    win = Window(since, until)
    narrowed = win.bounded or bool(sessions)
    used = {src for pt in partials for src in pt.keys["source"].to_list()} if narrowed else None
    return partitions.document_of(partials, where, used, win)


def _remote_group(uri: str, since, until, sessions, table: pa.Table, analysis=None) -> pa.Table:
    """One group on an executor: its manifest rows → its parts read, checked and narrowed → analyze_group."""
    import json

    from analyzer.errors import StoreError
    from analyzer.scale import partitions as parts, store as st

    group = table.column("group")[0].as_py()
    rows = [json.loads(t) for t in table.column("row").to_pylist()]
    snap = st.Snapshot(st.locate(uri), rows)
    try:
        tables, _ = st._load(st.pin(snap), snap, since, until, tuple(sessions), [r["sha256"] for r in rows])
    except StoreError as exc:
        return pa.table({"group": [group], "kind": [ERROR], "seq": [0], "json": [str(exc)]}, schema=parts.GROUP_SCHEMA)
    return parts.analyze_group(group, tables, analysis)
