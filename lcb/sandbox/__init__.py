"""Processes and containment: how an untrusted program runs, and the threat model.

This package runs model-written code in contained processes: graded programs (for
`lcb.grading`, which imports this package, never the reverse) and the agents' `python_exec`
snippets (`python_exec.run_python`). A grading slot (`slot`) is a judge (`judge`: the plumbing;
grading gives it its request handler) and a zygote (`zygote`), started contained (`launch`);
the zygote forks one program host per program (`host`, `hosting`, `host_stdin`), which forks
the program's processes (`process`, `child`, `exits`, `official_child`, after the import
`prelude`). The layers: uids and CPUs claimed per slot (`claims`), cgroups (`cgroups`),
rlimits and process hygiene (`contain`), uid switch and capabilities (`privilege`), mount and
network namespaces (`mounts`), Landlock (`landlock`, with what programs may read: `visible`),
seccomp (`seccomp`), working directories (`workdirs`); what crosses between processes is
data (`wire`, `values`); `libc` loads the C library once. docs/architecture.md draws the
processes and what crosses each edge.

Threat model. The adversary is a model-written program (a graded program or a python_exec
snippet) that tries to pass without solving, or to reach lcb, its secrets, other programs or the
host. What holds, per tier and privilege:

Always (both tiers, any uid):
- Answers stay out of the program. A graded program's processes are forked from a zygote
  that never held a test (`lcb.sandbox.zygote`); the judge (`lcb.sandbox.judge`, running
  grading's mode drivers) keeps the expected outputs and computes every verdict: stdin output
  is compared there, a functional return value crosses as data (`lcb.sandbox.values`) and is
  compared there. Nothing the program writes can start, stop or stretch its clock, which runs
  in the judge and its host.
- Data-only channels. Everything that crosses from a program's side to lcb's is size-capped
  JSON checked against a schema and matched to its request (`lcb.sandbox.wire`); nothing is
  unpickled. A malformed answer fails that program (or that slot), never shifts another's grade.
- Nothing of lcb is reachable. lcb's processes are non-dumpable (no `/proc/<pid>/fd`,
  `environ`, `mem` or ptrace for the same uid); programs get a scrubbed environment (no API
  key), exactly fds 0/1/2 (plus the functional channel to the judge), their own session.
- Landlock (Linux >= 5.13, where enabled): a program reads only the system directories, the
  interpreter and its packages (`lcb.sandbox.visible`: not lcb's checkout, nor, when lcb is
  installed from a wheel, the `lcb` package and its records in `site-packages`, whose other
  entries stay readable; not its data, results, any home, nor the cgroup files), writes only
  its own `/tmp` or working directory, cannot bind or connect TCP (ABI >= 4), nor signal or
  connect to an abstract socket of any process outside its domain (ABI >= 6).
- seccomp (x86-64, aarch64; `lcb.sandbox.seccomp`): no kernel keyrings (a key would outlive its
  program and reach later ones), no new user namespaces, no io_uring, userfaultfd,
  perf_event_open or bpf, no vsock, no other syscall ABI; no change to another process's
  limits or scheduling (`prlimit`, `setpriority`, `sched_set*`, `ioprio_set` on any pid but
  the caller's own, `sched_setaffinity` at all): its host runs as its uid, and could
  otherwise be starved of descriptors or CPU, turning the program's failure into `infra`, and
  a program could leave its slot's CPU for its neighbour's; no exact page-cache probe or
  eviction (`mincore`, `cachestat`, `posix_fadvise`, RWF_NOWAIT reads, MADV_PAGEOUT/COLD,
  Linux AIO). Where a layer below is missing, it stands in: no `socket()` without the slot's
  network namespace (`socketpair` stays), no memfd without a memory cgroup that enforces the
  cap, no System V IPC or POSIX message queues without a private IPC namespace.
- No socket a program opens reaches another program or lcb, UDP and unix sockets included:
  as root each slot and each python_exec run has a network namespace of its own (its loopback
  is down; programs of a slot run one after another), otherwise `socket()` is refused. No
  message channel is open between programs; what the kernel shares stays (see below).
- A program cannot make its host fail in its place: it cannot signal it (Landlock scoping,
  ABI 6), change its limits or scheduling (seccomp), make the OOM killer choose it (the
  program's processes have a memory group of their own, below), or leave its working
  directory in a state the host cannot reset (`lcb.sandbox.workdirs`). Should it find another
  way, a host lost at the same test on two slots is the program's `runtime_error`
  (`lcb.grading.pool`), so its failure never becomes `infra`.
- Resources: rlimits (address space `LCB_FUNCTIONAL_MEMORY_BYTES` / `LCB_SANDBOX_MEMORY_BYTES`,
  CPU seconds, 16 MiB per file and captured stdout, 256 files, no core dumps; without a
  memory cgroup, memfds are refused, as their pages escape the address-space cap), a wall-clock
  deadline, and after every run every process it started is killed and reaped (the program's
  host and the zygote are child subreapers). stderr is drained, never capped, never judged.

As root (lcb's usual case in containers and on cluster nodes), also:
- each grading slot and each python_exec run has a uid of its own (`lcb.sandbox.claims`), with
  no capabilities and `no_new_privs`: programs cannot signal, trace or read lcb or one another,
  cannot write lcb's files, and RLIMIT_NPROC bounds their tasks;
- a private, size-capped tmpfs `/tmp` and `/dev/shm`, a private IPC namespace and a `/proc`
  that shows only its own uid's processes, per program: nothing it writes outlives it or
  reaches the next program, and it sees neither lcb's processes nor other programs';
- a network namespace per slot (and per python_exec run), loopback down (see above);
- where cgroup v1 is mounted: per slot a pids group (pids.max), a memory group, and a cpu group
  of equal weight, so one program cannot starve another graded beside it into a time limit.
  The program's own processes join a memory group nested in the slot's right after their
  fork; its host sets that group's limit to the program's own cap, exactly, when it is
  loaded, so everything a program holds (its memory, memfd, tmpfs and shared-memory pages)
  counts against its own mode's cap; beyond it one of the program's processes is killed
  (`memory_limit`), never its host or the zygote, which stay outside that group (the slot's
  group has `MEMORY_HEADROOM`, 96 MiB, above the larger cap for them). A python_exec run's
  snippet shares its helper's memory group: its cap plus the headroom.

`sandbox="bwrap"` adds bubblewrap around judges, zygotes and python_exec: no network at all (UDP
too), a read-only root, its own PID, IPC and UTS namespaces, `--cap-drop ALL` (a zygote keeps
only what it needs to confine programs) and no user namespace as root (programs run as a real,
unprivileged uid, so a remount is impossible).

What does NOT hold:
- As a non-root user: programs run as lcb's uid, so the uid, tmpfs, IPC, network, /proc and
  cgroup layers above are missing (seccomp refuses sockets, memfds and shared System V IPC
  instead): a program can write files only where Landlock allows (its working directory,
  bounded by the disk, or by /tmp's size where /tmp is a tmpfs, not by its memory cap), see
  other processes in /proc (not their memory, descriptors or environment), and, without
  Landlock, signal lcb.
- As root without a cgroup-v1 memory controller (cgroup v2): a program's private `/tmp`,
  `/dev/shm` and System V segments (256, 64 and 64 MiB) hold pages beyond its cap.
- Without Landlock signal scoping (ABI < 6, before Linux 6.12) a program can signal and stop
  its own host (the host is its side; with scoping each program process sits in a Landlock
  domain nested in its host's and the signal is refused): that fails its own grade only (lcb
  cannot tell who killed or stopped a host, so it grades the program again on a fresh slot;
  lost again at the same test, it is the program's `runtime_error`, never a time limit).
- Timing and other side channels through state the kernel shares stay open between programs
  graded at the same time or one after another on a machine: the page cache (how long a read
  takes, the major page faults a process counts), global counters (`/proc/meminfo`,
  `/proc/stat`, ...), CPU and memory contention. A program learns
  its verdicts (in functional mode the order of tests says whether its previous answer
  passed: the next test comes only after a pass, as in LiveCodeBench), so samples of one
  problem graded together or in turn can still pool what they learn through these. The
  exact probes are refused (seccomp, above), but timing is enough: a timed one-byte read
  tells a cached page (about 1 us) from one read from disk (about 60 us), and samples that
  only read a system file pooled six unguessable answers as fast as with the refused calls.
  Only separate machines (or VMs) keep samples apart.
- lcb's processes ask for an OOM score of -1000, which takes CAP_SYS_RESOURCE: in a
  container without it (Docker's default capabilities) they keep the score they inherit
  (usually 0; the zygote reports its own as `isolation["oom_score_adj"]`), still below the
  program's side (1000): a machine-wide OOM kills a program's side first, though lcb's
  processes are no longer exempt. Within a slot this does not matter: the program's memory
  group decides.
- Programs of one slot run one after another as the slot's uid; what one leaves is killed
  before the next starts, and a slot whose leftovers survive the kill is replaced.
- Without Landlock (old kernels, LSM disabled) programs can read any file their uid can read,
  including the data files: keep data and results unreadable to the programs' uid, or use bwrap.
- `--grader official` runs LiveCodeBench's in-process grader: the program shares its process
  with the expected outputs and can forge its own result. It is for trusted comparisons; every
  other layer above still applies. Use the default grader for untrusted code.
- Kernel exploits. For stronger isolation run lcb in a VM.

`run_python` (the agents' `python_exec`) runs a snippet with the same confinement in a fresh
helper (`lcb.sandbox.python_exec`).
"""
