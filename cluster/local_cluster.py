#!/usr/bin/env python3
"""A local multi-node Ray for trials: a head plus N worker "nodes" on loopback.

    python cluster/local_cluster.py start [--workers 2] [--dir .ray-local]
    python cluster/local_cluster.py status [--dir .ray-local]
    python cluster/local_cluster.py stop [--dir .ray-local]

Every node is a ``ray start --block`` process of its own, in its own process group, with
its own ports (picked free on 127.0.0.1), its own CPU count, a custom resource
``worker_node_<i>`` (the head has ``head_node``) and its own Ray temp dir, as a machine
of its own would have (its sessions, sockets, logs and the packages of a job's
runtime_env): the head's is a fresh ``/tmp/ftray-*``, worker ``i``'s is ``w<i>`` inside
it. The state (pids, ports, the temp dir) goes to ``DIR/cluster.json``; ``stop`` reads it
back and stops exactly those ``ray start`` processes and what they started (their
process tree, taken before any signal: Ray's workers and job drivers leave the nodes'
process groups), see ``stop_cluster``. It never runs ``ray stop``, which would stop every
Ray on the machine, yours or not.

Nothing is left behind: ``stop`` removes the temp dir, and Ray's default address file
(``/tmp/ray/ray_current_cluster``, which a plain ``ray.init()`` follows: to a cluster
that is gone it waits minutes for its GCS) if, and only if, it names this cluster. The
nodes write their address into their own temp dirs, so this is a guard, not a habit.

Token authentication (Ray >= 2.52; see cluster/README.md): with ``--auth token`` (the
default) every node gets ``RAY_AUTH_MODE=token`` and reads the token from, in Ray's own
order, ``RAY_AUTH_TOKEN``, the file named by ``RAY_AUTH_TOKEN_PATH``, or
``~/.ray/auth_token`` (created with ``ray get-auth-token --generate`` when none of them
exists). The token itself is never written to the state file. A client (``ray job
submit``, ``ftactors submit``) then needs ``RAY_AUTH_MODE=token`` and the same token
source: ``DIR/env.sh`` sets exactly that.

Only the standard library and the ``ray`` command are used, so the test suite loads this
file as a module (``start_cluster`` / ``stop_cluster``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

STATE = "cluster.json"
LOOPBACK = "127.0.0.1"
WORKER_PORTS = 40          # worker processes per node may use this many ports


def ray_command() -> list[str]:
    """The ``ray`` CLI of this Python (not whichever is first on PATH)."""
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ray")
    if not found:
        raise SystemExit("local_cluster: no `ray` command found (pip install 'ray[default]')")
    return [found]


# ------------------------------------------------------------------------------ ports
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _free_range(n: int, taken: set[int]) -> int:
    """The first port of ``n`` consecutive free ports (randomised start, so two clusters
    started at once rarely pick the same range)."""
    import random
    for _ in range(200):
        base = random.randrange(20000, 30000 - n)
        ports = range(base, base + n)
        if not taken.intersection(ports) and all(_port_free(p) for p in ports):
            return base
    raise RuntimeError(f"no {n} consecutive free ports found in 20000-30000")


def _ports(names: list[str], taken: set[int]) -> dict[str, int]:
    out = {}
    for name in names:
        port = _free_port()
        while port in taken:
            port = _free_port()
        taken.add(port)
        out[name] = port
    base = _free_range(WORKER_PORTS, taken)
    taken.update(range(base, base + WORKER_PORTS))
    out["min_worker_port"], out["max_worker_port"] = base, base + WORKER_PORTS - 1
    return out


NODE_PORTS = ["node_manager_port", "object_manager_port", "dashboard_agent_listen_port",
              "dashboard_agent_grpc_port", "runtime_env_agent_port", "metrics_export_port"]
HEAD_PORTS = ["port", "dashboard_port", "ray_client_server_port"] + NODE_PORTS


def _flags(ports: dict[str, int]) -> list[str]:
    return [f"--{name.replace('_', '-')}={port}" for name, port in ports.items()]


# ----------------------------------------------------------------------- token auth
def auth_env(mode: str, env: dict[str, str]) -> dict[str, str]:
    """The environment variables that give a Ray process ``mode`` ("token" or
    "disabled"); for "token", makes sure Ray will find a token (see module docstring)."""
    if mode == "disabled":
        return {"RAY_AUTH_MODE": "disabled"}
    if env.get("RAY_AUTH_TOKEN"):
        return {"RAY_AUTH_MODE": "token"}
    path = env.get("RAY_AUTH_TOKEN_PATH")
    if path:
        if not Path(path).is_file() or not Path(path).read_text().strip():
            raise SystemExit(f"local_cluster: RAY_AUTH_TOKEN_PATH={path} is not a file "
                             "holding a token")
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(Path(path).resolve())}
    default = Path.home() / ".ray" / "auth_token"
    if not default.is_file():
        subprocess.run(ray_command() + ["get-auth-token", "--generate"], check=True,
                       stdout=subprocess.DEVNULL, env=env)
    return {"RAY_AUTH_MODE": "token"}


# -------------------------------------------------------------------------- start
def _launch(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:  # a fresh log: _wait_started reads it
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_started(proc: subprocess.Popen, log: Path, deadline: float) -> None:
    """Wait for ``ray start --block`` to print that its node runs."""
    while time.time() < deadline:
        if "Ray runtime started." in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"`ray start` exited with {proc.returncode}; see {log}:\n"
                               + log.read_text(errors="replace")[-3000:])
        time.sleep(0.2)
    raise TimeoutError(f"the Ray node did not start in time; see {log}")


def _wait_http(url: str, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.time() > deadline:
            raise TimeoutError(f"{url} did not answer in time")
        time.sleep(0.3)


def start_cluster(state_dir: str | os.PathLike, workers: int = 2, head_cpus: int = 2,
                  worker_cpus: int = 1, object_store_mb: int = 256, auth: str = "token",
                  temp_dir: str | None = None, env: dict[str, str] | None = None,
                  timeout_s: float = 120.0) -> dict:
    """Start a head and ``workers`` worker nodes on loopback; return the saved state.

    ``env`` is the environment the nodes start with (default: this process's, without
    ``RAY_ADDRESS``); the auth variables of ``auth`` are added to it. On any error the
    nodes started so far are stopped again.
    """
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    if (state_dir / STATE).exists():
        raise RuntimeError(f"{state_dir / STATE} exists: stop that cluster first "
                           f"(python {__file__} stop --dir {state_dir})")
    env = dict(os.environ if env is None else env)
    env.pop("RAY_ADDRESS", None)  # a node must not join some other cluster
    env.update(auth_env(auth, env))
    # a loaded machine takes more than Ray's default 30 s to register a raylet
    env.setdefault("RAY_raylet_start_wait_time_s", "120")
    # and more than Ray's 60 s to start the dashboard's nine modules (a head gave up
    # after 52 s with "Broken pipe" from every module, at the end of a loaded test run)
    env.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "240")
    # on SIGTERM `ray start --block` drains its node for up to 30 s first (for Serve);
    # a trial cluster has nothing to drain
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    # Ray's socket paths must stay under 107 bytes: a short temp dir of our own
    temp_dir = temp_dir or tempfile.mkdtemp(prefix="ftray-", dir="/tmp")
    taken: set[int] = set()
    head_ports = _ports(HEAD_PORTS, taken)
    state = {"temp_dir": temp_dir, "auth": auth, "env": {k: v for k, v in env.items()
                                                         if k in ("RAY_AUTH_MODE",
                                                                  "RAY_AUTH_TOKEN_PATH")},
             "gcs_address": f"{LOOPBACK}:{head_ports['port']}",
             "dashboard_url": f"http://{LOOPBACK}:{head_ports['dashboard_port']}",
             "nodes": []}
    ray = ray_command()
    deadline = time.time() + timeout_s
    try:
        log = state_dir / "head.log"
        proc = _launch(ray + ["start", "--head", "--block", f"--node-ip-address={LOOPBACK}",
                              f"--dashboard-host={LOOPBACK}", "--include-dashboard=true",
                              f"--num-cpus={head_cpus}", f"--temp-dir={temp_dir}",
                              f"--object-store-memory={object_store_mb << 20}",
                              "--resources", json.dumps({"head_node": 1}),
                              "--disable-usage-stats"] + _flags(head_ports), log, env)
        state["nodes"].append({"name": "head", "pid": proc.pid, "log": str(log),
                               "ports": head_ports})
        _save(state_dir, state)  # saved at once: a failed start can still be stopped
        _wait_started(proc, log, deadline)
        # Ray turns 127.0.0.1 into this machine's address for node IPs (a cluster must be
        # reachable from other hosts); the head writes the GCS address it really uses
        state["gcs_address"] = (Path(temp_dir) / "ray_current_cluster").read_text().strip()
        _save(state_dir, state)
        for i in range(workers):
            ports = _ports(NODE_PORTS, taken)
            log = state_dir / f"worker-{i}.log"
            node_temp = os.path.join(temp_dir, f"w{i}")
            proc = _launch(ray + ["start", "--block", f"--address={state['gcs_address']}",
                                  f"--node-ip-address={LOOPBACK}", f"--num-cpus={worker_cpus}",
                                  f"--temp-dir={node_temp}",
                                  f"--object-store-memory={object_store_mb << 20}",
                                  "--resources", json.dumps({f"worker_node_{i}": 1}),
                                  "--disable-usage-stats"] + _flags(ports), log, env)
            state["nodes"].append({"name": f"worker-{i}", "pid": proc.pid, "log": str(log),
                                   "ports": ports})
            _save(state_dir, state)
            _wait_started(proc, log, deadline)
        # job submission needs the dashboard (public health endpoint: no token needed)
        _wait_http(state["dashboard_url"] + "/api/gcs_healthz", deadline)
    except BaseException:
        stop_cluster(state_dir, keep_temp=True)  # keep Ray's logs to see what went wrong
        print(f"local_cluster: start failed; Ray's logs: {temp_dir}/session_latest/logs",
              file=sys.stderr)
        raise
    _write_env(state_dir, state)
    return state


def _save(state_dir: Path, state: dict) -> None:
    tmp = state_dir / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_dir / STATE)


def _write_env(state_dir: Path, state: dict) -> None:
    lines = [f"# source me: a client of the local cluster in {state_dir}",
             f"export RAY_API_SERVER_ADDRESS={state['dashboard_url']}  # ray job submit/status"]
    for key, value in state["env"].items():
        lines.append(f"export {key}={value}")
    (state_dir / "env.sh").write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- stop
# Ray processes of a node: its executables and Python modules live in the ray package
RAY_PROCESS = re.compile(r"(site|dist)-packages/ray/|/ray start ")


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, start time in clock ticks, command line) of every live
    process we can see (Linux /proc; empty elsewhere). (pid, start time) names one
    process: a pid alone may be reused."""
    out = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # from field 3 (state) on
        if fields[0] == "Z":  # exited, not yet reaped by its parent: gone for us
            continue
        out[int(entry.name)] = (int(fields[1]), int(fields[19]), cmd)
    return out


def _tree(roots: list[int], procs: dict) -> dict[int, int]:
    """pid -> start time of ``roots`` and all their descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [r for r in roots if r in procs]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = procs[pid][1]
            todo.extend(children.get(pid, ()))
    return out


def leftovers(temp_dir: str, procs: dict | None = None) -> dict[int, int]:
    """pid -> start time of the Ray processes whose command line names ``temp_dir``
    (a node's GCS, raylet, dashboard, agents, ``ray start``; not a ``tail`` of a log)."""
    procs = _processes() if procs is None else procs
    return {pid: start for pid, (_, start, cmd) in procs.items()
            if temp_dir in cmd and RAY_PROCESS.search(cmd) and pid != os.getpid()}


def _alive(members: dict[int, int]) -> dict[int, int]:
    procs = _processes()
    return {pid: start for pid, start in members.items()
            if pid in procs and procs[pid][1] == start}


def stop_cluster(state_dir: str | os.PathLike, grace_s: float = 15.0,
                 keep_temp: bool = False) -> list[int]:
    """Stop the nodes recorded in ``state_dir``; returns the pids signalled.

    What is stopped: the recorded ``ray start`` processes (each still running with a
    Ray process naming the cluster's temp dir among its descendants: a recorded pid
    alone may be someone else's by now), everything they had started (taken from the
    process tree before any signal: Ray's workers and job drivers leave the nodes'
    process groups), and any Ray process left naming the temp dir (from an earlier
    start that went wrong). Each ``ray start`` gets SIGTERM and stops its node; what is
    still alive ``grace_s`` later gets SIGKILL.
    """
    state_dir = Path(state_dir).resolve()
    path = state_dir / STATE
    if not path.exists():
        return []
    state = json.loads(path.read_text())
    temp_dir = state["temp_dir"]
    procs = _processes()
    named = leftovers(temp_dir, procs)
    leaders = [node["pid"] for node in reversed(state["nodes"])  # workers first
               if named.keys() & _tree([node["pid"]], procs).keys()]
    members = {**named, **_tree(leaders, procs)}
    signalled: list[int] = []
    for pid in leaders:  # `ray start --block` stops the processes of its node on SIGTERM
        try:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.time() + grace_s
    while time.time() < deadline and _alive(members):
        time.sleep(0.3)
    for pid in _alive(members):
        try:
            os.kill(pid, signal.SIGKILL)
            signalled.append(pid)
            print(f"local_cluster: killed pid {pid}, still running {grace_s:g} s after "
                  f"SIGTERM: {procs[pid][2][:100]}", file=sys.stderr)
        except ProcessLookupError:
            pass
    for pid in leaders:  # reap them if this process started them (start_cluster)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    forget_address(state["gcs_address"])
    path.unlink()
    if not keep_temp:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return signalled


def default_address_file() -> Path:
    """Ray's default address file, where ``ray start`` and ``ray.cluster_utils`` write
    the GCS address a plain ``ray.init()`` then joins (Ray's ``get_ray_address_file``,
    on Linux: ``$RAY_TMPDIR``, else ``$TMPDIR``, else ``/tmp``, then
    ``ray/ray_current_cluster``)."""
    root = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(root) / "ray" / "ray_current_cluster"


def forget_address(gcs_address: str) -> bool:
    """Remove Ray's default address file if it names ``gcs_address`` (a cluster that is
    stopped); True if it did. One naming another cluster is not ours to remove."""
    path = default_address_file()
    try:
        if path.read_text().strip() != gcs_address:
            return False
        path.unlink()
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------ CLI
def _status(state_dir: Path) -> int:
    path = state_dir / STATE
    if not path.exists():
        print(f"no cluster recorded in {state_dir}")
        return 1
    state = json.loads(path.read_text())
    procs = _processes()
    named = leftovers(state["temp_dir"], procs)
    for node in state["nodes"]:
        running = bool(named.keys() & _tree([node["pid"]], procs).keys())
        print(f"{node['name']:>10}  pid {node['pid']:>7}  "
              f"{'running' if running else 'gone'}  log {node['log']}")
    print(f"GCS {state['gcs_address']}   dashboard / job API {state['dashboard_url']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("start", "stop", "status"):
        s = sub.add_parser(name)
        s.add_argument("--dir", default=".ray-local",
                       help="where the state, logs and env.sh go (default ./.ray-local)")
        if name == "start":
            s.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
            s.add_argument("--head-cpus", type=int, default=2)
            s.add_argument("--worker-cpus", type=int, default=1)
            s.add_argument("--object-store-mb", type=int, default=256)
            s.add_argument("--auth", choices=["token", "disabled"], default="token",
                           help="Ray token authentication (default token)")
    args = p.parse_args(argv)
    state_dir = Path(args.dir).resolve()
    if args.cmd == "start":
        state = start_cluster(state_dir, workers=args.workers, head_cpus=args.head_cpus,
                              worker_cpus=args.worker_cpus,
                              object_store_mb=args.object_store_mb, auth=args.auth)
        print(f"started a head and {args.workers} worker node(s); temp dir "
              f"{state['temp_dir']}")
        print(f"  job API:  {state['dashboard_url']}   (ftactors submit X.yaml "
              f"--address {state['dashboard_url']})")
        print(f"  GCS:      {state['gcs_address']}   (ray.init(address=...))")
        print(f"  client environment: source {state_dir / 'env.sh'}")
        print(f"  stop:     python {__file__} stop --dir {state_dir}")
        return 0
    if args.cmd == "stop":
        pids = stop_cluster(state_dir)
        print(f"stopped {len(pids)} node(s)/process(es)" if pids
              else f"nothing to stop in {state_dir}")
        return 0
    return _status(state_dir)


if __name__ == "__main__":
    sys.exit(main())
