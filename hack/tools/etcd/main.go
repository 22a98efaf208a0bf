// Command etcd is etcd's own server entry point, built from the pinned
// go.etcd.io/etcd/server/v3 module so tests never depend on a system etcd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
