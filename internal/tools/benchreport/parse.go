package main

import (
	"slices"
	"strconv"
	"strings"
)

// bench is one benchmark's results over -count runs: every unit's values.
type bench struct {
	pkg, name string
	values    map[string][]float64 // unit → one value per run
	units     []string             // in first-seen order
}

func (b *bench) median(unit string) float64 {
	v := slices.Clone(b.values[unit])
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// parse reads go test -bench output: "pkg: …" lines and benchmark lines of
// the form "BenchmarkName-N  iterations  value unit  value unit …".
func parse(out string) []bench {
	var list []bench
	index := map[string]int{}
	pkg := ""
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		k := pkg + " " + name
		i, ok := index[k]
		if !ok {
			i = len(list)
			index[k] = i
			list = append(list, bench{pkg: pkg, name: strings.TrimPrefix(name, "Benchmark"), values: map[string][]float64{}})
		}
		b := &list[i]
		for j := 2; j+1 < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				continue
			}
			unit := f[j+1]
			if _, seen := b.values[unit]; !seen {
				b.units = append(b.units, unit)
			}
			b.values[unit] = append(b.values[unit], v)
		}
	}
	return list
}
