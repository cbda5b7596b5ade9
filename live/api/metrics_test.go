package api

import "testing"

// A sample line gives its name and value, with or without labels, a
// timestamp or tabs; comments, blank lines and lines without a value give
// nothing.
func TestMetricSample(t *testing.T) {
	for _, c := range []struct{ line, name, value string }{
		{"process_start_time_seconds 1.7e9", "process_start_time_seconds", "1.7e9"},
		{`vllm:num_requests_running{engine="0",model_name="m"} 3`, "vllm:num_requests_running", "3"},
		{"  vllm:num_requests_waiting 0 1700000000000", "vllm:num_requests_waiting", "0"},
		{"process_start_time_seconds\t12", "process_start_time_seconds", "12"},
		{`m{a="}"} 4`, "m", "4"},
	} {
		n, v, ok := MetricSample(c.line)
		if !ok || n != c.name || v != c.value {
			t.Errorf("%q: %q %q %v, want %q %q", c.line, n, v, ok, c.name, c.value)
		}
	}
	for _, line := range []string{"", "# HELP m help", "# TYPE m gauge", "m", `m{a="b"}`, `m{a="b" 3`, "{a} 3"} {
		if n, v, ok := MetricSample(line); ok {
			t.Errorf("%q: read as %q %q", line, n, v)
		}
	}
}

// MetricSums adds a name's samples over its label sets and leaves out a
// name with no readable sample.
func TestMetricSums(t *testing.T) {
	text := `# HELP vllm:num_requests_running Requests.
vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:num_requests_running{engine="1",model_name="m"} 3
vllm:nixl_xfer_time_seconds_count{engine="0",model_name="m"} 7
vllm:num_requests_waiting{engine="0"} NaNx
other 9
`
	got := MetricSums(text, "vllm:num_requests_running", "vllm:nixl_xfer_time_seconds_count", "vllm:num_requests_waiting", "absent")
	if len(got) != 2 || got["vllm:num_requests_running"] != 5 || got["vllm:nixl_xfer_time_seconds_count"] != 7 {
		t.Fatalf("got %v", got)
	}
}
