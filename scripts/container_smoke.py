#!/usr/bin/env python3
"""Checks that scripts/container-check runs on the image and the running stack.

Standard library only (it runs on the host, outside any virtualenv):

  container_smoke.py health URL [URL ...]   wait until each /healthz answers
  container_smoke.py demo URL               a demo chat completion, plain and streamed
  container_smoke.py proxy URL CONV_ID      a turn through the proxy, stored under CONV_ID
  container_smoke.py image-digests          Python code that prints the installed modules' digests
  container_smoke.py sources REPO           those digests (JSON on stdin) match the tree's modules
  container_smoke.py image-compiled         Python code that prints the modules installed compiled
  container_smoke.py compiled REPO 0|1      those (JSON on stdin) are pyproject.toml's list, or none

Each check prints one line; the first failure exits 1 with what was wrong.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

TAGS = ("<think>", "</think>", "<thinking>", "</thinking>", "<reasoning>", "</reasoning>")
QUESTION = "What is 17 * 23?"
KEY = "Bearer container-check-key"  # any key: it names the tenant

# Requests go straight to the published ports, never through an HTTP proxy
# from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# Run inside the image: the sha256 of every module of the installed package.
IMAGE_DIGESTS = (
    "import hashlib, json, pathlib, proxy; root = pathlib.Path(proxy.__file__).parent; "
    "print(json.dumps({p.relative_to(root.parent).as_posix(): "
    "hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob('*.py')}))"
)

# Run inside the image: the package's modules that import as compiled extensions.
IMAGE_COMPILED = (
    "import importlib.machinery as m, importlib.util as u, json, pkgutil, proxy; "
    "names = [i.name for i in pkgutil.walk_packages(proxy.__path__, 'proxy.')]; "
    "specs = [u.find_spec(n) for n in names]; "
    "print(json.dumps(sorted(s.name for s in specs "
    "if s and s.origin and s.origin.endswith(tuple(m.EXTENSION_SUFFIXES)))))"
)


class CheckFailed(Exception):
    pass


def request(
    url: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def expect(condition: bool, what: str, detail: object = "") -> None:
    if not condition:
        raise CheckFailed(f"{what}: {detail}" if detail != "" else what)


def ok(message: str) -> None:
    print(f"  ok  {message}", flush=True)


def check_answer(where: str, reasoning: str, content: str) -> None:
    expect(bool(reasoning.strip()), f"{where}: no reasoning in reasoning_content")
    expect(bool(content.strip()), f"{where}: no answer in content")
    leaked = [tag for tag in TAGS if tag in content.lower()]
    expect(not leaked, f"{where}: the answer holds a reasoning tag", leaked)
    expect("391" in content, f"{where}: unexpected answer", content[:200])
    ok(f"{where}: reasoning_content {len(reasoning)} chars, answer {content.strip()[:40]!r}")


def completion(base: str, model: str, headers: dict[str, str], where: str) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}]}
    status, _, raw = request(f"{base}/v1/chat/completions", body, headers)
    expect(status == 200, f"{where}: HTTP {status}", raw[:300].decode(errors="replace"))
    reply: dict[str, Any] = json.loads(raw)
    message = reply["choices"][0]["message"]
    check_answer(where, message.get("reasoning_content") or "", message.get("content") or "")
    return reply


def streamed(base: str, model: str, headers: dict[str, str], where: str) -> None:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    status, _, raw = request(f"{base}/v1/chat/completions", body, headers)
    expect(status == 200, f"{where}: HTTP {status}", raw[:300].decode(errors="replace"))
    reasoning, content, done = [], [], False
    for line in raw.decode().splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            continue
        event = json.loads(payload)
        expect("error" not in event, f"{where}: error event", event.get("error"))
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning.append(delta.get("reasoning_content") or "")
            content.append(delta.get("content") or "")
    expect(done, f"{where}: the stream did not end with [DONE]")
    check_answer(where, "".join(reasoning), "".join(content))


def health(urls: list[str], deadline: float = 90) -> None:
    start = time.monotonic()
    for base in urls:
        last: object = "no answer"
        while True:
            try:
                status, _, raw = request(f"{base}/healthz", timeout=3)
                if status == 200 and json.loads(raw).get("status") == "ok":
                    break
                last = f"HTTP {status} {raw[:200]!r}"
            except (OSError, ValueError) as exc:
                last = exc
            if time.monotonic() - start > deadline:
                raise CheckFailed(f"{base}/healthz did not answer within {deadline:.0f} s: {last}")
            time.sleep(0.5)
        ok(f"{base}/healthz answers (after {time.monotonic() - start:.1f} s)")


def demo(base: str) -> None:
    status, _, raw = request(f"{base}/v1/models")
    expect(status == 200, f"demo /v1/models: HTTP {status}", raw[:200])
    ids = [m["id"] for m in json.loads(raw)["data"]]
    expect("demo-minimax" in ids, "demo /v1/models: no demo-minimax", ids)
    ok(f"demo /v1/models lists {len(ids)} simulated models")
    completion(base, "demo-deepseek", {}, "demo demo-deepseek (reasoning_content upstream)")
    completion(base, "demo-minimax", {}, "demo demo-minimax (<think> inline upstream)")
    streamed(base, "demo-minimax", {}, "demo demo-minimax streamed")


def proxy(base: str, conversation: str) -> None:
    headers = {"Authorization": KEY, "X-Conversation-Id": conversation}
    completion(base, "demo-minimax", headers, "proxy -> demo upstream")
    status, _, raw = request(f"{base}/v1/conversations/{conversation}", headers=headers)
    expect(status == 200, f"GET /v1/conversations/{conversation}: HTTP {status}", raw[:300])
    stored = json.loads(raw)
    text = json.dumps(stored)
    expect('"thinking"' in text, "the stored conversation has no thinking block", text[:300])
    ok(f"proxy stored the turn under conversation {conversation}")
    status, _, raw = request(f"{base}/readyz")
    ready = json.loads(raw)
    expect(status == 200 and ready.get("store") == "ok", "proxy /readyz", ready)
    expect(ready.get("store_kind") == "redis", "proxy store is not redis", ready)
    ok(f"proxy /readyz: {ready}")


def tree_digests(repo: Path) -> dict[str, str]:
    """The package's modules in the source tree (those setuptools installs:
    inside directories that are packages)."""
    digests = {}
    for path in sorted((repo / "proxy").rglob("*.py")):
        relative = path.relative_to(repo)
        if all((repo / parent / "__init__.py").exists() for parent in relative.parents[:-1]):
            digests[relative.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def sources(repo: str, image_json: str) -> None:
    image: dict[str, str] = json.loads(image_json)
    tree = tree_digests(Path(repo))
    missing = sorted(set(tree) - set(image))
    extra = sorted(set(image) - set(tree))
    changed = sorted(p for p in set(tree) & set(image) if tree[p] != image[p])
    expect(
        not (missing or extra or changed),
        "the image is not built from this tree",
        {"missing": missing, "extra": extra, "changed": changed},
    )
    ok(f"the image's {len(image)} modules are the source tree's")


def compiled(repo: str, compile_: str, image_json: str) -> None:
    """The image's compiled modules are the ones pyproject.toml lists (built
    with COMPILE=1), or none."""
    project = tomllib.loads((Path(repo) / "pyproject.toml").read_text(encoding="utf-8"))
    listed = project["tool"]["reasoning-proxy"]["compile"]["modules"] if compile_ == "1" else []
    wanted = sorted(path.removesuffix(".py").replace("/", ".") for path in listed)
    image: list[str] = json.loads(image_json)
    expect(
        image == wanted,
        f"the image's compiled modules are not the ones COMPILE={compile_} builds",
        {"missing": sorted(set(wanted) - set(image)), "extra": sorted(set(image) - set(wanted))},
    )
    ok(f"{len(image)} of the image's modules are compiled (COMPILE={compile_})")


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 2 and argv[0] == "health":
            health(argv[1:])
        elif len(argv) == 2 and argv[0] == "demo":
            demo(argv[1])
        elif len(argv) == 3 and argv[0] == "proxy":
            proxy(argv[1], argv[2])
        elif len(argv) == 2 and argv[0] == "sources":
            sources(argv[1], sys.stdin.read())
        elif argv == ["image-digests"]:
            print(IMAGE_DIGESTS)
        elif len(argv) == 3 and argv[0] == "compiled":
            compiled(argv[1], argv[2], sys.stdin.read())
        elif argv == ["image-compiled"]:
            print(IMAGE_COMPILED)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except CheckFailed as exc:
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
