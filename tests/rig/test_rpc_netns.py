"""A study across a real network on this machine: two namespace "hosts", each with an rpc-server bound to its own
address behind a shaped veth link (2 ms each way, 1 Gbit/s), run through llamalab (`session.prepare` +
`runner.execute`), and the same study on loopback rpc-servers for comparison. Only the namespaces' addresses and
loopback are contacted. Namespaces, links and processes go away in the fixture's finalizer, pass or fail.

Where openssh-server is installed (/usr/sbin/sshd), an sshd runs in each namespace too (its own host key, a key
made for the test, nothing read from ~/.ssh), and llamalab starts and stops the rpc-servers itself over ssh: one
copied from its build with scp, one already there (rpc_server_path).

Set LLAMALAB_NETNS_REPORT=path to keep the figures as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import netns
from llamalab.core import net, proc
from llamalab.report import data as rdata
from llamalab.report.analysis import network
from llamalab.rig import remote
from llamalab.run import runner
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress, StderrProgress
from llamalab.store.db import Store
from llamalab.study import spec as studymod

pytestmark = pytest.mark.llama

WORKLOAD = {"prompt_tokens": 128, "output_tokens": 16, "repeats": 2, "warmup": 1}
BUILDS = [{"name": "copies4", "label": "Pipeline parallelism, 4 sched copies"}]


def _progress() -> Progress:
    return StderrProgress() if os.environ.get("LLAMALAB_TEST_VERBOSE") else Progress()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    lab = netns.Lab(count=2, delay_ms=2.0, rate="1gbit")
    try:
        lab.up()
        yield lab
    finally:
        lab.down()


def _run(data: dict, db: Path, runs: Path, home: Path) -> str:
    st = studymod.parse(data, "test study")
    opts = RunOptions(home=home, db=db, runs_dir=runs, fresh=True)
    prep = session.prepare(st, opts, _progress())
    return runner.execute(prep, json.dumps(data), opts, _progress())


@pytest.fixture(scope="module")
def runs(lab, llama_home, tmp_path_factory):
    """(remote RunData, loopback RunData): the same study over the namespaces and over loopback."""
    tmp = tmp_path_factory.mktemp("rpc-netns")
    db = tmp / "results.db"
    loop = {"name": "rpc-netns", "builds": BUILDS, "workload": WORKLOAD,
            "devices": {"backend": "cpu-rpc", "count": 2, "rpc_threads": 1}}
    loop_id = _run(loop, db, tmp / "runs", llama_home)
    with Store(db) as store:  # the loopback run made the build; its rpc-server is the one the namespaces run
        art_bin = Path(json.loads(store.configs(loop_id)[0]["server_argv_json"])[0]).parent
    lab.start_rpc(art_bin / "ggml-rpc-server", {}, tmp / "netns-logs", threads=1)
    rem = {"name": "rpc-netns", "builds": BUILDS, "workload": WORKLOAD,
           "devices": {"backend": "rpc", "rpc": [{"endpoint": h.endpoint, "backend": "cpu"} for h in lab.hosts]}}
    rem_id = _run(rem, db, tmp / "runs", llama_home)
    with Store(db) as store:
        return rdata.load(store, rem_id), rdata.load(store, loop_id)


def test_endpoints_are_namespace_addresses(lab):
    for h in lab.hosts:
        ep = remote.parse_endpoint(h.endpoint)
        assert ep.host.startswith("10.211.") and remote.exposure(ep.host) is None


def test_remote_run_completes_with_ledger_per_remote_device(lab, runs):
    rem, _ = runs
    assert rem.run["status"] == "finished"
    [cfg] = rem.ok_configs()
    by_ep = remote.ledger_by_endpoint(cfg["ledger"])
    assert set(by_ep) == {h.endpoint for h in lab.hosts}
    for ep, devs in by_ep.items():
        assert list(devs) == ["RPC0"], ep
        b = devs["RPC0"]
        assert b["model_mib"] > 0 and b["kv_mib"] > 0 and b["compute_mib"] > 0, (ep, b)
    stored = {r["name"] for r in rem.tables["buffers"] if not r["is_host"]}
    assert stored == {f"RPC0[{h.endpoint}]" for h in lab.hosts}
    assert len(rem.trials) == WORKLOAD["repeats"] and all(not t["errors"] for t in rem.trials)


def test_pipeline_parallelism_is_on_over_rpc(runs):
    for d in runs:
        [cfg] = d.ok_configs()
        assert cfg["ledger"]["pipeline_parallel"] is True
        assert cfg["ledger"]["sched_copies"] == 4


def test_topology_is_recorded(lab, runs):
    rem, _ = runs
    topo = rem.run["devices"]
    assert topo["backend"] == "rpc" and topo["local_count"] == 0
    assert [r["endpoint"] for r in topo["remotes"]] == [h.endpoint for h in lab.hosts]
    for r in topo["remotes"]:
        [d] = r["devices"]
        assert d["total_mib"] > 0 and d["backend"] == "cpu" and d["backend_source"] == "declared"
    [cfg] = rem.ok_configs()
    dev = cfg["devices"]
    assert dev["backend"] == "rpc" and dev["count"] == 2
    assert dev["server_args"] == ["--rpc", ",".join(h.endpoint for h in lab.hosts)]


def test_report_compares_remote_with_loopback(lab, runs):
    rem, loop = runs
    speeds = network.versus_loopback(rem, loop)
    by_metric = {s["metric"]: s for s in speeds if s["concurrency"] == 1}
    assert {"output_tps", "input_tps"} <= set(by_metric)
    for s in by_metric.values():
        assert s["ratio"] > 0 and s["n_a"] == s["n_b"] == WORKLOAD["repeats"]
    text = network.markdown(rem, loop)
    assert "Speed over the network against loopback" in text and "remote/loopback" in text
    for h in lab.hosts:
        assert h.endpoint in text
    figures = {
        "shaping": lab.shaping,
        "remote_run": rem.id, "loopback_run": loop.id,
        "speed": {m: {k: by_metric[m][k] for k in ("a_median", "b_median", "ratio", "ci_low", "ci_high", "verdict")}
                  for m in by_metric},
        "remote_devices": network.remote_devices(rem),
        "load_seconds": {"remote": rem.ok_configs()[0]["load_seconds"],
                         "loopback": loop.ok_configs()[0]["load_seconds"]},
    }
    print("\n" + text + "\n" + json.dumps(figures, indent=2))
    if out := os.environ.get("LLAMALAB_NETNS_REPORT"):
        Path(out).write_text(json.dumps(figures, indent=2))


# ---------------------------------------------------------------- rpc-servers started over ssh

SSHD = Path("/usr/sbin/sshd")
SSH_PORT = 50070  # the rpc port of servers llamalab starts over ssh (50052/50053 serve the tests above)


@pytest.fixture(scope="module")
def sshd(lab, tmp_path_factory):
    """An sshd in every namespace, root login with a key made here; yields the ssh options and a remote_dir."""
    if not SSHD.is_file() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server and openssh-client are not installed (apt-get install openssh-server)")
    tmp = tmp_path_factory.mktemp("sshd")
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "client.pub").read_text())
    host_pub = (tmp / "host.pub").read_text().split()
    (tmp / "known_hosts").write_text("".join(f"{h.address} {host_pub[0]} {host_pub[1]}\n" for h in lab.hosts))
    (tmp / "sshd_config").write_text(
        f"Port 22\nHostKey {tmp / 'host'}\nAuthorizedKeysFile {tmp / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nPidFile none\nSubsystem sftp internal-sftp\n")
    # sshd checks its privilege separation folder at start and again in each connection's child. Made here where
    # absent and left in place (empty, as openssh-server's own start-up leaves it): removing it would make every
    # other sshd on this machine drop new connections ("Missing privilege separation directory: /run/sshd"), this
    # fixture's in another pytest process included.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    children = []
    try:
        for h in lab.hosts:
            c = proc.spawn(["ip", "netns", "exec", h.ns, str(SSHD), "-D", "-e", "-f", str(tmp / "sshd_config"),
                            "-o", f"ListenAddress={h.address}"], log_path=tmp / f"sshd-{h.ns}.log")
            children.append(c)
            assert net.wait_port(h.address, 22, 20, alive=c.alive), c.log_tail(10)
        options = ["-F", "/dev/null", "-i", str(tmp / "client"), "-o", f"UserKnownHostsFile={tmp / 'known_hosts'}",
                   "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes"]
        yield {"options": options, "remote_dir": str(tmp / "remote")}
    finally:
        for c in children:
            c.terminate(grace_s=3.0)


def _ssh_remotes(lab, sshd, bin_dir: Path) -> list[dict]:
    a, b = lab.hosts
    common = {"ssh_options": sshd["options"], "remote_dir": sshd["remote_dir"], "threads": 1}
    return [{"endpoint": f"{a.address}:{SSH_PORT}", "ssh": f"root@{a.address}", **common},
            {"endpoint": f"{b.address}:{SSH_PORT}", "ssh": f"root@{b.address}", **common,
             "rpc_server_path": str(bin_dir / "ggml-rpc-server")}]


def _pidfiles(sshd, wait_s: float = 10.0) -> list[Path]:
    """The rpc-servers' pid files left in the remote folder, once those being removed are gone (the rpc-server's
    wrapper removes its file a moment after its port closes)."""
    deadline = time.monotonic() + wait_s
    while (left := sorted(Path(sshd["remote_dir"]).glob("*.pid"))) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _sshd_logs(sshd) -> str:
    """The last lines each namespace's sshd printed: why it dropped or refused a connection."""
    logs = sorted(Path(sshd["remote_dir"]).parent.glob("sshd-*.log"))
    return "\n".join(f"{p.name}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs)


def test_ssh_managed_rpc_servers_run_and_stop(lab, sshd, runs, llama_home, tmp_path):
    rem, _ = runs
    bin_dir = Path(rem.configs[0]["server_argv"][0]).parent
    study = {"name": "rpc-ssh", "builds": BUILDS, "workload": {**WORKLOAD, "repeats": 1, "output_tokens": 8},
             "devices": {"backend": "rpc", "rpc": _ssh_remotes(lab, sshd, bin_dir)}}
    db = tmp_path / "results.db"
    run_id = _run(study, db, tmp_path / "runs", llama_home)
    with Store(db) as store:
        d = rdata.load(store, run_id)
    assert d.run["status"] == "finished"
    [cfg] = d.ok_configs()
    offered = cfg["devices"]["remotes"]
    assert [o["endpoint"] for o in offered] == [r["endpoint"] for r in study["devices"]["rpc"]]
    for o in offered:  # the backend comes from the rpc-server's own start-up lines, read back through ssh
        assert o["backend"] == "cpu" and o["backend_source"] == "rpc-server log" and o["description"], o
    assert set(remote.ledger_by_endpoint(cfg["ledger"])) == {o["endpoint"] for o in offered}
    copied = list(Path(sshd["remote_dir"]).glob("*/ggml-rpc-server"))
    assert len(copied) == 1 and (copied[0].parent / "libggml-base.so.0").is_file()
    for o in offered:  # nothing left running, nothing left behind
        ep = remote.parse_endpoint(o["endpoint"])
        assert not net.port_open(ep.host, ep.port), f"an rpc-server still listens at {ep}"
    assert _pidfiles(sshd) == [], _sshd_logs(sshd)


def test_ssh_managed_rpc_server_stops_on_failure(lab, sshd, runs, llama_home, tmp_path):
    rem, _ = runs
    bin_dir = Path(rem.configs[0]["server_argv"][0]).parent
    st = studymod.parse({"name": "x", "builds": BUILDS, "devices": {"backend": "rpc",
                                                                    "rpc": _ssh_remotes(lab, sshd, bin_dir)[:1]}})
    spec = st.devices.rpc[0]
    prep = session.prepare(st, RunOptions(home=llama_home, db=tmp_path / "r.db"), _progress())
    ep = remote.parse_endpoint(spec.endpoint)
    with pytest.raises(RuntimeError, match="boom"):
        with remote.managed(spec, prep.artifacts["copies4"], tmp_path) as m:
            assert net.port_open(ep.host, ep.port) and m.child.alive()
            assert remote.server_devices(m.log_lines), m.log_lines
            raise RuntimeError("boom")
    # `kill` returns before the rpc-server is gone (wait_port here returned at once while it still listened)
    assert _closes(ep, 10.0), "the rpc-server outlived the failure"
    assert not m.child.alive() and _pidfiles(sshd) == [], _sshd_logs(sshd)


def test_ssh_hangup_alone_stops_the_rpc_server(lab, sshd, runs, llama_home, tmp_path):
    """If llamalab dies before it can send the stop command, closing the ssh connection still stops the server."""
    rem, _ = runs
    bin_dir = Path(rem.configs[0]["server_argv"][0]).parent
    st = studymod.parse({"name": "x", "builds": BUILDS, "devices": {"backend": "rpc",
                                                                    "rpc": _ssh_remotes(lab, sshd, bin_dir)[1:]}})
    spec = st.devices.rpc[0]
    prep = session.prepare(st, RunOptions(home=llama_home, db=tmp_path / "r.db"), _progress())
    ep = remote.parse_endpoint(spec.endpoint)
    with remote.managed(spec, prep.artifacts["copies4"], tmp_path) as m:
        assert net.port_open(ep.host, ep.port)
        m.child.popen.kill()  # the ssh client alone, as a SIGKILLed llamalab's would go; no stop command yet
        m.child.popen.wait(10)
        assert _closes(ep, 10.0), "the rpc-server outlived its ssh connection"
    assert _pidfiles(sshd) == [], _sshd_logs(sshd)


def _closes(ep, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not net.port_open(ep.host, ep.port):
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_leaves_no_rpc_server_on_the_ssh_hosts(lab, sshd, runs, llama_home, tmp_path):
    """`llamalab run` over ssh-started rpc-servers, interrupted while they run: exit 130, nothing left there."""
    import signal
    import sys

    rem, _ = runs
    bin_dir = Path(rem.configs[0]["server_argv"][0]).parent
    remotes = _ssh_remotes(lab, sshd, bin_dir)
    toml = ['name = "rpc-ssh-interrupt"', "[devices]", 'backend = "rpc"']
    for r in remotes:
        toml.append("[[devices.rpc]]")
        toml += [f"{k} = {json.dumps(v)}" for k, v in r.items()]
    toml += ["[[builds]]", 'name = "copies4"', "[workload]", "repeats = 50", "output_tokens = 64"]
    study = tmp_path / "study.toml"
    study.write_text("\n".join(toml) + "\n")
    env = {**os.environ, "LLAMALAB_HOME": str(llama_home), "LLAMALAB_DATA": str(tmp_path / "data")}
    p = subprocess.Popen([sys.executable, "-m", "llamalab.cli", "run", str(study), "--trust-study"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    eps = [remote.parse_endpoint(r["endpoint"]) for r in remotes]
    try:
        deadline = time.monotonic() + 120
        while not all(net.port_open(e.host, e.port) for e in eps):
            assert p.poll() is None and time.monotonic() < deadline, \
                (p.stderr.read() if p.poll() is not None else "") + "\n" + _sshd_logs(sshd)
            time.sleep(0.1)
        time.sleep(1.0)  # into the workload
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-2000:]
    for e in eps:
        assert _closes(e, 10.0), f"an rpc-server still listens at {e} after Ctrl-C"
    assert _pidfiles(sshd) == [], _sshd_logs(sshd)
