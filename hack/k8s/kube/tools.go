//go:build tools

// Package tools pins the Kubernetes commands we build, so `go mod tidy` keeps their
// dependencies. Built with `go build k8s.io/kubernetes/cmd/<name>` by ../build.sh.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
