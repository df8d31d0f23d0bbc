// The pause process of the local node's pod sandboxes: no dependencies, built by
// hack/images.sh with CGO_ENABLED=0 into the flowline.local/pause image.
module flowline.io/hack/node/pause

go 1.22
