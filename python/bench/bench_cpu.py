"""CPU per call of the Python worker and client, as a ratio to raw nats-py request/reply, in one run.

    .cache/venv/bin/python python/bench/bench_cpu.py [--calls 3000]

Starts a router (.cache/bin/router, embedded NATS) and, in child processes, a responder: raw
nats-py (subscribe + respond) or a toolbus.Worker serving a read-only echo tool. The parent
sends sequential requests: raw nats-py (nc.request) or toolbus.Client.call through the router.
Each side's CPU is its own process's user+system time over the measured calls (the children's
read from /proc/<pid>/stat), divided by the number of calls. Linux only. BENCH_EXEC=compact (the
default), binary or structured picks the exec form the worker declares (docs/protocol.md 5.1).
BENCH_PROFILE=file writes cProfile stats of the responder (file.raw, file.toolbus) and of the
requester's measured calls (file.client-raw, file.client-toolbus); the CPU numbers are then not comparable.
BENCH_RESEND=off makes the client with resend=None (protocol 3.2.1: one copy, nats-py's own request).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "src"))

import nats  # noqa: E402

import toolbus  # noqa: E402

PAYLOAD = b'{"text":"hello, bench"}'
TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """utime+stime of a process, in seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def profiler() -> Any:
    """With BENCH_PROFILE=file, a running cProfile of CPU time (dumped to file.<kind> by the responder, file.client-<kind> by the requester)."""
    if not os.environ.get("BENCH_PROFILE"):
        return None
    import cProfile

    prof = cProfile.Profile(time.process_time)  # CPU time: wall time would count the waits of a loaded machine
    prof.enable()
    return prof


async def serve(kind: str, url: str) -> None:
    if kind == "raw":
        nc = await nats.connect(url)

        async def on(m):  # a raw responder: echo the request's payload
            await m.respond(m.data)

        await nc.subscribe("bench.raw", queue="bench", cb=on)
        await nc.flush()
    else:
        @toolbus.tool(name="bench_echo", read_only=True)
        async def bench_echo(text: str) -> str:
            return text

        form = os.environ.get("BENCH_EXEC", "compact")  # the exec form the worker declares: compact, binary or structured
        w = await toolbus.Worker.connect(url, id="bench-worker", binary_exec=form in ("compact", "binary"),
                                         compact_exec=form == "compact")
        w.add(bench_echo)
        await w.start()
    prof = profiler()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.environ["BENCH_PROFILE"] + "." + kind)


def child(kind: str, url: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--url", url], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


async def measure(kind: str, url: str, calls: int, warmup: int) -> tuple[float, float, float]:
    """(requester CPU µs/call, responder CPU µs/call, wall µs/call)."""
    p = child(kind, url)
    try:
        if kind == "raw":
            nc = await nats.connect(url)

            async def one(i: int) -> None:
                await nc.request("bench.raw", PAYLOAD, timeout=10)
        else:
            c = await toolbus.Client.connect(url, source="bench", resend=None if os.environ.get("BENCH_RESEND") == "off" else toolbus.Resend())
            nc = c.nc
            calls_ = [toolbus.Call("c1", "bench_echo", {"text": "hello, bench"})]
            while "bench_echo" not in (await c.tools("bench")).names:
                await asyncio.sleep(0.05)

            async def one(i: int) -> None:
                r = await c.call("bench", calls_, reply_id=f"r{i}")
                assert r.results[0].ok, r

        for i in range(warmup):
            await one(i)
        prof = profiler()
        c0, r0, w0 = time.process_time(), proc_cpu(p.pid), time.perf_counter()
        for i in range(calls):
            await one(warmup + i)
        c1, r1, w1 = time.process_time(), proc_cpu(p.pid), time.perf_counter()
        if prof is not None:
            prof.disable()
            prof.dump_stats(os.environ["BENCH_PROFILE"] + ".client-" + kind)
        await nc.close()
        return (c1 - c0) / calls * 1e6, (r1 - r0) / calls * 1e6, (w1 - w0) / calls * 1e6
    finally:
        assert p.stdin is not None
        p.stdin.close()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--serve")
    ap.add_argument("--url")
    a = ap.parse_args()
    if a.serve:
        await serve(a.serve, a.url)
        return
    router = ROOT / ".cache" / "bin" / "router"
    if not router.exists():
        subprocess.run(["go", "build", "-o", str(router), "./cmd/router"], cwd=ROOT, check=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"nats://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        rp = subprocess.Popen([str(router), "--listen", f"127.0.0.1:{port}", "--data", tmp, "--builtin=false"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=1)
                    await toolbus.Client(nc).tools("ready", timeout=2)
                    await nc.close()
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    await asyncio.sleep(0.1)
            raw = await measure("raw", url, a.calls, a.warmup)
            bus = await measure("toolbus", url, a.calls, a.warmup)
        finally:
            rp.terminate()
            rp.wait(20)
    print(f"calls: {a.calls} sequential (after {a.warmup} warm-up), Python {sys.version.split()[0]}, nats-py {version('nats-py')}")
    print(f"{'side':<10} {'raw nats-py µs/call':>20} {'toolbus µs/call':>16} {'ratio':>6}")
    print(f"{'requester':<10} {raw[0]:>20.1f} {bus[0]:>16.1f} {bus[0] / raw[0]:>6.2f}")
    print(f"{'responder':<10} {raw[1]:>20.1f} {bus[1]:>16.1f} {bus[1] / raw[1]:>6.2f}")
    print(f"{'wall':<10} {raw[2]:>20.1f} {bus[2]:>16.1f} {bus[2] / raw[2]:>6.2f}  (toolbus: through the router)")


if __name__ == "__main__":
    asyncio.run(main())
