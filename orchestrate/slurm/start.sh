#!/bin/sh
# Start of every container of the simulated Slurm cluster, as root:
#   start.sh UID:GID COMMAND...
# installs the run's munge key and slurm.conf, makes the host user (jobs run as them), starts
# munged, and then runs COMMAND (the node supervisor around slurmctld or slurmd).
set -eu
run_as="$1"
shift
uid="${run_as%%:*}"
gid="${run_as##*:}"
conf=/ddp-run/slurm
install -o munge -g munge -m 0400 "$conf/munge.key" /etc/munge/munge.key
install -m 0644 "$conf/slurm.conf" /etc/slurm/slurm.conf
mkdir -p /run/munge /var/spool/slurmctld /var/spool/slurmd
chown munge:munge /run/munge
if [ "$uid" != 0 ]; then
    getent group "$gid" >/dev/null || groupadd -g "$gid" ddp
    getent passwd "$uid" >/dev/null || useradd -u "$uid" -g "$gid" -M -d /home/node -s /bin/bash ddp
fi
su -s /bin/sh munge -c "munged --force"
exec "$@"
