package api

import (
	"strconv"
	"strings"
)

// MetricSample splits a line of a Prometheus text exposition (an engine's
// GET /metrics) into its metric name and value; ok is false for a
// comment, a blank line or a line that is not a sample. Labels are
// skipped and a timestamp after the value is dropped. The router reads an
// engine's process_start_time_seconds with it, `profile` vLLM's request
// gauges.
func MetricSample(line string) (name, value string, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", "", false
	}
	end := strings.IndexAny(line, "{ \t")
	if end <= 0 {
		return "", "", false
	}
	name, rest := line[:end], line[end:]
	if rest[0] == '{' {
		close := strings.LastIndexByte(rest, '}')
		if close < 0 {
			return "", "", false
		}
		rest = rest[close+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", false
	}
	return name, f[0], true
}

// MetricSums reads a Prometheus text exposition and returns, for each of
// names that has at least one sample, the sum of its samples over every
// label set (vLLM labels each series with model_name and engine). A name
// with no sample, or only unreadable values, is absent from the map.
func MetricSums(text string, names ...string) map[string]float64 {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	sums := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, value, ok := MetricSample(line)
		if !ok || !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		sums[name] += v
	}
	return sums
}
