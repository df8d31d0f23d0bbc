// Command etcd is upstream etcd's server entry point, built from Go modules because
// Debian's etcd is too old for current kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
