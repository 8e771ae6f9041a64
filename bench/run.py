"""Benchmark the proxy against a direct connection to the same upstream.

Starts the fake upstream (bench/upstream.py) and the proxy as subprocesses
pinned with `taskset` (proxy alone on its cores; upstream and load generator
sharing the others, so "direct" is what that core can do), then runs each
scenario first straight to the upstream and then through the proxy, with
bench/loadgen.py. For the proxy runs it also reads the proxy's CPU time
(/proc/<pid>/stat, over the counted window) and peak RSS (VmHWM, reset
before each scenario when the kernel allows). Prints Markdown tables;
`--json PATH` writes the numbers too.

`--rss-run SECONDS` instead streams through the proxy for that long,
sampling its RSS, and reports growth from the first minute's peak to the end.

Every subprocess runs in its own process group and is stopped (the whole
group) when this script ends, also on Ctrl-C, SIGTERM or an error; with
PR_SET_PDEATHSIG they also get SIGTERM if this script is killed outright.

    python bench/run.py [--duration 10] [--json out.json]
    python bench/run.py --rss-run 120

Only the standard library here: the script runs as `python bench/run.py`
without the repository on sys.path.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 30.0  # seconds for a server to come up (the proxy loads a tokenizer)
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL
# the project's performance targets (streamed chunks and non-streamed
# requests through the proxy against direct, added time to first byte)
STREAM_RATIO_TARGET = 0.90
NONSTREAM_RATIO_TARGET = 0.80
ADDED_TTFB_P99_TARGET_MS = 2.0
RSS_GROWTH_TARGET = 0.05
# below this share of a core, the proxy's per-unit CPU figure is flagged (see summary_table)
BUSY_FOR_CPU_FIGURES = 0.5


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    model: str  # names the fake upstream's variant: bench-<mode>-c<chunks>-g<gap ms>
    stream: bool
    concurrency: int

    @property
    def unit(self) -> str:
        """What proxy CPU is counted per: events for streams, responses otherwise."""
        return "chunk" if self.stream else "request"


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    gap = f"{args.gap_ms:g}"
    table = [
        Scenario(
            "stream",
            f"streaming, {args.chunks} chunks, native reasoning_content",
            f"bench-native-c{args.chunks}-g0",
            True,
            args.concurrency,
        ),
        Scenario(
            "nonstream",
            "non-streaming, native reasoning_content",
            f"bench-native-c{args.chunks}-g0",
            False,
            args.concurrency,
        ),
        Scenario(
            "tags",
            f"streaming, {args.chunks} chunks, inline <think> tags",
            f"bench-tags-c{args.chunks}-g0",
            True,
            args.concurrency,
        ),
        Scenario(
            "ttft",
            f"time to first token, {args.ttft_chunks} chunks {gap} ms apart",
            f"bench-native-c{args.ttft_chunks}-g{gap}",
            True,
            args.ttft_concurrency,
        ),
    ]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.name for s in table}
        if unknown:
            raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
        table = [s for s in table if s.name in wanted]
    return table


# -- processes ------------------------------------------------------------------------


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGTERM the child if we die (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


class Children:
    """Every subprocess this run started; `stop_all` ends them and their groups."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []
        self._preexec = _parent_death_signal()

    def start(
        self,
        name: str,
        cores: str,
        argv: Sequence[str],
        *,
        stdout: int | IO[bytes] | None = None,
        installed: bool = False,
    ) -> subprocess.Popen[bytes]:
        """`installed`: run what the interpreter has installed, not the working tree."""
        env = dict(os.environ)
        if not installed:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        # the proxy must see only --upstream, not a config file from the environment
        for key in ("REASONING_PROXY_CONFIG", "REASONING_PROXY_UPSTREAM"):
            env.pop(key, None)
        # a fixed secret keeps the proxy from warning about a generated one
        env.setdefault("REASONING_PROXY_SECRET", "bench-secret-not-for-production")
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            ["taskset", "-c", cores, *argv],
            cwd=self.log_dir if installed else ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log if stdout is None else stdout,
            stderr=log,
            # own group: a terminal's Ctrl-C reaches only us, and we stop the children in order
            process_group=0,
            preexec_fn=self._preexec,  # safe: this script starts no threads
        )
        log.close()
        self.procs.append(proc)
        self.pids.append(proc.pid)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # once the leader is reaped its group id may be reused, so a group is only
        # signalled while its leader lives (none of the children forks anyway)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.procs)):
            self.stop(proc)

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str, proc: subprocess.Popen[bytes], children: Children, name: str, timeout: float
) -> None:
    """Poll `url` until it answers 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{children.log_tail(name)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{name} not ready after {timeout:.0f} s:\n{children.log_tail(name)}")


@dataclass(slots=True)
class Servers:
    upstream: subprocess.Popen[bytes]
    proxy: subprocess.Popen[bytes]
    direct_url: str
    proxy_url: str


def start_servers(children: Children, args: argparse.Namespace) -> Servers:
    py = sys.executable
    up_port, proxy_port = free_port(), free_port()
    upstream = children.start(
        "upstream",
        args.load_cores,
        [py, "-m", "bench.upstream", "--port", str(up_port), "--chunks", str(args.chunks)],
    )
    wait_http(f"http://127.0.0.1:{up_port}/health", upstream, children, "upstream", READY_TIMEOUT)
    direct_url = f"http://127.0.0.1:{up_port}/v1"
    serve = ["serve", "--upstream", direct_url, "--port", str(proxy_port)]
    if args.route_key:
        # the route as --upstream makes it, with a key: the proxy masks the
        # key wherever the upstream could quote it (streams: DeltaMask)
        config = children.log_dir / "route-key.json"  # (YAML reads JSON)
        route = {"name": "bench", "models": ["*"], "upstream": direct_url}
        config.write_text(json.dumps({"routes": [{**route, "api_key": args.route_key}]}))
        serve = ["serve", "--config", str(config), "--port", str(proxy_port)]
    serve += ["--log-level", args.log_level]
    if args.workers > 1:
        serve += ["--workers", str(args.workers)]
    if args.store:
        serve += ["--store", args.store]
    if args.bare:  # the floor: a forwarder with none of the proxy's features
        serve = ["--upstream", direct_url, "--port", str(proxy_port)]
        proxy = children.start("proxy", args.proxy_cores, [py, "-m", "bench.bare", *serve])
    elif args.proxy_python:  # an installed build, e.g. the compiled one
        argv = [args.proxy_python, "-m", "proxy", *serve]
        proxy = children.start("proxy", args.proxy_cores, argv, installed=True)
    else:
        proxy = children.start("proxy", args.proxy_cores, [py, "-m", "proxy", *serve])
    wait_http(f"http://127.0.0.1:{proxy_port}/readyz", proxy, children, "proxy", READY_TIMEOUT)
    return Servers(upstream, proxy, direct_url, f"http://127.0.0.1:{proxy_port}/v1")


# -- measuring ------------------------------------------------------------------------


def status_kib(pid: int, key: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, same user); False if refused."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def load(
    children: Children,
    args: argparse.Namespace,
    url: str,
    scenario: Scenario,
    duration: float,
    warmup: float,
    watch_pid: int | None = None,
    while_running: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run bench/loadgen.py once (pinned with the upstream); its JSON result."""
    argv = [sys.executable, "-m", "bench.loadgen", url, "--model", scenario.model, "--json"]
    argv += ["--stream" if scenario.stream else "--no-stream"]
    argv += ["--concurrency", str(scenario.concurrency), "--duration", str(duration)]
    argv += ["--warmup", str(warmup)]
    if watch_pid is not None:
        argv += ["--watch-pid", str(watch_pid)]
    with tempfile.TemporaryFile() as out:
        proc = children.start("loadgen", args.load_cores, argv, stdout=out)
        try:
            deadline = time.monotonic() + warmup + duration + 120
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the load generator did not finish")
                if while_running is not None:
                    while_running()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(0.1)
        finally:
            children.stop(proc)
        if proc.returncode != 0:
            raise RuntimeError(
                f"loadgen exited with {proc.returncode}:\n{children.log_tail('loadgen')}"
            )
        out.seek(0)
        result: dict[str, Any] = json.loads(out.read())
    return result


@dataclass(slots=True)
class ScenarioResult:
    name: str
    title: str
    concurrency: int
    unit: str
    direct: dict[str, Any]
    proxy: dict[str, Any]
    proxy_cpu_s_per_1k: float | None  # proxy CPU seconds per 1,000 units (chunks or requests)
    # share of one core the proxy used: well under 1.0 with low throughput means it
    # was starved (another process on its core) or waiting, not CPU-bound
    proxy_cpu_busy: float | None
    proxy_peak_rss_mib: float
    peak_rss_reset: bool  # False: the peak is since the proxy started
    throughput_ratio: float  # proxy/direct: chunks/s for streams, requests/s otherwise
    added_ttfb_p50_ms: float
    added_ttfb_p99_ms: float


def run_scenario(
    children: Children, servers: Servers, args: argparse.Namespace, scenario: Scenario
) -> ScenarioResult:
    direct = load(children, args, servers.direct_url, scenario, args.duration, args.warmup)
    pid = servers.proxy.pid
    reset = reset_peak_rss(pid)
    proxy = load(
        children, args, servers.proxy_url, scenario, args.duration, args.warmup, watch_pid=pid
    )
    key = "chunks" if scenario.stream else "requests"
    units = proxy[key]
    cpu = proxy["watched_cpu_s"]
    rate = key + "_per_s"
    return ScenarioResult(
        name=scenario.name,
        title=scenario.title,
        concurrency=scenario.concurrency,
        unit=scenario.unit,
        direct=direct,
        proxy=proxy,
        proxy_cpu_s_per_1k=cpu / units * 1000 if units and cpu is not None else None,
        proxy_cpu_busy=cpu / proxy["elapsed"] if cpu is not None else None,
        proxy_peak_rss_mib=status_kib(pid, "VmHWM") / 1024,
        peak_rss_reset=reset,
        throughput_ratio=proxy[rate] / direct[rate] if direct[rate] else 0.0,
        added_ttfb_p50_ms=proxy["ttfb_p50_ms"] - direct["ttfb_p50_ms"],
        added_ttfb_p99_ms=proxy["ttfb_p99_ms"] - direct["ttfb_p99_ms"],
    )


@dataclass(slots=True)
class RssRun:
    seconds: float
    baseline_window_s: float
    samples: list[tuple[float, float]] = field(default_factory=list)  # (s since start, MiB)
    baseline_mib: float = 0.0  # the largest sample of the baseline window
    end_mib: float = 0.0
    growth: float = 0.0
    load: dict[str, Any] = field(default_factory=dict)


def rss_run(children: Children, servers: Servers, args: argparse.Namespace) -> RssRun:
    """One long streaming run through the proxy, sampling its RSS."""
    pid = servers.proxy.pid
    stream = scenarios(argparse.Namespace(**{**vars(args), "only": "stream"}))[0]
    run = RssRun(seconds=args.rss_run, baseline_window_s=min(args.rss_baseline, args.rss_run / 2))
    start = time.monotonic()
    next_sample = start

    def sample() -> None:
        nonlocal next_sample
        now = time.monotonic()
        if now >= next_sample:
            run.samples.append((now - start, status_kib(pid, "VmRSS") / 1024))
            next_sample = now + args.rss_interval

    run.load = load(
        children, args, servers.proxy_url, stream, args.rss_run, 0.0, while_running=sample
    )
    run.samples.append((time.monotonic() - start, status_kib(pid, "VmRSS") / 1024))
    baseline = [mib for t, mib in run.samples if t <= run.baseline_window_s] or [run.samples[0][1]]
    run.baseline_mib = max(baseline)
    run.end_mib = run.samples[-1][1]
    run.growth = (run.end_mib - run.baseline_mib) / run.baseline_mib
    return run


# -- reporting ------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    load1, load5, load15 = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg": [round(load1, 2), round(load5, 2), round(load15, 2)],
    }


def installed_build(python: str) -> str:
    """Where an interpreter's installed proxy is, and how many of its modules
    are compiled (found by the container check's probe)."""
    smoke = ROOT / "scripts" / "container_smoke.py"
    try:
        probe = subprocess.run(
            [sys.executable, str(smoke), "image-compiled"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        # the probe prints the compiled modules' names (JSON); then where they are
        code = probe.strip() + "; print(proxy.__path__[0])"
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    if done.returncode != 0:
        return f"unknown ({done.stderr.strip().splitlines()[-1:]})"
    names, where = done.stdout.splitlines()
    return f"{where}, {len(json.loads(names))} compiled module(s)"


def code_state(proxy_python: str | None = None) -> dict[str, Any]:
    """Which proxy code ran: the commit and any uncommitted changes under proxy/
    (the proxy runs from the working tree), or the installed build it ran."""
    if proxy_python:
        return {"commit": "", "proxy_changes": [], "installed": installed_build(proxy_python)}

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(
                ["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.rstrip() if done.returncode == 0 else ""

    dirty = git("status", "--porcelain", "--", "proxy").splitlines()
    return {"commit": git("rev-parse", "--short", "HEAD"), "proxy_changes": dirty}


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _ms(value: float) -> str:
    return f"{value:.2f}"


def scenario_table(results: list[ScenarioResult]) -> str:
    head = (
        "| scenario | conc | path | req/s | chunks/s | latency p50 / p99 ms | TTFB p50 / p99 ms "
        "| errors | proxy CPU s per 1k | proxy peak RSS MiB |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for r in results:
        for path, m in (("direct", r.direct), ("proxy", r.proxy)):
            errors = sum(m["errors"].values())
            cpu = rss = ""
            if path == "proxy":
                if r.proxy_cpu_s_per_1k is not None:
                    cpu = f"{r.proxy_cpu_s_per_1k:.4f} s / 1k {r.unit}s"
                rss = f"{r.proxy_peak_rss_mib:.1f}" + ("" if r.peak_rss_reset else " (since start)")
            rows.append(
                f"| {r.name} | {r.concurrency} | {path} | {m['requests_per_s']:,.0f} "
                f"| {m['chunks_per_s']:,.0f} "
                f"| {_ms(m['latency_p50_ms'])} / {_ms(m['latency_p99_ms'])} "
                f"| {_ms(m['ttfb_p50_ms'])} / {_ms(m['ttfb_p99_ms'])} "
                f"| {errors} | {cpu} | {rss} |"
            )
    return "\n".join(rows)


def summary_table(results: list[ScenarioResult]) -> str:
    rows = [
        "| scenario | throughput proxy/direct | added TTFB p50 / p99 ms | proxy CPU us / unit "
        "| proxy CPU busy |",
        "|---|---|---|---|---|",
    ]
    footnote = False
    for r in results:
        per_unit = "" if r.proxy_cpu_s_per_1k is None else f"{r.proxy_cpu_s_per_1k * 1000:.1f}"
        busy = "" if r.proxy_cpu_busy is None else f"{r.proxy_cpu_busy * 100:.0f}%"
        if r.proxy_cpu_busy is not None and r.proxy_cpu_busy < BUSY_FOR_CPU_FIGURES:
            per_unit += " *"
            footnote = True
        rows.append(
            f"| {r.name}: {r.title} | {r.throughput_ratio:.2f} "
            f"| {r.added_ttfb_p50_ms:+.2f} / {r.added_ttfb_p99_ms:+.2f} "
            f"| {per_unit} per {r.unit} | {busy} |"
        )
    if footnote:
        rows.append(
            "\n\\* mostly idle proxy: CPU time from /proc is sampled per scheduler tick, and "
            "a process that wakes briefly from idle can be charged for whole ticks, so "
            "per-unit CPU is overstated here; compare it only between saturated runs."
        )
    return "\n".join(rows)


def targets(results: list[ScenarioResult]) -> list[str]:
    """The performance targets, for the scenarios that measure them."""
    lines = []
    by_name = {r.name: r for r in results}
    for name, unit, target in (
        ("stream", "streamed chunks", STREAM_RATIO_TARGET),
        ("tags", "streamed chunks", STREAM_RATIO_TARGET),
        ("nonstream", "requests", NONSTREAM_RATIO_TARGET),
    ):
        if name in by_name:
            ratio = by_name[name].throughput_ratio
            verdict = "met" if ratio >= target else "NOT met"
            lines.append(
                f"- {name}: {unit} proxy/direct {ratio:.2f} (target >= {target:.2f}): {verdict}"
            )
    if "ttft" in by_name:
        added = by_name["ttft"].added_ttfb_p99_ms
        verdict = "met" if added <= ADDED_TTFB_P99_TARGET_MS else "NOT met"
        lines.append(
            f"- ttft: added p99 TTFB {added:+.2f} ms "
            f"(target <= {ADDED_TTFB_P99_TARGET_MS:.0f} ms): {verdict}"
        )
    return lines


def rss_report(run: RssRun) -> str:
    verdict = "met" if run.growth < RSS_GROWTH_TARGET else "NOT met"
    samples = ", ".join(f"{t:.0f}s {mib:.1f}" for t, mib in run.samples)
    m = run.load
    return (
        f"RSS run: {run.seconds:.0f} s streaming through the proxy, "
        f"{m['requests']:,} requests, {m['chunks_per_s']:,.0f} chunks/s, "
        f"errors {sum(m['errors'].values())}\n"
        f"baseline (peak of first {run.baseline_window_s:.0f} s) {run.baseline_mib:.1f} MiB, "
        f"end {run.end_mib:.1f} MiB, growth {run.growth * 100:+.1f}% "
        f"(target < {RSS_GROWTH_TARGET * 100:.0f}%): {verdict}\n"
        f"samples (MiB): {samples}"
    )


# -- main -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python bench/run.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--duration", type=float, default=10.0, help="counted seconds per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="uncounted seconds per run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--ttft-concurrency", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=200, help="chunks per streamed response")
    parser.add_argument("--ttft-chunks", type=int, default=10, help="chunks per ttft response")
    parser.add_argument("--gap-ms", type=float, default=20.0, help="gap in the ttft scenario")
    parser.add_argument("--only", help="comma-separated: stream,nonstream,tags,ttft")
    parser.add_argument("--proxy-cores", default="0", help="taskset -c list for the proxy")
    parser.add_argument(
        "--store", help="the proxy's store URL (several workers need sqlite:// or redis://)"
    )
    parser.add_argument(
        "--bare",
        action="store_true",
        help="measure bench/bare.py (the floor) in place of the proxy",
    )
    parser.add_argument(
        "--proxy-python",
        metavar="PATH",
        help="run the proxy installed for this interpreter (e.g. a venv with the compiled "
        "build) instead of the working tree",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="proxy worker processes (CPU counted over all)"
    )
    parser.add_argument(
        "--route-key",
        metavar="KEY",
        help="give the proxy's route this upstream key (the cost of masking it in answers)",
    )
    parser.add_argument(
        "--load-cores", default="1", help="taskset -c list for upstream and load generator"
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        help="the proxy's log level (info: an access line per request, as served by default)",
    )
    parser.add_argument("--rss-run", type=float, metavar="SECONDS", help="the RSS run instead")
    parser.add_argument("--rss-interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--rss-baseline", type=float, default=60.0, help="seconds whose peak is the baseline"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    return parser


def check_cores(parser: argparse.ArgumentParser, *lists: str) -> None:
    if shutil.which("taskset") is None:
        parser.error("taskset (util-linux) is needed to pin the processes")
    allowed = os.sched_getaffinity(0)
    for cores in lists:
        wanted: set[int] = set()
        for part in cores.split(","):
            low, _, high = part.partition("-")
            wanted.update(range(int(low), int(high or low) + 1))
        if not wanted <= allowed:
            parser.error(f"cores {cores} are not all available (have {sorted(allowed)})")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM (and SIGHUP) unwind like Ctrl-C, so `finally` blocks stop the children.
    SIGINT is set to raise KeyboardInterrupt even when inherited as ignored (as
    for `cmd &` in a script), so Ctrl-C or `kill -INT` always stops a run."""

    def raise_exit(signum: int, _: object) -> None:
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, raise_exit) for s in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_cores(parser, args.proxy_cores, args.load_cores)
    output: dict[str, Any] = {"machine_before": machine(), "code": code_state(args.proxy_python)}
    with (
        stop_on_signals(),
        tempfile.TemporaryDirectory(prefix="bench-") as logs,
    ):
        children = Children(Path(logs))
        try:
            servers = start_servers(children, args)
            if args.rss_run:
                run = rss_run(children, servers, args)
                output["rss_run"] = asdict(run)
                report = rss_report(run)
            else:
                results = []
                for scenario in scenarios(args):
                    print(f"running {scenario.name}: {scenario.title} ...", flush=True)
                    results.append(run_scenario(children, servers, args, scenario))
                output["scenarios"] = [asdict(r) for r in results]
                report = "\n\n".join(
                    [scenario_table(results), summary_table(results), "\n".join(targets(results))]
                )
        except KeyboardInterrupt:
            print("interrupted; stopping the servers", file=sys.stderr)
            return 130
        except RuntimeError as exc:
            print(f"benchmark failed: {exc}", file=sys.stderr)
            return 1
        finally:
            children.stop_all()
            output["pids"] = children.pids
    output["machine_after"] = machine()
    output["settings"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    before, after, code = output["machine_before"], output["machine_after"], output["code"]
    changes = len(code["proxy_changes"])
    print(
        f"\nmachine: {before['cpus']} x {before['cpu_model']}, Python {before['python']}, "
        f"proxy ({args.workers} worker(s)) on cores {args.proxy_cores}, "
        f"upstream + load on {args.load_cores}; "
        f"load average before {before['loadavg']}, after {after['loadavg']}; "
        + (
            f"proxy installed at {code['installed']}"
            if "installed" in code
            else f"proxy code {code['commit'] or 'unknown'}"
        )
        + (f" + {changes} uncommitted change(s) under proxy/" if changes else "")
        + "\n"
    )
    print(report, flush=True)
    if args.json:
        args.json.write_text(json.dumps(output, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
