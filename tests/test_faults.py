"""Faults are normal events in a benchmark: each is recorded as a failed configuration with its reason from the
log, and the study goes on. Every test here runs real llama.cpp (CPU + two local rpc-servers)."""

from __future__ import annotations

import signal
import threading

import pytest

from llamahelp import FAST, run_study
from llamalab.core import net, proc
from llamalab.setup.progress import Progress

pytestmark = [pytest.mark.llama, pytest.mark.spread]

ONE_BUILD = ['builds=[{name="copies4"}]'] + FAST[1:]


def _configs(store, run_id):
    return {(c["build"], c["setting"]): c for c in store.configs(run_id)}


def _ctx_beyond_memory() -> int:
    """A context whose KV cache is four times this machine's memory and swap: its allocation fails while loading.
    The tiny model's cache takes 3,072 bytes a token on RPC0 (f16/q8_0). Not larger than needed: llama.cpp sets up
    ~20 bytes of host bookkeeping a cell before it allocates (200,000,000 tokens took 22 s and 4 GB to fail)."""
    with open("/proc/meminfo") as f:
        kib = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f)}
    total = (kib["MemTotal"] + kib.get("SwapTotal", 0)) * 1024
    return max(16_000_000, -(-4 * total // 3072))


def test_server_that_fails_to_start_is_recorded_and_the_study_goes_on(demo_prep, llama_home, tmp_path):
    # a context no machine has memory for: the KV cache allocation fails while loading
    huge = _ctx_beyond_memory()
    store, rid = run_study(llama_home, tmp_path, ONE_BUILD + [
        f'settings=[{{name="huge-ctx",args=["-c","{huge}","-fit","off"]}},{{name="ok",args=[]}}]'])
    c = _configs(store, rid)
    assert c[("copies4", "huge-ctx")]["status"] == "failed"
    assert "out of memory" in c[("copies4", "huge-ctx")]["reason"]
    assert c[("copies4", "ok")]["status"] == "ok"
    assert {t["setting"] for t in store.trials(rid)} == {"ok"}
    assert store.run(rid)["status"] == "finished"


class KillDuringTrial(Progress):
    """Sends `sig` to the first live process whose argv[0] ends with `name` shortly after trial `at` starts."""

    def __init__(self, name: str, at: int = 2, delay: float = 0.3, sig: signal.Signals = signal.SIGKILL):
        self.name, self.at, self.delay, self.sig, self.killed = name, at, delay, sig, []
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def trial(self, k: int, n: int, label: str) -> None:
        if k == self.at and not self.killed:
            def kill():
                for c in proc.live_children():
                    if c.argv[0].endswith(self.name):
                        c.popen.send_signal(self.sig)
                        self.killed.append(c.argv[0])
                        return
            self.killed.append("armed")
            threading.Timer(self.delay, kill).start()


@pytest.mark.parametrize("victim, sig, reason_words", [
    pytest.param("llama-server", signal.SIGKILL,
                 ["llama-server died during the workload: killed by SIGKILL (killed, possibly out of memory",
                  "\nLast lines:\n"], id="llama-server-killed-mid-request"),
    pytest.param("llama-server", signal.SIGILL,
                 ["llama-server died during the workload: killed by SIGILL (illegal instruction", "\nLast lines:\n"],
                 id="llama-server-sigill-mid-request"),
    pytest.param("ggml-rpc-server", signal.SIGKILL, ["llama-server"], id="rpc-server-killed-mid-request"),
])
def test_process_killed_mid_request(demo_prep, llama_home, tmp_path, victim, sig, reason_words):
    hook = KillDuringTrial(victim, at=2, sig=sig)
    overrides = [o for o in FAST if not o.startswith("workload.output_tokens")] + ["workload.output_tokens=400"]
    store, rid = run_study(llama_home, tmp_path, overrides, progress=hook)
    assert any(k.endswith(victim) for k in hook.killed)
    c = _configs(store, rid)
    first = c[("copies4", "kv-f16-q8_0")]
    assert first["status"] == "failed", first
    assert all(w in first["reason"] for w in reason_words), first["reason"]
    assert "no reason in its log" not in first["reason"]
    # the terminal said it too, with the log's last lines
    said = [w for w in hook.warnings if w.startswith("copies4 × kv-f16-q8_0 failed:")]
    assert said and all(w in said[0] for w in reason_words), hook.warnings
    # trial 1 was stored before the fault and is kept; the other build still ran completely
    stored = {(t["build"], t["trial"]) for t in store.trials(rid) if not t["errors"]}
    assert ("copies4", 1) in stored and {("copies1", 1), ("copies1", 2)} <= stored
    assert c[("copies1", "kv-f16-q8_0")]["status"] == "ok"
    assert not proc.live_children()


def test_health_never_ready_is_a_timeout_failure(demo_prep, llama_home, tmp_path):
    store, rid = run_study(llama_home, tmp_path, ONE_BUILD + ["server.ready_timeout_s=0.01"])
    c = store.configs(rid)[0]
    assert c["status"] == "failed" and "not ready after" in c["reason"]
    assert store.run(rid)["status"] == "failed" and not proc.live_children()  # nothing was measured


def test_a_taken_port_is_retried_on_another(demo_prep, llama_home, tmp_path, monkeypatch):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    real = net.free_port
    calls = []

    def first_taken(host="127.0.0.1"):
        calls.append(1)
        # the [devices] vram check starts the two rpc-servers once before the run (ports 1, 2); then the pass's
        # rpc-servers take the next two; llama-server's first port is the taken one
        return port if len(calls) == 5 else real(host)

    monkeypatch.setattr(net, "free_port", first_taken)
    try:
        store, rid = run_study(llama_home, tmp_path, ONE_BUILD + ["workload.repeats=1"])
    finally:
        taken.close()
    assert store.configs(rid)[0]["status"] == "ok" and len(store.trials(rid)) == 1
    log = (tmp_path / "runs" / rid / "logs").rglob("llama-server.log")
    assert any("couldn't bind" in p.read_text() for p in log)


def test_a_failed_build_is_recorded_and_the_other_builds_run(demo_prep, llama_home, tmp_path):
    store, rid = run_study(llama_home, tmp_path, [
        'builds=[{name="broken",cmake={CMAKE_C_COMPILER="/nonexistent/cc"}},{name="copies4"}]'] + FAST[1:])
    builds = {b["name"]: b for b in store.builds(rid)}
    assert builds["broken"]["status"] == "failed"
    assert "configure step" in builds["broken"]["reason"] and "build.log" in builds["broken"]["reason"]
    assert builds["copies4"]["status"] == "ok"
    assert {t["build"] for t in store.trials(rid)} == {"copies4"}


def test_64_concurrent_requests_against_8_slots_have_no_client_errors(demo_prep, llama_home, tmp_path):
    store, rid = run_study(llama_home, tmp_path, ONE_BUILD[:2] + [
        "workload.repeats=1", "workload.prompt_tokens=32", "workload.output_tokens=8", "workload.warmup=1",
        "workload.concurrency=[64]", "server.parallel=8"])
    (t,) = store.trials(rid)
    assert t["concurrency"] == 64 and len(t["requests"]) == 64
    errors = [r["error"] for r in t["requests"] if r["error"]]
    assert errors == [], errors
    assert all(r["predicted_n"] == 8 and r["prompt_n"] == 32 for r in t["requests"])
