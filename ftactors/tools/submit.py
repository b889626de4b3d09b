"""``ftactors submit``: run a chaos experiment, or one run, on a Ray cluster as a Ray job.

    ftactors submit EXPERIMENT.yaml --address http://HOST:8265 [--out LOCAL_DIR]
                                    [--results-uri URI] [--timeout-s S] [--report]
    ftactors submit PROGRAM [the flags of ftactors run PROGRAM] --address ... [same]

What it does, in order:

1. checks the experiment here (``load_experiment``: a typo costs a second, not a job);
   one run (``PROGRAM``: ``path/to/file.py:Class``, ``package.module:Class`` or a
   shipped app, with the flags of ``ftactors run``, parsed by ``ftactors run``'s own
   parser) becomes an experiment of that one run (``experiment_from_run``). With
   ``transport: ray`` and ``cluster: local`` (the default) the shipped copy says
   ``cluster: {address: auto}``, so the runs join the cluster the job runs on instead of
   starting a private Ray inside the job's driver (``{nodes: N}`` is refused for that
   reason: run such experiments with ``ftactors chaos`` on a machine of their own);
2. stages the job's working directory (``stage_programs``): the experiment, and the
   programs it names, where the job finds them as ``ftactors chaos`` finds them here.
   A program file (``path/to/solver.py:Solver``, or a ``--check`` file) brings its
   folder with everything below it (its neighbours, which it may import, and the files
   it reads); a ``package.module`` brings its top-level package or module from where
   Python imports it here (the current directory first), unless it is installed
   (site-packages: the cluster must have it installed too). What lies under the current
   directory keeps its relative place, so the experiment's relative references hold; a
   folder from elsewhere goes to ``_programs/`` and the shipped experiment points there.
   Never shipped: version control, virtual environments, caches, results and checkpoint
   folders (``JUNK``), and files over ``MAX_FILE_BYTES`` (named as they are skipped);
3. stages this package as one directory (``ftactors/``, with ``protocols/`` and
   ``apps/`` inside, as installed and as in the source tree) and ships it as the job's
   ``runtime_env`` ``py_modules``, the staged directory as its ``working_dir``. Ray puts
   ``py_modules`` on the ``PYTHONPATH`` of the job's driver and of every worker, where it
   comes before any installed ftactors, so the cluster runs exactly this code, installed
   there or not (the job's log names the directory it imported ftactors from); the
   working directory is the driver's and every worker's current directory;
4. submits the job through ``ray.job_submission.JobSubmissionClient``: what ``ray job
   submit`` itself runs, but with the runtime_env as a dict, the status as a value
   rather than text to parse, and the job id to stop it on Ctrl-C;
5. waits, printing status changes and the job's log as it grows;
6. fetches the results: by default the job writes to ``LOCAL_DIR`` itself (made
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
a run did not verify, or no results came back; 2 bad usage (a bad experiment file or
run flags, a cluster that cannot be reached or refuses the token).

The job runs ``python -m ftactors.tools.submit --job EXPERIMENT --out OUT`` (``_job_main``
below): it prints where ftactors was imported from, then runs ``ftactors chaos``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ._common import command_parser, run_command
from .apps_cli import add_run
from .chaos import add_chaos, print_verdicts
from .experiment import (ExperimentError, experiment_from_dict, experiment_from_run,
                         load_experiment)
from .programs import APPS, is_reference

POLL_S = 1.0
#: files of the source tree that are never shipped
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")
#: what is never shipped from a program's folder: version control, caches, build and
#: results folders (a virtual environment, whatever its name, is known by its pyvenv.cfg)
JUNK = ("__pycache__", "*.pyc", "*.pyo", "*.egg-info", ".eggs", ".git", ".hg", ".svn",
        ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".nox", ".ipynb_checkpoints",
        "node_modules", ".ray-local", "chaos-results", "ftactors-checkpoints", ".DS_Store")
#: a file larger than this is not shipped (Ray's own warning size for a package file)
MAX_FILE_BYTES = 10 << 20
#: where the experiment goes in the job's working directory
EXPERIMENT = ".ftactors-submit/experiment.yaml"
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


def prepare_experiment(source: str | dict, where: str = "ftactors submit") -> tuple[dict, str]:
    """Check the experiment (a file, or a dict such as ``experiment_from_run`` gives)
    and return (the dict to ship, its name).

    Raises:
        SubmitError: the experiment is wrong, or asks for a cluster a job cannot use.
    """
    import copy
    try:
        exp = (load_experiment(source) if isinstance(source, str) else
               experiment_from_dict(source, where=where))
    except ExperimentError as exc:
        raise SubmitError(str(exc)) from None
    where = source if isinstance(source, str) else where
    data = copy.deepcopy(exp.source)
    if exp.transport == "ray":
        if exp.cluster.kind == "nodes":
            raise SubmitError(
                f"{where}: cluster: {{nodes: {exp.cluster.nodes}}} would start a private Ray "
                "cluster inside the job; submit it with the cluster omitted (the runs then "
                "use the cluster the job runs on), or run it with `ftactors chaos` on a "
                "machine of its own")
        if exp.cluster.kind == "local":
            data["cluster"] = {"address": "auto"}  # the job's own cluster
    return data, exp.name


# ------------------------------------------------------------------------ programs
def program_references(data: dict) -> list[tuple[str, str, str]]:
    """``(app, key, reference)`` for every program an experiment dict names: its matrix
    apps written as references (key ``"app"``), and the ``program`` and ``check`` of
    its ``apps:`` entries."""
    apps = data.get("apps") or {}
    matrix = data["matrix"]["app"]
    out = []
    for app in matrix if isinstance(matrix, list) else [matrix]:
        entry = apps.get(app) or {}
        if "program" in entry:
            out.append((app, "program", str(entry["program"])))
        elif is_reference(str(app)):
            out.append((app, "app", str(app)))
        if entry.get("check"):
            out.append((app, "check", str(entry["check"])))
    return out


def _is_file_reference(where: str) -> bool:
    """As ``programs._load`` tells a file from a module."""
    return where.endswith(".py") or "/" in where or os.sep in where


def _installed(path: Path) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in path.parts)


def stage_programs(data: dict, work: Path, cwd: Path, out=None) -> dict:
    """Copy into ``work`` the programs the experiment ``data`` names (module
    docstring, step 2) and return the experiment to ship (references to what came from
    outside ``cwd`` rewritten to their copies). Call it after ``prepare_experiment``:
    the programs are loaded then, so their modules say where they came from."""
    import copy
    data = copy.deepcopy(data)
    folders: dict[Path, Path] = {}  # source folder or module file -> its place in work
    for app, key, ref in program_references(data):
        where, _, attr = ref.rpartition(":")
        if _is_file_reference(where):
            source = (cwd / where).resolve()
            inside = _under(source, cwd)
            place = inside.parent if inside is not None else _outside(source.parent, folders)
            folders.setdefault(source.parent, place)
            new = f"{(place / source.name).as_posix()}:{attr}"
        else:
            top = where.split(".")[0]
            module = sys.modules.get(top)
            path = Path(getattr(module, "__file__", None) or next(iter(getattr(
                module, "__path__", ())), "")) if module is not None else None
            if path is None or not path.is_absolute() or _installed(path) or top == "ftactors":
                print(f"  {ref}: imported from {path or 'nowhere here'}; not shipped (the "
                      "cluster must have it installed)", file=out)
                continue
            source = path.parent if path.name == "__init__.py" else path
            folders.setdefault(source, Path(source.name))  # on the job's path: its cwd
            new = ref
        if new != ref:
            entry = data.setdefault("apps", {}).setdefault(app, {})
            entry["program" if key == "app" else key] = new
    for source, place in _outermost(folders):
        _copy_program(source, work, place, out)
    return data


def _under(path: Path, root: Path) -> Path | None:
    try:
        return path.relative_to(root.resolve())
    except ValueError:
        return None


def _outside(folder: Path, folders: dict) -> Path:
    """The place in the job's working directory of a folder from outside it."""
    if folder in folders:
        return folders[folder]
    return Path("_programs") / f"{len(folders)}-{folder.name or 'root'}"


def _outermost(folders: dict[Path, Path]) -> list[tuple[Path, Path]]:
    """The folders to copy: each once, and none inside another that is copied whole
    to the matching place."""
    kept: list[tuple[Path, Path]] = []
    for source, place in sorted(folders.items(), key=lambda kv: len(kv[0].parts)):
        inside = next((s for s, p in kept if _under(source, s) is not None
                       and p / source.relative_to(s) == place), None)
        if inside is None:
            kept.append((source, place))
    return kept


def _copy_program(source: Path, work: Path, place: Path, out=None) -> None:
    """Copy a program's folder (or module file) to ``work / place``, without ``JUNK``,
    virtual environments and files over ``MAX_FILE_BYTES``."""
    junk = shutil.ignore_patterns(*JUNK)

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = set(junk(folder, names))
        for name in names:
            path = Path(folder) / name
            if name in skip:
                continue
            if path.is_dir() and (path / "pyvenv.cfg").is_file():
                skip.add(name)
            elif path.is_file() and path.stat().st_size > MAX_FILE_BYTES:
                print(f"  not shipped: {path} ({path.stat().st_size / (1 << 20):.1f} MiB, "
                      f"over {MAX_FILE_BYTES >> 20} MiB)", file=out)
                skip.add(name)
        return skip

    dest = work / place
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        shutil.copy2(source, dest)
    else:
        shutil.copytree(source, dest, ignore=ignore, dirs_exist_ok=True)
    print(f"  shipping {source} as ./{place.as_posix()}", file=out)


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


def submit_experiment(experiment: str | dict, address: str, *, out: str | None = None,
                      results_uri: str | None = None, timeout_s: float | None = None,
                      report: bool = False, stdout=None, stderr=None) -> int:
    """Run ``experiment`` (a file, or an experiment dict) on the cluster at
    ``address``; the exit code (module docstring)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    import yaml
    try:
        data, name = prepare_experiment(experiment)
        local_dir = str(Path(out or f"chaos-results/{name}").resolve())
        job_out = results_uri or local_dir
        with tempfile.TemporaryDirectory(prefix="ftactors-submit-") as tmp:
            modules = stage_package(Path(tmp) / "modules")
            work = Path(tmp) / "work"
            (work / EXPERIMENT).parent.mkdir(parents=True)
            data = stage_programs(data, work, Path.cwd(), out=stderr)
            (work / EXPERIMENT).write_text(yaml.safe_dump(data, sort_keys=False))
            runtime_env = {"working_dir": str(work), "py_modules": [str(modules)]}
            entrypoint = (f"python -m ftactors.tools.submit --job {EXPERIMENT} "
                          f"--out {_quote(job_out)}" + (" --report" if report else ""))
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
def _add_submit_flags(p) -> None:
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
    p.add_argument("--report", action="store_true",
                   help="the job also writes the report (ftactors report) with the results")


def add_submit(sub) -> None:
    p = sub.add_parser(
        "submit", allow_abbrev=False, help="run a chaos experiment, or one run, on a Ray cluster as a Ray job, "
                       "fetch results",
        description="Ship this package, EXPERIMENT and the programs it names to the Ray "
                    "cluster at --address (its dashboard / job API), run `ftactors chaos` "
                    "there as a Ray job, show its progress and fetch results.parquet. "
                    "PROGRAM instead of EXPERIMENT submits one run, given with the flags "
                    "of `ftactors run PROGRAM`. See docs/cluster.md and cluster/README.md.")
    p.add_argument("target", metavar="EXPERIMENT | PROGRAM",
                   help="an experiment YAML file (as for ftactors chaos), or a program "
                        "(path/to/file.py:Class, package.module:Class, or cg, hpl, "
                        "stencil, coupled) followed by the flags of `ftactors run` for it")
    _add_submit_flags(p)
    # the flags after the target: ftactors run's for a program (and ours, anywhere)
    p.add_argument("run_flags", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_submit)


def _cmd_submit(args) -> int:
    # exact names only: --timeout (ftactors run's) must not pass for --timeout-s
    own = argparse.ArgumentParser(prog="ftactors submit", add_help=False, allow_abbrev=False)
    _add_submit_flags(own)
    _, rest = own.parse_known_args(args.run_flags, namespace=args)
    if not args.address:
        print("ftactors submit: give the cluster's job API with --address "
              "http://HOST:8265 (or set RAY_API_SERVER_ADDRESS)", file=sys.stderr)
        return 2
    experiment = args.target
    if is_reference(args.target) or args.target in APPS:  # one run: ftactors run's flags
        run = command_parser(add_run).parse_args(["run", args.target, *rest])
        try:
            experiment = experiment_from_run(run)
        except ExperimentError as exc:
            print(f"ftactors submit {args.target}: {exc}", file=sys.stderr)
            return 2
    elif rest:
        print(f"ftactors submit: unrecognized arguments after {args.target}: "
              f"{' '.join(rest)}", file=sys.stderr)
        return 2
    address = args.address if "://" in args.address else f"http://{args.address}"
    try:
        return submit_experiment(experiment, address, out=args.out,
                                 results_uri=args.results_uri, timeout_s=args.timeout_s,
                                 report=args.report)
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
