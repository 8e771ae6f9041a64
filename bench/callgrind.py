"""Instructions per request through the proxy, counted by callgrind.

Wall-clock ratios move with the machine's neighbours; instruction counts do
not. This starts the fake upstream (bench/upstream.py) and the proxy under
`valgrind --tool=callgrind` (instrumentation off), warms the proxy up, then
counts only the measured requests: `callgrind_control` switches
instrumentation on and zeroes the counters after the warm-up, and dumps
them after the last measured request (the load generator, bench/loadgen.py,
runs each batch to its end). Prints one
Markdown row per scenario: instructions per request, and per chunk for
streams. `--json PATH` writes the numbers too.

    python bench/callgrind.py [--requests 300] [--only nonstream,stream]

Needs valgrind (Debian: `apt-get install valgrind`). The proxy starts
uninstrumented (`--instr-atstart=no`) and runs about 50 times slower once
instrumented, so the counts come from a few hundred requests; they repeat
to within about a percent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import ROOT, Children, free_port, wait_http

ALL_CORES = f"0-{(os.cpu_count() or 1) - 1}"

READY_TIMEOUT = 300.0  # seconds: the proxy starts slowly under callgrind
SCENARIOS = {
    # name: (model, stream, chunks per response)
    "nonstream": ("bench-native-c200-g0", False, 0),
    "stream": ("bench-native-c200-g0", True, 200),
    "tags": ("bench-tags-c200-g0", True, 200),
}


def loadgen(url: str, model: str, stream: bool, requests: int, concurrency: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.loadgen", url, "--model", model, "--json"]
    argv += ["--stream" if stream else "--no-stream", "--concurrency", str(concurrency)]
    argv += ["--requests", str(requests), "--duration", "0", "--warmup", "0", "--timeout", "600"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=True, timeout=3600)
    result: dict[str, Any] = json.loads(done.stdout)
    if result["errors"]:
        raise RuntimeError(f"the load generator saw errors: {result['errors']}")
    return result


def control(pid: int, *argv: str) -> None:
    subprocess.run(
        ["callgrind_control", *argv, str(pid)], capture_output=True, check=True, timeout=120
    )


def instructions(pid: int, out: Path) -> int:
    """Dump the proxy's counters and read the total of the newest dump."""
    before = set(out.parent.glob(out.name + "*"))
    control(pid, "-d")
    dumps = sorted(set(out.parent.glob(out.name + "*")) - before, key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise RuntimeError("callgrind wrote no dump")
    text = dumps[-1].read_text(errors="replace")
    found = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
    if found is None:
        raise RuntimeError(f"no totals in {dumps[-1]}")
    return int(found.group(1))


def measure(args: argparse.Namespace, name: str, children: Children, work: Path) -> dict[str, Any]:
    model, stream, chunks = SCENARIOS[name]
    py = sys.executable
    up_port, proxy_port = free_port(), free_port()
    upstream = children.start(
        "upstream", ALL_CORES, [py, "-m", "bench.upstream", "--port", str(up_port)]
    )
    wait_http(f"http://127.0.0.1:{up_port}/health", upstream, children, "upstream", 30)
    out = work / f"callgrind.{name}"
    serve = ["serve", "--upstream", f"http://127.0.0.1:{up_port}/v1", "--port", str(proxy_port)]
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    if args.bare:  # the floor: a forwarder with none of the proxy's features
        server = ["-m", "bench.bare", *serve[1:]]
    else:
        server = ["-m", "proxy", *serve, "--log-level", args.log_level]
    if args.proxy_python and not args.bare:  # an installed build, e.g. the compiled one
        argv = [*valgrind, args.proxy_python, *server]
        proxy = children.start("proxy", ALL_CORES, argv, installed=True)
    else:
        proxy = children.start("proxy", ALL_CORES, [*valgrind, py, *server])
    url = f"http://127.0.0.1:{proxy_port}"
    wait_http(f"{url}/readyz", proxy, children, "proxy", READY_TIMEOUT)
    try:
        loadgen(f"{url}/v1", model, stream, args.warmup, args.concurrency)
        control(proxy.pid, "-i", "on")  # instrument from here (the start-up ran at full speed)
        loadgen(f"{url}/v1", model, stream, args.warmup // 4 + 1, args.concurrency)
        control(proxy.pid, "-z")
        result = loadgen(f"{url}/v1", model, stream, args.requests, args.concurrency)
        total = instructions(proxy.pid, out)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for dump in work.glob(out.name + "*"):
                shutil.copy(dump, args.keep / dump.name)
    finally:
        children.stop(proxy)
        children.stop(upstream)
    per_request = total / args.requests
    row: dict[str, Any] = {"scenario": name, "requests": args.requests, "instructions": total}
    row["per_request"] = round(per_request)
    if chunks:
        row["per_chunk"] = round(per_request / max(1, result["chunks"] / args.requests))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="measured requests")
    parser.add_argument("--warmup", type=int, default=100, help="requests before counting")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", default="nonstream,stream,tags")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--log-level",
        default="warning",
        help="the proxy's log level (info: an access line per request, as served by default)",
    )
    parser.add_argument(
        "--bare", action="store_true", help="count bench/bare.py (the floor) instead of the proxy"
    )
    parser.add_argument(
        "--proxy-python",
        metavar="PATH",
        help="count the proxy installed for this interpreter (e.g. a venv with the compiled "
        "build) instead of the working tree",
    )
    parser.add_argument("--keep", type=Path, help="copy the dumps here (for callgrind_annotate)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    names = args.only.split(",")
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rp-callgrind-") as tmp:
        children = Children(Path(tmp))
        try:
            for name in names:
                rows.append(measure(args, name, children, Path(tmp)))
        finally:
            children.stop_all()
    print("| scenario | instructions per request | per chunk |")
    print("|---|---|---|")
    for row in rows:
        per_chunk = f"{row['per_chunk']:,}" if "per_chunk" in row else "-"
        print(f"| {row['scenario']} | {row['per_request']:,} | {per_chunk} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
