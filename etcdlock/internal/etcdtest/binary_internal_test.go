package etcdtest

import "testing"

func TestSupportedReadsTheServerVersion(t *testing.T) {
	for version, want := range map[string]bool{
		"etcd Version: 3.4.23\nGit SHA: Not provided\nGo Version: go1.19.8\n": true,
		"etcd Version: 3.7.3\n":  true,
		"etcd Version: 4.0.0\n":  true,
		"etcd Version: 3.3.25\n": false,
		"etcd Version: 2.3.8\n":  false,
		"etcd Version: x.y\n":    false,
		"etcd 3.5.0\n":           false,
		"":                       false,
	} {
		if got := supported(version); got != want {
			t.Errorf("supported(%q) = %v, want %v", version, got, want)
		}
	}
}
