// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 at the
// version pinned in ../versions.env, so the local cluster needs no downloads.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
