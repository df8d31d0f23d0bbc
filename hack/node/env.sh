# shellcheck shell=bash disable=SC2034,SC2154
# Names and places of the local cluster's real node, shared by hack/cluster.sh,
# hack/node/node.sh and hack/images.sh (SC2034: they use them). Needs $repo, the
# checkout (SC2154).

# The node, its bridge and its addresses. The bridge is ours alone: the node's only
# address (kubelet --node-ip, InternalIP) and the CNI bridge of the pods; nothing on it
# routes elsewhere.
node_name=flowline-node-0
node_bridge=flbr0
node_ip=10.245.0.1
node_prefix=24
node_subnet=10.245.0.0/$node_prefix
node_pod_range=(10.245.0.10 10.245.0.250)

# Data of this checkout's node (removed by `make cluster-down`), and its runtime
# directory: sockets, runc state and network namespaces, on a short path (a unix
# socket path must fit in 108 bytes). Neither is shared with a system containerd.
node_dir="$repo/.flowline/cluster/node"
node_run="/run/flowline-$(printf %s "$repo" | sha256sum | cut -c1-10)"
node_sock="$node_run/containerd.sock"

# Images the node runs; none can be pulled (nothing leaves this machine).
image_pause=flowline.local/pause:1
image_toolbox=flowline.local/toolbox:1
image_step=flowline.local/flowline:dev
# The step image's reference, one line, written once that image is imported.
step_image_file="$repo/.flowline/cluster/step-image"
