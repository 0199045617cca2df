// Command etcdserver is etcd's own server (go.etcd.io/etcd/server/v3's
// etcdmain), built by package etcdtest from this module of its own so
// that the server's dependencies stay out of package etcdlock's module
// graph, at the version of the client etcdlock uses.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
