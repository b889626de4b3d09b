"""``ftactors submit``: run a chaos experiment on a Ray cluster as a Ray job.

    ftactors submit EXPERIMENT.yaml --address http://HOST:8265 [--out LOCAL_DIR]
                                    [--results-uri URI] [--timeout-s S]

What it does, in order:

1. checks the experiment here (``load_experiment``: a typo costs a second, not a job);
   with ``transport: ray`` and ``cluster: local`` (the default) the shipped copy says
   ``cluster: {address: auto}``, so the runs join the cluster the job runs on instead of
   starting a private Ray inside the job's driver (``{nodes: N}`` is refused for that
   reason: run such experiments with ``ftactors chaos`` on a machine of their own);
2. stages this package as one directory (``ftactors/``, with ``protocols/`` and
   ``apps/`` inside, as installed and as in the source tree) and ships it as the job's
   ``runtime_env`` ``py_modules``; the experiment file goes as the ``working_dir``. Ray puts ``py_modules`` on the ``PYTHONPATH`` of the job's driver and
   of every worker, where it comes before any installed ftactors, so the cluster runs
   exactly this code, installed there or not (the job's log names the directory it
   imported ftactors from);
3. submits the job through ``ray.job_submission.JobSubmissionClient``: what ``ray job
   submit`` itself runs, but with the runtime_env as a dict, the status as a value
   rather than text to parse, and the job id to stop it on Ctrl-C;
4. waits, printing status changes and the job's log as it grows;
5. fetches the results: by default the job writes to ``LOCAL_DIR`` itself (made
   absolute), which is right for a cluster on this machine or on a shared filesystem;
   for any other cluster, ``--results-uri s3://bucket/prefix`` (any pyarrow filesystem
   URI) is where the job writes, and it is copied back to ``LOCAL_DIR`` afterwards.

Token authentication (Ray >= 2.52; see cluster/README.md): the cluster's dashboard says
whether it wants a token (``/api/authentication_mode`` needs none). If it does, the
token is taken in Ray's own order: ``RAY_AUTH_TOKEN``, the file named by
``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``, and sent as ``Authorization: Bearer`` on
every request (submission, package upload, status, logs). It is not copied into the
job's runtime_env, where anyone who can list jobs could read it: the cluster's own
processes already hold it.

Exit code: 0 the job succeeded and every run verified; 1 the job failed or stopped, or
a run did not verify, or no results came back; 2 bad usage (a bad experiment file, a
cluster that cannot be reached or refuses the token).

The job runs ``python -m ftactors.tools.submit --job experiment.yaml --out OUT`` (``_job_main``
below): it prints where ftactors was imported from, then runs ``ftactors chaos``.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ._common import command_parser, run_command
from .chaos import add_chaos, print_verdicts
from .experiment import ExperimentError, load_experiment

POLL_S = 1.0
#: files of the source tree that are never shipped
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class SubmitError(Exception):
    """The job could not be submitted (exit code 2); the message says why."""


# ------------------------------------------------------------------------ staging
def stage_package(dest: str | os.PathLike) -> Path:
    """Copy this ftactors (``protocols`` and ``apps`` are subpackages of it) into
    ``dest/ftactors``; return that directory."""
    import ftactors
    pkg = Path(dest) / "ftactors"
    shutil.copytree(Path(ftactors.__file__).resolve().parent, pkg, ignore=IGNORE)
    return pkg


def prepare_experiment(path: str) -> tuple[dict, str]:
    """Check the experiment file and return (the dict to ship, its name).

    Raises:
        SubmitError: the file is wrong, or it asks for a cluster a job cannot use.
    """
    import copy
    try:
        exp = load_experiment(path)
    except ExperimentError as exc:
        raise SubmitError(str(exc)) from None
    data = copy.deepcopy(exp.source)
    if exp.transport == "ray":
        if exp.cluster.kind == "nodes":
            raise SubmitError(
                f"{path}: cluster: {{nodes: {exp.cluster.nodes}}} would start a private Ray "
                "cluster inside the job; submit it with the cluster omitted (the runs then "
                "use the cluster the job runs on), or run it with `ftactors chaos` on a "
                "machine of its own")
        if exp.cluster.kind == "local":
            data["cluster"] = {"address": "auto"}  # the job's own cluster
    return data, exp.name


# ---------------------------------------------------------------------- the cluster
def dashboard_auth_mode(address: str) -> str | None:
    """The cluster's authentication mode ("token", "disabled"), from its dashboard's
    public ``/api/authentication_mode``; None when it does not say (older Ray)."""
    import json
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/authentication_mode",
                                    timeout=10) as r:
            return json.loads(r.read().decode()).get("authentication_mode")
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:
        raise SubmitError(f"cannot reach the Ray dashboard at {address}: {exc}") from None


def find_token(env=os.environ) -> str | None:
    """The token Ray itself would use, in its order: ``RAY_AUTH_TOKEN``, the file at
    ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``."""
    if env.get("RAY_AUTH_TOKEN", "").strip():
        return env["RAY_AUTH_TOKEN"].strip()
    path = env.get("RAY_AUTH_TOKEN_PATH")
    if path:
        try:
            token = Path(path).expanduser().read_text().strip()
        except OSError as exc:
            raise SubmitError(f"RAY_AUTH_TOKEN_PATH={path}: {exc.strerror or exc}") from None
        if not token:
            raise SubmitError(f"RAY_AUTH_TOKEN_PATH={path} is empty")
        return token
    default = Path.home() / ".ray" / "auth_token"
    if default.is_file() and default.read_text().strip():
        return default.read_text().strip()
    return None


def auth_headers(address: str) -> dict[str, str]:
    """The headers that authenticate to the cluster at ``address`` (none if it does not
    ask for a token)."""
    mode = dashboard_auth_mode(address)
    if mode is None:  # the dashboard does not say: do what Ray's own client does
        mode = os.environ.get("RAY_AUTH_MODE", "disabled").lower()
    if mode != "token":
        return {}
    token = find_token()
    if token is None:
        raise SubmitError(
            f"the cluster at {address} uses token authentication, and no token was found: "
            "set RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH to a file holding it, or put it in "
            "~/.ray/auth_token (on the cluster: `ray get-auth-token`)")
    return {"Authorization": f"Bearer {token}"}


def _client(address: str):
    from ray.job_submission import JobSubmissionClient
    try:
        return JobSubmissionClient(address, headers=auth_headers(address))
    except SubmitError:
        raise
    except Exception as exc:  # ConnectionError, AuthenticationError, RuntimeError, ...
        raise SubmitError(f"cannot use the Ray job API at {address}: "
                          f"{' '.join(str(exc).split())[:500]}") from None


# --------------------------------------------------------------------- job control
def run_job(address: str, entrypoint: str, runtime_env: dict, *, submission_id: str,
            metadata: dict | None = None, timeout_s: float | None = None,
            out=None, err=None) -> str:
    """Submit ``entrypoint``, stream its log while it runs and return its final status
    ("SUCCEEDED", "FAILED", "STOPPED"; "STOPPED" too when ``timeout_s`` ran out).

    Raises:
        SubmitError: the cluster refused the job (or cannot be reached).
    """
    out, err = out or sys.stdout, err or sys.stderr
    client = _client(address)
    try:
        job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env,
                                   submission_id=submission_id, metadata=metadata or {})
    except Exception as exc:
        raise SubmitError(f"the cluster at {address} refused the job: "
                          f"{' '.join(str(exc).split())[:500]}") from None
    print(f"submitted job {job_id} to {address}", file=err, flush=True)
    t0, shown, status = time.time(), 0, None
    try:
        while True:
            now = str(client.get_job_status(job_id).value)
            if now != status:
                status = now
                print(f"[{time.time() - t0:7.1f}s] job {job_id}: {status}", file=err,
                      flush=True)
            logs = client.get_job_logs(job_id)
            if len(logs) > shown:
                out.write(logs[shown:])
                out.flush()
                shown = len(logs)
            if status in TERMINAL:
                break
            if timeout_s is not None and time.time() - t0 > timeout_s:
                print(f"job {job_id}: still {status} after {timeout_s:g} s: stopping it",
                      file=err, flush=True)
                client.stop_job(job_id)
                _wait_terminal(client, job_id)
                return "STOPPED"
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping job {job_id}", file=err, flush=True)
        client.stop_job(job_id)
        raise
    if status == "FAILED":
        info = client.get_job_info(job_id)
        if info.message:
            print(f"job {job_id} failed: {info.message}", file=err)
    return status


def _wait_terminal(client, job_id: str, limit_s: float = 30.0) -> None:
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if str(client.get_job_status(job_id).value) in TERMINAL:
            return
        time.sleep(POLL_S)


def fetch_results(uri: str, local_dir: str) -> None:
    """Copy a results directory from a pyarrow filesystem URI to ``local_dir``."""
    import pyarrow.fs as pafs
    Path(local_dir).mkdir(parents=True, exist_ok=True)
    pafs.copy_files(uri, str(Path(local_dir).resolve()))


def summarize(local_dir: str, err=None) -> bool:
    """Print what ``local_dir/results.parquet`` says; True when every run verified."""
    import pyarrow.parquet as pq
    path = Path(local_dir) / "results.parquet"
    if not path.exists():
        print(f"no results at {path}", file=err or sys.stderr)
        return False
    return print_verdicts(pq.read_table(path).to_pylist(), str(path), err=err or sys.stderr)


def submit_experiment(experiment: str, address: str, *, out: str | None = None,
                      results_uri: str | None = None, timeout_s: float | None = None,
                      stdout=None, stderr=None) -> int:
    """Run ``experiment`` on the cluster at ``address``; the exit code (module docstring)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    import yaml
    try:
        data, name = prepare_experiment(experiment)
        local_dir = str(Path(out or f"chaos-results/{name}").resolve())
        job_out = results_uri or local_dir
        with tempfile.TemporaryDirectory(prefix="ftactors-submit-") as tmp:
            modules = stage_package(Path(tmp) / "modules")
            work = Path(tmp) / "work"
            work.mkdir()
            (work / "experiment.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
            runtime_env = {"working_dir": str(work), "py_modules": [str(modules)]}
            entrypoint = (f"python -m ftactors.tools.submit --job experiment.yaml "
                          f"--out {_quote(job_out)}")
            from .. import __version__
            stamp = time.strftime("%Y%m%d-%H%M%S")
            status = run_job(address, entrypoint, runtime_env,
                             submission_id=f"ftactors-chaos-{_slug(name)}-{stamp}",
                             metadata={"ftactors": __version__, "experiment": name},
                             timeout_s=timeout_s, out=stdout, err=stderr)
    except SubmitError as exc:
        print(f"ftactors submit: {exc}", file=stderr)
        return 2
    if results_uri:
        try:
            fetch_results(results_uri, local_dir)
            print(f"copied {results_uri} to {local_dir}", file=stderr)
        except Exception as exc:  # whatever the filesystem raises
            print(f"ftactors submit: cannot copy the results from {results_uri}: {exc}",
                  file=stderr)
            return 1
    elif not (Path(local_dir) / "results.parquet").exists() and status == "SUCCEEDED":
        print(f"ftactors submit: the job succeeded but {local_dir} has no results here: "
              "is the cluster on another machine without a shared filesystem? Use "
              "--results-uri (e.g. s3://bucket/prefix)", file=stderr)
        return 1
    verified = summarize(local_dir, err=stderr)
    if status != "SUCCEEDED":
        print(f"ftactors submit: the job ended {status}", file=stderr)
        return 1
    return 0 if verified else 1


def _quote(text: str) -> str:
    import shlex
    return shlex.quote(text)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40] or "experiment"


# ---------------------------------------------------------------------------- CLI
def add_submit(sub) -> None:
    p = sub.add_parser(
        "submit", help="run a chaos experiment on a Ray cluster as a Ray job, fetch results",
        description="Ship this package and EXPERIMENT to the Ray cluster at --address "
                    "(its dashboard / job API), run `ftactors chaos` there as a Ray job, "
                    "show its progress and fetch results.parquet. See cluster/README.md.")
    p.add_argument("experiment", help="an experiment YAML file (as for ftactors chaos)")
    p.add_argument("--address", default=os.environ.get("RAY_API_SERVER_ADDRESS")
                   or os.environ.get("RAY_ADDRESS"), metavar="http://HOST:8265",
                   help="the cluster's job API (default $RAY_API_SERVER_ADDRESS, "
                        "then $RAY_ADDRESS)")
    p.add_argument("--out", default=None, metavar="LOCAL_DIR",
                   help="where the results end up here (default ./chaos-results/NAME)")
    p.add_argument("--results-uri", default=None, metavar="URI",
                   help="where the job writes its results when the cluster cannot write "
                        "LOCAL_DIR (s3://..., gs://..., any pyarrow filesystem URI); "
                        "copied to LOCAL_DIR afterwards")
    p.add_argument("--timeout-s", type=float, default=None, metavar="SECONDS",
                   help="stop the job after this long (exit 1)")
    p.set_defaults(func=_cmd_submit)


def _cmd_submit(args) -> int:
    if not args.address:
        print("ftactors submit: give the cluster's job API with --address "
              "http://HOST:8265 (or set RAY_API_SERVER_ADDRESS)", file=sys.stderr)
        return 2
    address = args.address if "://" in args.address else f"http://{args.address}"
    try:
        return submit_experiment(args.experiment, address, out=args.out,
                                 results_uri=args.results_uri, timeout_s=args.timeout_s)
    except KeyboardInterrupt:
        return 130


def _job_main(argv: list[str]) -> int:
    """The job's entrypoint on the cluster: say which ftactors runs, then run chaos."""
    import ftactors
    import ftactors.apps
    import ftactors.protocols
    print(f"ftactors {ftactors.__version__} from {Path(ftactors.__file__).parent} "
          f"(protocols {Path(ftactors.protocols.__file__).parent}, "
          f"apps {Path(ftactors.apps.__file__).parent})", flush=True)
    return run_command(command_parser(add_chaos), ["chaos", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] != ["--job"]:
        sys.exit("python -m ftactors.tools.submit is the job side of `ftactors submit`; "
                 "use `ftactors submit` instead")
    sys.exit(_job_main(sys.argv[2:]))
