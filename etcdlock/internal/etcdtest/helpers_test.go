package etcdtest_test

import clientv3 "go.etcd.io/etcd/client/v3"

var serializable = clientv3.WithSerializable()
