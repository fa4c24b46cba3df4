"""Where things are inside a node: the paths, ports and names every node of every run shares."""
from __future__ import annotations

from orchestrate.config.run_config import ELASTIC_RDZV_PORT

WORKSPACE_DIR = "/workspace"


PROJECT_MOUNT_DIR = "/opt/ddp-compose"


SHARED_DIR = "/shared"


# The run's directory on the host (logs, torchrun's error files, progress, the launcher's
# heartbeat), mounted in every node.
RUN_DIR_MOUNT = "/ddp-run"


NODE_MAIN = f"{PROJECT_MOUNT_DIR}/orchestrate/node/main.py"

# The workers' start-up hook (orchestrate/node/worker_start.py), run by torchrun in place of the
# target: it records collectives and answers stack requests, and adds what a run asks for
# (per-rank NCCL host ids, the nccl-as-gloo shim, the collective timeout).
WORKER_START = f"{PROJECT_MOUNT_DIR}/orchestrate/node/worker_start.py"

# A run's own rendezvous store (--rdzv-store container): torch's TCPStore, served at RDZV_PORT.
RDZV_STORE = f"{PROJECT_MOUNT_DIR}/orchestrate/node/rdzv_store.py"


HEARTBEAT_FILE = "heartbeat"

# The variable that names a worker's node (node0, ...) to the code in it (its progress reports and
# snapshots: orchestrate.node's, which a unit test holds equal).
NODE_NAME_ENV = "DDP_NODE"


PROGRESS_SUBDIR = "progress"
# Left in the progress directory as a preempt sends a node SIGTERM (``sigterm-node1``): its workers
# then say again the files they write (orchestrate.node.progress's, which a unit test holds equal).
SIGTERM_MARK_PREFIX = "sigterm-"

# Left in the run's directory by ``stop RUN`` before it stops the nodes, so that whoever follows
# the run (``attach``, a detached run's launcher) says it was stopped, not that it failed.
STOP_REQUEST_FILE = "stop-requested"

# Where ``fault RUN`` notes the faults it does (one JSON line each), so that whoever follows the
# run says them and names them in its summary (orchestrate/faults/live_notes.py).
LIVE_FAULTS_FILE = "live-faults.jsonl"

# Where the workers answer the launcher's requests for their stacks and collectives (the hang
# watchdog, `stacks RUN`), under the run's directory.
DEBUG_SUBDIR = "debug"


# torchrun prefixes every worker line with its global and local rank: "[3|1]:text".
LOG_LINE_PREFIX_TEMPLATE = "[${rank}|${local_rank}]:"


# Each node sits on one project network, so its only interface besides lo is eth0.
NODE_INTERFACE = "eth0"


# The elastic rendezvous store (torchrun's c10d backend) listens here on node0.
RDZV_PORT = ELASTIC_RDZV_PORT


NETWORK = "ddp"


SHARED_VOLUME = "shared"


# Enough for DataLoader workers and NCCL's shared-memory transport; Docker's default is 64 MB.
SHM_SIZE = "2gb"

# The CPU quota's period of every node, in microseconds (the kernel's default): --cpus-per-node
# and a slow fault set the quota as a share of it.
CPU_PERIOD_US = 100_000


# Paths of the node that a --mount may not cover, lie above, or lie inside of: the run's own
# mounts, the image's Python, the system's.
NODE_OWN_PATHS = (WORKSPACE_DIR, PROJECT_MOUNT_DIR, SHARED_DIR, RUN_DIR_MOUNT, "/opt/venv", "/proc", "/sys", "/dev",
                  "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64")
# Directories a mount may lie inside of, but not cover (nor lie above): home, scratch, state.
NODE_OWN_DIRS = ("/home/node", "/tmp", "/var", "/run")


def mount_conflict(target: str) -> str:
    """The node's own path that a mount at ``target`` would cover, lie above or lie inside of
    ("" when none)."""
    above = target.rstrip("/") + "/"
    for own in NODE_OWN_PATHS + NODE_OWN_DIRS:
        if target == own or own.startswith(above) or (own in NODE_OWN_PATHS and target.startswith(own + "/")):
            return own
    return ""
