#!/usr/bin/env bash
# Prints the host state the local cluster's real node touches, to compare before
# `make cluster` and after `make cluster-down`:
#
#   hack/node/host-snapshot.sh >before; make cluster; ...; make cluster-down
#   hack/node/host-snapshot.sh >after; diff before after    # no output: host as it was
#
# Kernel tunables (all but counters: dentries, files, inodes, quota operations, the last
# pid, random), iptables and ip6tables rules and chains of every table, nft tables,
# network interfaces, addresses and routes, network namespaces, mounts, the cgroup tree
# (two levels), the host directories the node may write to, and the node's processes.
set -uo pipefail

section() { printf '\n## %s\n' "$1"; }

section sysctl
sysctl -a 2>/dev/null | grep -vE '^(fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.[a-z_]+)|kernel\.(ns_last_pid|random\.[a-z_]+|pty\.nr)|net\.netfilter\.nf_conntrack_count) '

for t in iptables ip6tables; do
  section "$t-save"
  command -v "$t-save" >/dev/null 2>&1 && "$t-save" 2>/dev/null | grep -vE '^#' | sed -E 's/\[[0-9]+:[0-9]+\]$//'
  section "$t-save KUBE- lines"
  command -v "$t-save" >/dev/null 2>&1 && { "$t-save" 2>/dev/null | grep -c KUBE- || true; }
done
if command -v nft >/dev/null 2>&1; then
  section "nft tables"
  nft list tables 2>/dev/null
fi

section links
ip -o link show | sed -E 's/^[0-9]+: //; s/ qlen [0-9]+//; s/link\/ether [0-9a-f:]+ brd [0-9a-f:]+//' | sort
section addresses
ip -o addr show | awk '{print $2, $3, $4}' | sort
section routes
ip route show table all 2>/dev/null | sort
section netns
ip netns list 2>/dev/null | sort
ls -A /run/netns 2>/dev/null

section mounts
awk '{print $5, $9, $4}' /proc/self/mountinfo | sort

section cgroups
find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d 2>/dev/null | sort
f=/sys/fs/cgroup/cgroup.subtree_control
[ -f "$f" ] && echo "$f: $(cat "$f")"

section "host directories"
for d in /run /var/run /var/lib /var/log /opt /etc/cni /etc/kubernetes /var/lib/cni /var/log/containers \
  /var/log/pods /run/containerd /run/containerd/s /var/lib/kubelet; do
  if [ -e "$d" ]; then echo "$d $(stat -c '%a %U' "$d"): $(find "$d/" -mindepth 1 -maxdepth 1 -printf '%f ' | tr ' ' '\n' | sort | tr '\n' ' ')"; else echo "$d absent"; fi
done

section processes
# shellcheck disable=SC2009 # one line per process name, whoever started it
ps -eo comm= | grep -E '^(containerd|containerd-shim|kubelet|runc|pause|busybox)' | sort | uniq -c
