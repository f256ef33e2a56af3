#!/usr/bin/env bash
# A GlusterFS volume served on this machine, FUSE-mounted on loopback: the
# distributed backing store of cache mode's tests and benchmarks (issue 13).
#
#   scripts/gluster.sh up      start glusterd if needed, create and start the
#                              volume, mount it; prints the mount point
#   scripts/gluster.sh down    unmount, stop and delete the volume, remove the
#                              brick, stop glusterd if this script started it
#   scripts/gluster.sh status  is it mounted? (exit 0 yes, 1 no)
#
# Settings (environment): CHELL_GLUSTER_VOLUME (chell), CHELL_GLUSTER_MOUNT
# (/mnt/chell-gluster), CHELL_GLUSTER_BRICK (/var/lib/chell-gluster/brick).
# One brick on the root file system ("force": Gluster warns against bricks
# there; here it stands for a remote server). Needs root, glusterfs-server
# (scripts/setup.sh) and /dev/fuse.
#
# Exit status: 0 done, 1 failed, 2 usage, 3 GlusterFS cannot run here
# (no glusterd, no /dev/fuse, or glusterd does not start): callers may skip.
set -uo pipefail

VOL=${CHELL_GLUSTER_VOLUME:-chell}
MNT=${CHELL_GLUSTER_MOUNT:-/mnt/chell-gluster}
BRICK=${CHELL_GLUSTER_BRICK:-/var/lib/chell-gluster/brick}
STATE=/run/chell-gluster
LOG=${CHELL_GLUSTER_LOG:-/tmp/chell-glusterd.log}
HOST=$(hostname)

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gluster.sh: $*" >&2; exit 1; }
cannot() { echo "gluster.sh: GlusterFS cannot run here: $*" >&2; exit 3; }

mounted() { findmnt -n -t fuse.glusterfs "$MNT" >/dev/null 2>&1; }
glusterd_up() { gluster --mode=script pool list >/dev/null 2>&1; }

up() {
	command -v glusterd >/dev/null || cannot "glusterd not found (scripts/setup.sh installs glusterfs-server)"
	[[ -c /dev/fuse ]] || cannot "/dev/fuse is missing"
	[[ $(id -u) -eq 0 ]] || cannot "needs root (glusterd and mount)"
	mkdir -p "$STATE" "$BRICK" "$MNT"
	if ! glusterd_up; then
		glusterd --log-file="$LOG" || cannot "glusterd failed to start (see $LOG)"
		touch "$STATE/started-glusterd"
		for _ in $(seq 100); do glusterd_up && break; sleep 0.1; done
		glusterd_up || cannot "glusterd does not answer (see $LOG)"
	fi
	if ! gluster --mode=script volume info "$VOL" >/dev/null 2>&1; then
		gluster --mode=script volume create "$VOL" "$HOST:$BRICK" force >/dev/null ||
			die "cannot create volume $VOL on $HOST:$BRICK"
	fi
	if ! gluster --mode=script volume status "$VOL" >/dev/null 2>&1; then
		gluster --mode=script volume start "$VOL" force >/dev/null || die "cannot start volume $VOL"
	fi
	if ! mounted; then
		# The volume answers a moment after its start; retry the mount briefly.
		for _ in $(seq 50); do
			mount -t glusterfs "$HOST:/$VOL" "$MNT" 2>/dev/null && break
			sleep 0.2
		done
		mounted || die "cannot mount $HOST:/$VOL on $MNT"
	fi
	echo "$MNT"
}

down() {
	if mounted; then umount "$MNT" || umount -l "$MNT"; fi
	if command -v gluster >/dev/null && glusterd_up; then
		gluster --mode=script volume stop "$VOL" force >/dev/null 2>&1
		gluster --mode=script volume delete "$VOL" >/dev/null 2>&1
	fi
	rm -rf "$BRICK"
	# Only this volume's processes: the FUSE client of its mount, should the
	# unmount have left it (never another volume's: several may be served
	# here, e.g. a CI run and a developer's, CHELL_GLUSTER_VOLUME). glusterd
	# itself only if this script started it and no volume is left.
	pkill -f "glusterfs.*--volfile-id=/?$VOL( |\$)" 2>/dev/null
	if [[ -e $STATE/started-glusterd ]] && [[ -z $(gluster --mode=script volume list 2>/dev/null |
		grep -v '^No volumes present') ]]; then
		pkill -x glusterd; pkill -x glusterfsd
		rm -f "$STATE/started-glusterd"
	fi
	return 0
}

case ${1:-} in
up) up ;;
down) down ;;
status) if mounted; then echo "$MNT"; else echo "not mounted: $MNT" >&2; exit 1; fi ;;
-h | --help) usage ;;
*) usage >&2; exit 2 ;;
esac
