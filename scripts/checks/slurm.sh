#!/usr/bin/env bash
# What tests/checks/test_slurm.py needs: Debian's Slurm (slurmctld, slurmd, the client commands)
# and munge, installed without starting them, and a configuration that makes this one machine a
# cluster of two Slurm nodes, HOST-n1 and HOST-n2 (two slurmd on one machine, each on its own
# port, both given all its CPUs), written to $LINKSWEEP_SLURM_DIR (default /tmp/linksweep-slurm).
# A one-node job is this machine as one node; a two-node job also runs the script's workers.
# Starts no daemon: the test starts slurmctld, the two slurmd and munged, and stops them.
# Re-runnable: apt skips what is installed, the folder is rewritten.
set -euo pipefail
dir=${LINKSWEEP_SLURM_DIR:-/tmp/linksweep-slurm}

need=()
for pkg in slurmctld slurmd slurm-client munge; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  # A policy-rc.d answering 101 keeps the packages' scripts from starting the daemons (the
  # test starts its own, from its own config); containers often have one already.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"; }
  apt_install "${need[@]}" || { apt-get update -q && apt_install "${need[@]}"; }  # stale package lists
fi
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
mkdir -p "$dir/state" "$dir/spool-$host-n1" "$dir/spool-$host-n2" "$dir/log"
# proctrack/linuxproc and task/none: no cgroups (a container, or gVisor, has none to give);
# no accounting: sacct would need slurmdbd and a database server, `scontrol show job` suffices.
# MinJobAge keeps a finished job in `scontrol show job` for 10 minutes.
cat > "$dir/slurm.conf" <<CONF
ClusterName=linksweep-check
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=600
KillWait=10
NodeName=$host-n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=$cpus RealMemory=$mem_mb
NodeName=$host-n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=17002 CPUs=$cpus RealMemory=$mem_mb
PartitionName=check Nodes=$host-n[1-2] Default=YES MaxTime=30 State=UP
CONF
echo "slurm.sh: Slurm config for $host as nodes $host-n1, $host-n2 ($cpus CPUs each) in $dir/slurm.conf"
