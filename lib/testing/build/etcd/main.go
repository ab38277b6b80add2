// Command etcd runs the pinned etcd server (go.etcd.io/etcd/server/v3/etcdmain) for the local
// control plane used by the tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
