#!/bin/sh
# SPDX-License-Identifier: MIT
# A one-node Slurm for the tests (munge, slurmctld, slurmd; no systemd), loopback only,
# with 4 fake GPUs (gres.conf File= device nodes). As root only.
#   tests/slurm.sh start DIR    prints nothing and exits 0 once `srun true` works;
#                               else one line saying why, exit 1
#   tests/slurm.sh stop DIR
set -u
cmd=$1 D=$2
stop() {
  for p in slurmd slurmctld munged; do
    [ -f "$D/$p.pid" ] && kill "$(cat "$D/$p.pid")" 2>/dev/null
  done
  sleep 0.5
  for p in slurmd slurmctld munged; do
    [ -f "$D/$p.pid" ] && kill -9 "$(cat "$D/$p.pid")" 2>/dev/null
    rm -f "$D/$p.pid"
  done
  return 0
}
if [ "$cmd" = stop ]; then stop; exit 0; fi
fail() { echo "$1"; stop; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "not root: the test Slurm runs its daemons as root"
for b in munged mungekey slurmctld slurmd srun sbatch scontrol squeue; do
  command -v $b >/dev/null || fail "no $b (Debian: munge slurmctld slurmd slurm-client)"
done
stop
rm -rf "$D"
mkdir -p "$D/key" "$D/sock" "$D/state" "$D/spool" "$D/log" || fail "cannot make $D"
chmod 0755 "$D/sock"
mungekey -c -k "$D/key/munge.key" >/dev/null 2>&1 || fail "mungekey failed"
chmod 0600 "$D/key/munge.key"
munged --key-file="$D/key/munge.key" --socket="$D/sock/munge.socket" \
  --pid-file="$D/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/munge.seed" -f \
  >/dev/null 2>&1 || fail "munged would not start (see $D/log/munged.log)"
H=$(hostname -s)
cat > "$D/slurm.conf" <<C
ClusterName=gpudtest
SlurmctldHost=$H(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/sock/munge.socket,cred_expire=5
SlurmUser=root
SlurmctldPort=46817
SlurmdPort=46818
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SchedulerType=sched/backfill
JobRequeue=1
KillWait=5
ReturnToService=2
MinJobAge=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
MpiDefault=none
NodeName=$H NodeAddr=127.0.0.1 CPUs=$(nproc) Gres=gpu:4 State=UNKNOWN
PartitionName=main Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
C
echo "Name=gpu File=/dev/tty[0-3]" > "$D/gres.conf"
export SLURM_CONF="$D/slurm.conf"
# By these names: started as slurmctld-wlm / slurmd-wlm they drop Gres=.
slurmctld -i -f "$D/slurm.conf" >/dev/null 2>&1 || fail "slurmctld would not start (see $D/log)"
slurmd -f "$D/slurm.conf" >/dev/null 2>&1 || fail "slurmd would not start (see $D/log)"
i=0
until timeout 20 srun -n 1 true >/dev/null 2>&1; do
  i=$((i + 1))
  [ $i -lt 10 ] || fail "Slurm started but srun does not run (see $D/log)"
  sleep 1
done
exit 0
