"""Emulated multi-node Ray cluster on one Linux machine, with shaped links.

Manual
------
    linksweep cluster up --emulated --nodes 2 --link fast --link slow=500mbit
    export RAY_ADDRESS=...            # the one line `up` prints last
    linksweep run sweeps/emulated.yaml
    linksweep cluster check --emulated    # a gloo all_reduce through each link
    linksweep cluster status --emulated
    linksweep cluster down --emulated

`python -m orchestrator.emulated up|down|status|check ...` does the same without the
linksweep CLI. Needs root (it creates network namespaces) plus `ip` and `tc` from iproute2.
`--link` takes NAME, NAME=RATE, NAME=RATE,DELAY or NAME=,DELAY (RATE a tc bit rate such as
500mbit, DELAY a tc time such as 1ms); without `--link` the links are `fast` and
`slow=500mbit`, the ones sweeps/emulated.yaml names. Exit codes: 0 ok, 1 failed (or, for
`status`, not up), 2 bad input (bad link or fault, not root).

Planted faults, so a fleet check has something to find (module `faults`):

    linksweep cluster up --emulated --nodes 4 --slow-node 2=100mbit
    linksweep cluster up --emulated --nodes 4 --slow-pair 0-1=50mbit --slow-pair 2-3=,5ms

`--slow-node I=RATE[,DELAY]` (repeatable) shapes every interface of node I, ctl included,
in both directions: a NIC that negotiated down. `--slow-pair A-B=RATE[,DELAY]` (repeatable)
shapes only the traffic between nodes A and B, on every link, ctl included: a bad path.
RATE and DELAY take the forms of `--link`. A fault on a shaped link: the slower rate wins
and the delays add. `cluster status` lists the faults; the state file records them
(`faults`, with the nodes' Ray IPs: `planted_faults(state)`). `plant_faults(faults,
state_dir)` replaces the faults of a cluster that is up (the same tc as `up` would plant;
Ray and the links stay up), so one cluster can be checked clean and then with a fault.

Glossary (the same words as the rest of linksweep):
    node    one network namespace holding one Ray worker node (`<prefix>n<i>`).
    link    one named L2 segment: a bridge in the switch namespace that every node
            joins through a veth pair. Each node sees it as the interface `ls-NAME`,
            the same name on every node, so a sweep selects a path with an env that is
            identical on every rank: `GLOO_SOCKET_IFNAME: ls-slow`.
    shape   a rate (tc tbf) and/or a one-way delay (tc netem) on the egress of every
            node's `ls-NAME`. Every byte that crosses a link leaves one node through its
            egress, so both directions of a transfer are shaped, once each.
    ctl     the link Ray's own traffic uses (unshaped); a node's Ray IP is its
            `ls-ctl` address.

Topology for `--nodes 2 --link fast --link slow=500mbit` (prefix "ls"):

    root namespace            lssw (switch namespace)     lsn0, lsn1 (nodes)
    ls-host 198.18.0.254 -- h-0 --+ br-ctl  +-- n0-0 ---- ls-ctl  198.18.0.1, .2
    (Ray head: GCS, 0 CPU)        | br-fast +-- n0-1 ---- ls-fast 198.18.1.1, .2
                                  | br-slow +-- n0-2 ---- ls-slow 198.18.2.1, .2 (tbf)

(Node i's end of link k is `ls-<link>` in `<prefix>n<i>`; its switch-side peer is `n<i>-<k>`.)

Where faults sit, e.g. `--slow-node 2=100mbit --slow-pair 0-1=50mbit`, on every link k:
    lsn2  ls-<link> egress  tbf 100mbit (on a shaped link: the slower rate, delays added)
    lssw  n2-<k>    egress  tbf 100mbit (node 2's ingress; the link's own shape was
                            already applied at the sender's egress)
    lsn0  ls-<link> egress  htb root: class 1:1 the link's shape for all other traffic
                            (none when unshaped), class 1:2 50mbit for `ip dst` = node 1's
                            address on link k (a u32 filter)
    lsn1  ls-<link> egress  the same, class 1:2 for `ip dst` = node 0's address
One root qdisc per device: everything planted on a device is combined into it.

Addresses come from the RFC 2544 benchmarking range 198.18.0.0/15, one /24 per link
(198.18.<k>.0/24, k=0 is ctl): never routed on the internet and unlikely to clash with
a LAN. Only ls-host and its connected route 198.18.0.0/24 appear in the root namespace.

Why the Ray head (GCS + a raylet with no CPUs and no GPUs) runs in the root namespace
rather than in lsn0: a Ray driver attaches to a raylet on its own machine and then
advertises that raylet's IP as its own address. A driver in the root namespace
attached to a raylet in lsn0 would advertise 198.18.0.1, where nothing of the driver
listens, so any object that crosses nodes through the object store (a ray.put()
argument, a return over 100 KiB from another node) hangs. Checked on Ray 2.60: inline
results worked, plasma transfers to/from lsn1 timed out. With the head raylet on
ls-host, the driver advertises 198.18.0.254, which every node reaches over ctl.
Ray therefore lists nodes + 1 alive nodes; the N emulated nodes carry the custom
resource `emulated_node_<i>` and all CPUs/GPUs. The head's ports are fixed and kept
off Ray's defaults so a host `ray start --head` never collides with it.

One module per job (none imports `ray`; Ray is reached only through
`orchestrator.raycluster`, the driver's Ray package; `__main__` is `python -m` above):
    shapes     pure: link shapes, `--link` parsing, the tc of one shaped device, constants.
    faults     pure: planted faults (`--slow-node`, `--slow-pair`), their parsing, checks
               and tc (one root qdisc per device), `planted_faults` for reports.
    blueprint  pure: the plan (`plan_emulated`), every name, address and ip/tc command.
    netns      applies and undoes the plan with `ip`/`tc`; root and preflight checks.
    raynodes   `ray start` argv (pure), starting Ray, the state file, finding and
               stopping the cluster's processes, waiting until the nodes are alive.
    lifecycle  `up`, `down`, `status`, `plant_faults`.
    check      `measure_link_busbw`: a gloo all_reduce through one link; the code that
               runs in its actors is `workloads.linkcheck`.
    describe   what the links are, as `up` recorded them, for `linksweep run`.

`up` writes a JSON state file before each creation step, so `down` after a crash undoes
exactly what was started and nothing else. Ray processes are found again by an env
marker (`LINKSWEEP_EMULATED_ID`), by their namespace (`ip netns pids`), by the pids and
start times `up` recorded, and by their process tree; never by name (`ray stop` would
also stop every other Ray session on the machine).

May import: check, describe, faults, lifecycle, netns, blueprint, raynodes, shapes.
"""

from orchestrator.emulated.blueprint import (
    EmulatedNode,
    EmulatedPlan,
    NodePort,
    Step,
    plan_emulated,
)
from orchestrator.emulated.check import measure_link_busbw
from orchestrator.emulated.describe import recorded_node_ips
from orchestrator.emulated.faults import (
    Fault,
    egress_commands,
    parse_slow_node_arg,
    parse_slow_pair_arg,
    planted_faults,
    validate_faults,
)
from orchestrator.emulated.lifecycle import down, plant_faults, status, up
from orchestrator.emulated.netns import (
    cluster_unavailable,
    netns_available,
    require_root,
    subnet_in_use,
)
from orchestrator.emulated.raynodes import (
    MARKER_ENV,
    OBJECT_STORE_BYTES,
    READY_TIMEOUT_S,
    STATE_FILE,
    RayNodeOptions,
    ray_start_argv,
)
from orchestrator.emulated.shapes import (
    CLIENT_SERVER_PORT,
    CTL_LINK,
    DASHBOARD_AGENT_PORT,
    DASHBOARD_PORT,
    DEFAULT_LINKS,
    DEFAULT_STATE_DIR,
    HEAD_PORT,
    IFACE_PREFIX,
    IFNAMSIZ,
    MAX_LINKS,
    MAX_NODES,
    EmulatedError,
    LinkShape,
    combine_shapes,
    link_subnet,
    parse_link_arg,
    qdisc_commands,
)

__all__ = [
    "CLIENT_SERVER_PORT",
    "CTL_LINK",
    "DASHBOARD_AGENT_PORT",
    "DASHBOARD_PORT",
    "DEFAULT_LINKS",
    "DEFAULT_STATE_DIR",
    "HEAD_PORT",
    "IFACE_PREFIX",
    "IFNAMSIZ",
    "MARKER_ENV",
    "MAX_LINKS",
    "MAX_NODES",
    "OBJECT_STORE_BYTES",
    "READY_TIMEOUT_S",
    "STATE_FILE",
    "EmulatedError",
    "EmulatedNode",
    "EmulatedPlan",
    "Fault",
    "LinkShape",
    "NodePort",
    "RayNodeOptions",
    "Step",
    "combine_shapes",
    "down",
    "egress_commands",
    "link_subnet",
    "measure_link_busbw",
    "cluster_unavailable",
    "netns_available",
    "parse_link_arg",
    "parse_slow_node_arg",
    "parse_slow_pair_arg",
    "plan_emulated",
    "plant_faults",
    "planted_faults",
    "qdisc_commands",
    "ray_start_argv",
    "recorded_node_ips",
    "require_root",
    "status",
    "subnet_in_use",
    "up",
    "validate_faults",
]
