// Command etcd is the etcd server from the same module graph as Kubernetes
// (go.etcd.io/etcd/server/v3 as pinned by k8s.io/kubernetes), because the
// distribution's etcd is older than Kubernetes' supported minimum.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
