// Command matrix renders the JSON that `make matrix` writes (one file per
// module, internal/testing/matrix's Report) as docs/matrix.md and one SVG
// plot per workload:
//
//	go run ./internal/tools/matrix -in DIR -out docs
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	in := flag.String("in", "", "directory of the <module>.json files make matrix wrote")
	out := flag.String("out", "docs", "directory to write matrix.md and matrix-<workload>.svg to")
	flag.Parse()
	if *in == "" {
		fmt.Fprintln(os.Stderr, "matrix: -in DIR is required")
		os.Exit(2)
	}
	if err := render(*in, *out, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(1)
	}
}

func render(in, out string, args []string) error { return fmt.Errorf("not yet") }
