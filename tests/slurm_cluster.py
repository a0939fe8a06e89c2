"""A real single-node Slurm cluster for the `slurm` tests: munged, slurmctld and slurmd from
Debian's `munge` and `slurm-wlm`, each started in the foreground under a test folder.

- Everything the daemons write lives in that folder: a fresh munge key and socket, the state
  and spool folders, the logs, `slurm.conf`. Nothing under /etc is read or written, so a
  cluster this machine may run is left alone, and two fixtures never share a port.
- The one node (`lcbnode`, at 127.0.0.1) declares `cpus` CPUs whatever this machine has
  (`SlurmdParameters=config_overrides`), so array parallelism, not the hardware, bounds the
  tasks at once. Accounting is off (`accounting_storage/none`, no slurmdbd): `sacct` answers
  "accounting storage is disabled", as on many small clusters, which `lcb grid` must cope with.
- `KillWait=3`: a cancelled or requeued task gets SIGTERM, then SIGKILL 3 s later.
  `cred_expire=5`: a requeued task may start again 5 s after it ended (Slurm's default holds
  it for 120 s: its job credential stays revoked that long, and a launch before fails).
  `sched_interval=1`, `bf_interval=1`: the scheduler looks at pending tasks every second.
- Clients find the cluster through `SLURM_CONF` (`cluster.env`).
- `unavailable()` says why no cluster can start here (not root, a daemon missing): the tests
  skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")
NODE = "lcbnode"


def _program(name: str) -> str:
    """The daemon or client's path (daemons live in /usr/sbin, not always on PATH)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    return found or name


def unavailable() -> str | None:
    """Why no cluster can start here (None: one can)."""
    if os.geteuid() != 0:
        return "a real Slurm cluster needs root (slurmd runs as root)"
    missing = [name for name in DAEMONS if _program(name) == name]
    if missing:
        return f"Debian's slurm-wlm and munge are not installed (missing {', '.join(missing)})"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _conf(folder: Path, cpus: int) -> str:
    host = socket.gethostname()
    return f"""\
ClusterName=lcbtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={folder}/munge/socket,cred_expire=5
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=3
SchedulerParameters=sched_interval=1,bf_interval=1
JobRequeue=1
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=lcb Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    """A running cluster: its folder, its `slurm.conf`, the environment its clients need."""

    folder: Path
    conf: Path

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> str:
        """A Slurm client command against this cluster; its stdout."""
        done = subprocess.run(list(argv), env={**os.environ, **self.env}, capture_output=True,
                              text=True, timeout=60, check=False)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def tasks(self, array: str) -> dict[str, str]:
        """Each task of an array and its state, as squeue sees them (finished ones too)."""
        out = self.run("squeue", "-h", "-r", "-t", "all", "-j", array, "-o", "%i %T",
                       check=False)
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    def log(self, name: str) -> str:
        path = self.folder / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _munge(folder: Path) -> subprocess.Popen:
    munge = folder / "munge"
    munge.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    return _start([_program("munged"), "-F", "-f", f"--key-file={key}", f"--socket={munge}/socket",
                   f"--pid-file={munge}/pid", f"--seed-file={munge}/seed",
                   f"--log-file={folder}/log/munged.log"], folder / "log" / "munged.out")


def _wait_idle(cluster: SlurmCluster, daemons: list[subprocess.Popen], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        dead = [d.args[0] for d in daemons if d.poll() is not None]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited at start:\n"
                               f"{cluster.log('slurmctld')[-2000:]}{cluster.log('slurmd')[-2000:]}")
        state = cluster.run("sinfo", "-h", "-n", NODE, "-o", "%T", check=False).strip()
        if state.startswith("idle"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the Slurm node did not come up in {limit_s:.0f} s:\n"
                       f"{cluster.log('slurmctld')[-2000:]}")


@contextlib.contextmanager
def slurm_cluster(folder: Path, *, cpus: int = 4) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd under `folder`; stop them at the end."""
    for name in ("state", "spool", "log"):
        (folder / name).mkdir(parents=True)
    conf = folder / "slurm.conf"
    conf.write_text(_conf(folder, cpus), encoding="utf-8")
    cluster = SlurmCluster(folder, conf)
    daemons = [_munge(folder)]
    try:
        time.sleep(0.2)
        daemons.append(_start([_program("slurmctld"), "-D", "-i", "-f", str(conf)],
                              folder / "log" / "slurmctld.out"))
        daemons.append(_start([_program("slurmd"), "-D", "-N", NODE, "-f", str(conf)],
                              folder / "log" / "slurmd.out"))
        _wait_idle(cluster, daemons[1:], limit_s=30)
        yield cluster
    finally:
        with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
            cluster.run("scancel", "--full", "-u", "root", check=False)
            deadline = time.monotonic() + 15  # no slurmstepd outlives its slurmd
            while cluster.run("squeue", "-h", check=False).strip() and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
        for daemon in reversed(daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, 15)
        for daemon in reversed(daemons):
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, 9)
                daemon.wait()
